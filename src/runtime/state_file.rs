//! The state file (`state_file:`): quarantine windows, their reasons and
//! strikes, kept across a cold restart. Its JSON format, the bounded read
//! at start-up (any problem: logged, and a clean start), the atomic save,
//! and the writer task that saves after each change, at most once a
//! second, and once more at shutdown.

use std::fs::{self, File};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::files::{self, read_bounded, refuse_special_file};
use crate::ops::control::Control;
use crate::pool::health::QuarantineReason;
use crate::pool::registry::Pool;
use crate::pool::saved::{HealthChanges, SavedBackend};
use crate::pool::snapshot::QuarantineSnapshot;

/// The format this build writes and reads.
pub const VERSION: u32 = 1;

/// A state file larger than this is refused as corrupt: a real one holds a
/// few hundred bytes per backend.
pub const MAX_BYTES: u64 = 16 << 20;

/// Writes are at least this far apart; changes in between join the next.
const MIN_GAP: Duration = Duration::from_secs(1);

/// After a failed write, the next attempt comes this soon even without a
/// change.
const RETRY: Duration = Duration::from_secs(5);

/// The saved health of each pool, by pool name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedState {
    /// `(pool name, its backends' records)`.
    pub pools: Vec<(String, Vec<SavedBackend>)>,
    /// When the file was written, as its writer's clock read: `None` for
    /// records taken from the pools, or a file whose time does not parse.
    pub written_at: Option<SystemTime>,
}

impl SavedState {
    /// The records of every pool in `pools` now.
    pub fn of(pools: &[Arc<Pool>]) -> SavedState {
        let pools = pools
            .iter()
            .map(|p| (p.name.clone(), p.saved().save()))
            .collect();
        SavedState {
            pools,
            written_at: None,
        }
    }

    /// Put the records back on the pools of the same name; returns how many
    /// backends took one.
    pub fn restore(&self, pools: &[Arc<Pool>], wall_now: SystemTime) -> usize {
        pools
            .iter()
            .filter_map(|p| {
                let (_, saved) = self.pools.iter().find(|(name, _)| *name == p.name)?;
                Some(p.saved().restore(saved, wall_now))
            })
            .sum()
    }

    /// How far ahead of `wall_now` the file says it was written: a clock
    /// that was wrong then (or is now), so its windows' ends are suspect.
    pub fn ahead_of(&self, wall_now: SystemTime) -> Option<Duration> {
        let ahead = self.written_at?.duration_since(wall_now).ok()?;
        (!ahead.is_zero()).then_some(ahead)
    }

    /// Windows counted from `wall_now` as they stood at `written_at`, for
    /// a file written ahead of `wall_now`: what was left of a window then
    /// is the most that can be left now. Returns how many windows it has.
    pub fn rebase(&mut self, wall_now: SystemTime) -> usize {
        let Some(written_at) = self.written_at else {
            return 0;
        };
        let windows = self.pools.iter_mut().flat_map(|(_, b)| b.iter_mut());
        let windows = windows.filter_map(|b| b.quarantine.as_mut());
        let mut count = 0;
        for q in windows {
            let left = q.until.duration_since(written_at).unwrap_or_default();
            q.until = wall_now.checked_add(left).unwrap_or(wall_now);
            count += 1;
        }
        self.written_at = Some(wall_now);
        count
    }
}

/// Why a state file was not used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// There is none yet (a first start).
    #[error("no state file yet")]
    Missing,
    /// It could not be read.
    #[error("cannot read it: {0}")]
    Unreadable(std::io::Error),
    /// Over [`MAX_BYTES`].
    #[error("larger than {MAX_BYTES} bytes")]
    TooLarge,
    /// Written by a build with another format.
    #[error("version {0} is not the version this build reads ({VERSION})")]
    Version(u64),
    /// Not a state file: bad JSON, a missing field, a bad time.
    #[error("corrupt: {0}")]
    Corrupt(String),
}

impl LoadError {
    /// The `reason` field of `state_ignored`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LoadError::Missing => "missing",
            LoadError::Unreadable(_) => "unreadable",
            LoadError::TooLarge | LoadError::Version(_) | LoadError::Corrupt(_) => "corrupt",
        }
    }
}

/// The file as written.
#[derive(Debug, Serialize, Deserialize)]
struct FileV1 {
    version: u32,
    written_at: String,
    pools: Vec<FilePool>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FilePool {
    name: String,
    backends: Vec<FileBackend>,
}

/// What the contract keeps of a backend: window, reason, strikes. Heights
/// and probe results are not kept: they are stale after a restart, and
/// the first probes run at once.
#[derive(Debug, Serialize, Deserialize)]
struct FileBackend {
    name: String,
    addr: String,
    strikes: u32,
    quarantine: Option<FileQuarantine>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FileQuarantine {
    /// RFC 3339, UTC.
    until: String,
    reason: QuarantineReason,
}

/// Only the version, read first so another format is named as such.
#[derive(Deserialize)]
struct Versioned {
    version: u64,
}

/// The contents of a state file, `written_at` stamped.
///
/// # Errors
/// serde_json's, which a `SavedState` never gives.
///
/// # Panics
/// For a time before 1970 or after 9999 (the format's range), which
/// neither a decoded file nor a pool's window (a year at most) has.
pub fn encode(state: &SavedState, written_at: SystemTime) -> serde_json::Result<Vec<u8>> {
    let time = |t: SystemTime| humantime::format_rfc3339_millis(t).to_string();
    let pools = state.pools.iter().map(|(name, backends)| FilePool {
        name: name.clone(),
        backends: backends
            .iter()
            .map(|b| FileBackend {
                name: b.name.clone(),
                addr: b.addr.clone(),
                strikes: b.strikes,
                quarantine: b.quarantine.map(|q| FileQuarantine {
                    until: time(q.until),
                    reason: q.reason,
                }),
            })
            .collect(),
    });
    let file = FileV1 {
        version: VERSION,
        written_at: time(written_at),
        pools: pools.collect(),
    };
    let mut bytes = serde_json::to_vec_pretty(&file)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Parse the contents of a state file.
///
/// # Errors
/// [`LoadError::Version`] or [`LoadError::Corrupt`]; never a panic,
/// whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<SavedState, LoadError> {
    let corrupt = |e: serde_json::Error| LoadError::Corrupt(e.to_string());
    let Versioned { version } = serde_json::from_slice(bytes).map_err(corrupt)?;
    if version != u64::from(VERSION) {
        return Err(LoadError::Version(version));
    }
    let file: FileV1 = serde_json::from_slice(bytes).map_err(corrupt)?;
    let mut pools = Vec::with_capacity(file.pools.len());
    for pool in file.pools {
        let mut backends = Vec::with_capacity(pool.backends.len());
        for b in pool.backends {
            let quarantine = match b.quarantine {
                Some(q) => Some(QuarantineSnapshot {
                    until: humantime::parse_rfc3339(&q.until).map_err(|e| {
                        let at = format!("pool {} backend {}", pool.name, b.name);
                        LoadError::Corrupt(format!("{at}: until `{}`: {e}", q.until))
                    })?,
                    reason: q.reason,
                }),
                None => None,
            };
            backends.push(SavedBackend::new(b.name, b.addr, quarantine, b.strikes));
        }
        pools.push((pool.name, backends));
    }
    Ok(SavedState {
        pools,
        // An unreadable time only loses the check for a clock ahead.
        written_at: humantime::parse_rfc3339(&file.written_at).ok(),
    })
}

/// Read the state file at `path`.
///
/// # Errors
/// Why it cannot be used; the caller starts clean.
pub fn load(path: &Path) -> Result<SavedState, LoadError> {
    // A device or a FIFO is never opened: a FIFO would block the start.
    if let Err(e) = refuse_special_file(path) {
        return Err(LoadError::Unreadable(e));
    }
    match read_bounded(path, MAX_BYTES) {
        Ok(Some(bytes)) => decode(&bytes),
        Ok(None) => Err(LoadError::TooLarge),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(LoadError::Missing),
        Err(e) => Err(LoadError::Unreadable(e)),
    }
}

/// A failed save: the step, the file it was on, the OS error.
#[derive(Debug, thiserror::Error)]
#[error("{step} {}: {source}", path.display())]
pub struct SaveError {
    step: &'static str,
    path: PathBuf,
    source: std::io::Error,
}

/// Replace the file at `path` with `state`, atomically: a new temporary
/// file with an unguessable name in the same directory (created
/// exclusively: a file or link planted there is never opened) is written
/// and synced, renamed over it, and the directory synced, so a crash
/// leaves the old file or the new one, never a torn one.
///
/// # Errors
/// The first step that failed; the temporary file is removed.
pub fn save(path: &Path, state: &SavedState, written_at: SystemTime) -> Result<(), SaveError> {
    let dir = files::parent_dir(path);
    let failed = |step: &'static str, at: &Path| {
        let path = at.to_owned();
        move |source| SaveError { step, path, source }
    };
    // Never rename over a device (`/dev/null` given to turn it off) or a
    // FIFO: only a regular file, or nothing, is replaced.
    refuse_special_file(path).map_err(failed("replace", path))?;
    let bytes =
        encode(state, written_at).map_err(|e| failed("encode", path)(std::io::Error::other(e)))?;
    let (mut file, tmp) = files::create_beside(path).map_err(failed("create a file in", dir))?;
    let written = (|| {
        file.write_all(&bytes).map_err(failed("write", &tmp))?;
        file.sync_all().map_err(failed("sync", &tmp))?;
        fs::rename(&tmp, path).map_err(failed("rename over", path))
    })();
    if written.is_err() {
        // Best effort: the error that matters is the one returned.
        let _ = fs::remove_file(&tmp);
    }
    written?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(failed("sync directory", dir))
}

/// Make the directory of the state file `path` when it is missing (as the
/// log writer makes its own), owner and group only: it names backends and
/// their addresses. `check` has made sure it can be made.
fn make_dir(path: &Path) {
    use std::os::unix::fs::DirBuilderExt;
    let dir = files::parent_dir(path);
    if dir.exists() {
        return;
    }
    let shown = dir.display().to_string();
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
    {
        Ok(()) => info!(path = shown, "state_dir_created"),
        // Every save will say so too, and retry.
        Err(e) => warn!(path = shown, err = %e, "state_dir_failed"),
    }
}

/// Read the state file at start-up and restore what it holds onto `pools`,
/// before any client is accepted. Any problem is logged (`state_ignored`)
/// and the pools start clean: it never stops the start.
pub fn restore_at_start(path: &Path, pools: &[Arc<Pool>]) {
    make_dir(path);
    let shown = path.display().to_string();
    match load(path) {
        Ok(mut state) => {
            let now = SystemTime::now();
            if let Some(ahead) = state.ahead_of(now) {
                let written_at = state.written_at.map(humantime::format_rfc3339_millis);
                let windows = state.rebase(now);
                warn!(
                    path = shown,
                    written_at = written_at.map(|t| t.to_string()),
                    ahead_s = ahead.as_secs(),
                    windows,
                    "state_from_future"
                );
            }
            let backends = state.restore(pools, now);
            info!(path = shown, backends, "state_restored");
        }
        // A first start: nothing to warn about.
        Err(e @ LoadError::Missing) => {
            info!(path = shown, reason = e.as_str(), err = %e, "state_ignored");
        }
        Err(e) => warn!(path = shown, reason = e.as_str(), err = %e, "state_ignored"),
    }
}

/// Save the pools `control` has (it follows reloads) to `path` after each
/// change `changes` tells of, at most once a [`MIN_GAP`], and once more
/// when `token` is cancelled (shutdown). A failed write is logged once per
/// run of failures (`state_write_failed`) and retried; nothing stops.
/// Changes count from the call, not from the first poll.
pub fn write_on_change(
    path: PathBuf,
    control: Control,
    changes: &HealthChanges,
    token: CancellationToken,
) -> impl Future<Output = ()> + use<> {
    let seen = changes.subscribe();
    writer(path, control, seen, token)
}

async fn writer(
    path: PathBuf,
    control: Control,
    mut seen: watch::Receiver<u64>,
    token: CancellationToken,
) {
    let mut failing = false;
    let mut last: Option<Instant> = None;
    loop {
        tokio::select! {
            () = token.cancelled() => break,
            changed = seen.changed() => if changed.is_err() { break },
            () = sleep(RETRY), if failing => {}
        }
        if let Some(at) = last {
            tokio::select! {
                () = token.cancelled() => break,
                () = sleep_until(at + MIN_GAP) => {}
            }
        }
        seen.borrow_and_update();
        failing = write(&path, &control, failing).await;
        last = Some(Instant::now());
    }
    write(&path, &control, failing).await;
}

/// One save of every pool; returns true when it failed.
async fn write(path: &Path, control: &Control, failing: bool) -> bool {
    let state = SavedState::of(&control.pools());
    let backends: usize = state.pools.iter().map(|(_, b)| b.len()).sum();
    let at = path.to_owned();
    // fsync may take a while on a busy disk: off the runtime's threads.
    let result = tokio::task::spawn_blocking(move || save(&at, &state, SystemTime::now())).await;
    let shown = path.display().to_string();
    let err = match result {
        Ok(Ok(())) => {
            if failing {
                info!(path = shown, "state_write_recovered");
            }
            debug!(path = shown, backends, "state_written");
            return false;
        }
        Ok(Err(e)) => e.to_string(),
        Err(e) => format!("the save task failed: {e}"),
    };
    if !failing {
        warn!(path = shown, err, "state_write_failed");
    }
    true
}

#[cfg(test)]
#[path = "state_file_tests.rs"]
mod tests;
