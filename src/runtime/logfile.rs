//! The log file of `log.file`: lines go to the configured path itself, so
//! `tail -F` and anything reading that path sees them. At the first line of
//! a new day (UTC) the file is renamed `<path>.YYYY-MM-DD`, the day its lines
//! belong to, and a new one is opened at the path. A file moved away by
//! someone else (logrotate, or the other process of a live upgrade, which
//! rotated first) is noticed within a second and the path opened again, so
//! two processes writing one path never rename each other's file.
//!
//! The path is never opened through a symbolic link, and a rotation never
//! replaces a file or link at its dated name (`config::files`): a log
//! directory another user can write cannot turn either into a write over
//! some other file.
//!
//! Runs on the log writer's own thread, never on a serving task.

use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::files;

const DAY_SECS: u64 = 24 * 3600;

/// Numbered names tried after a taken dated one, before a rotation gives up.
const MAX_SUFFIX: u32 = 1000;

/// The log file at one path, rotated daily.
pub struct DailyFile {
    path: PathBuf,
    file: File,
    /// The day (since the epoch, UTC) the lines in `file` belong to.
    day: u64,
    /// The second (since the epoch) the path was last looked at.
    checked: u64,
    /// Opening the path again failed, and that was told: told once until
    /// it works again.
    reopen_failing: bool,
}

impl DailyFile {
    /// Open (or create) `path` for appending. A file left from an earlier
    /// day (a restart after midnight) keeps that day and is rotated at the
    /// first line.
    ///
    /// # Errors
    /// The file cannot be opened or created.
    pub fn open(path: &Path) -> io::Result<DailyFile> {
        DailyFile::open_at(path, unix_secs(SystemTime::now()))
    }

    fn open_at(path: &Path, now: u64) -> io::Result<DailyFile> {
        let file = files::open_append(path)?;
        let meta = file.metadata()?;
        let day = match meta.modified() {
            Ok(modified) if meta.len() > 0 => (unix_secs(modified) / DAY_SECS).min(now / DAY_SECS),
            _ => now / DAY_SECS,
        };
        Ok(DailyFile {
            path: path.to_path_buf(),
            file,
            day,
            checked: now,
            reopen_failing: false,
        })
    }

    /// Write `buf` as of `now` (seconds since the epoch): rotate first on a
    /// new day, else look at the path once a second.
    fn write_at(&mut self, buf: &[u8], now: u64) -> io::Result<usize> {
        if now / DAY_SECS != self.day {
            self.rotate(now);
        } else if now != self.checked {
            self.reopen_if_moved(now);
        }
        self.file.write(buf)
    }

    /// Rename the path to `<path>.<day>` if it is still this file, then open
    /// the path anew. A failure is told on stderr and logging goes on in the
    /// file at hand (tried again the next day).
    fn rotate(&mut self, now: u64) {
        let today = now / DAY_SECS;
        if self.is_at_path()
            && let Err(err) = rename_dated(&self.path, self.day)
        {
            eprintln!("pin-proxy: rotate log file {}: {err}", self.path.display());
            self.day = today;
            return;
        }
        self.reopen(now);
        self.day = today;
    }

    /// Open the path again if the file there is not this one (moved or
    /// removed by someone else).
    fn reopen_if_moved(&mut self, now: u64) {
        self.checked = now;
        if !self.is_at_path() {
            self.reopen(now);
        }
    }

    fn reopen(&mut self, now: u64) {
        self.checked = now;
        match files::open_append(&self.path) {
            Ok(file) => {
                self.file = file;
                self.reopen_failing = false;
            }
            Err(err) if !self.reopen_failing => {
                self.reopen_failing = true;
                eprintln!(
                    "pin-proxy: reopen log file {}: {err} (lines go on to the old file)",
                    self.path.display()
                );
            }
            Err(_) => {}
        }
    }

    /// Whether the file at the path is the one being written.
    fn is_at_path(&self) -> bool {
        match (std::fs::symlink_metadata(&self.path), self.file.metadata()) {
            (Ok(there), Ok(mine)) => same_file(&there, &mine),
            _ => false,
        }
    }
}

impl Write for DailyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_at(buf, unix_secs(SystemTime::now()))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

fn same_file(a: &Metadata, b: &Metadata) -> bool {
    a.dev() == b.dev() && a.ino() == b.ino()
}

fn unix_secs(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Rename `path` to `<path>.YYYY-MM-DD` for `day`, or with `.1`, `.2`...
/// when that is taken (a clock set back): a rotation never replaces a
/// file, nor a link planted at the name.
fn rename_dated(path: &Path, day: u64) -> io::Result<PathBuf> {
    let date = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(day * DAY_SECS))
        .to_string();
    let base = format!("{}.{}", path.display(), date.get(..10).unwrap_or(&date));
    let names = std::iter::once(PathBuf::from(&base))
        .chain((1..MAX_SUFFIX).map(|n| PathBuf::from(format!("{base}.{n}"))));
    for target in names {
        match files::rename_new(path, &target) {
            Ok(()) => return Ok(target),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{base} and {MAX_SUFFIX} numbered names after it are all taken"),
    ))
}

#[cfg(test)]
#[path = "logfile_tests.rs"]
mod tests;
