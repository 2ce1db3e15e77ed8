//! A pool's health records as plain data that outlives the process: taken
//! out with [`Saved::save`], put back with [`Saved::restore`]
//! (the state file across a cold restart, the hand-over of a live
//! upgrade), and the change signal ([`HealthChanges`]) that tells a writer
//! when a record worth keeping changed.
//!
//! Times leave as wall-clock time: a monotonic `Instant` means nothing to
//! another process. They are converted with the two clocks read at one
//! moment, as [`snapshot`](crate::pool::snapshot) does.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::pool::backend::{Backend, Suitability};
use crate::pool::health::{
    BackendHealth, Counts, MAX_MANUAL_WINDOW, Quarantine, QuarantineReason, State, later,
};
use crate::pool::node::NodeFacts;
use crate::pool::registry::{Pool, ProbeRecord};
use crate::pool::snapshot::{QuarantineSnapshot, wall_time};

/// One backend's health record, plain data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedBackend {
    /// Its name in the pool.
    pub name: String,
    /// Its `host:port`: with the name, which node this is (an address
    /// change makes another node).
    pub addr: String,
    /// The state while not taken out: `healthy` or `unknown`.
    pub base: State,
    /// The quarantine, window end in wall-clock time, with its reason.
    pub quarantine: Option<QuarantineSnapshot>,
    /// Quarantines since the last success: the escalation level (the next
    /// window is `base * 2^strikes`, capped).
    pub strikes: u32,
    /// Consecutive connect failures from client traffic.
    pub connect_failures: u32,
    /// Client connections it closed at once since one it served.
    pub closes_at_once: u32,
    /// Consecutive bad probe verdicts.
    pub bad_probes: u32,
    /// Consecutive passed probes since the window ended.
    pub good_probes: u32,
    /// Last block height a probe read.
    pub height: Option<u64>,
    /// That height was proven by the node's headers.
    pub proven: bool,
    /// The last probe.
    pub last_probe: Option<ProbeRecord>,
    /// What the node told a probe, and whether it can serve the pool's
    /// clients: a live upgrade keeps an unsuitable node out, a state file
    /// keeps it out across a restart until a probe says otherwise.
    #[serde(default)]
    pub node: Option<NodeFacts>,
    /// The judgement of `node`.
    #[serde(default)]
    pub suitability: Suitability,
}

impl SavedBackend {
    /// A record of the backend `name` at `addr` with only a window and
    /// strikes (what a state file keeps); everything else as a backend
    /// that was never probed has it.
    pub fn new(
        name: String,
        addr: String,
        quarantine: Option<QuarantineSnapshot>,
        strikes: u32,
    ) -> SavedBackend {
        SavedBackend {
            name,
            addr,
            base: State::Unknown,
            quarantine,
            strikes,
            connect_failures: 0,
            closes_at_once: 0,
            bad_probes: 0,
            good_probes: 0,
            height: None,
            proven: false,
            last_probe: None,
            node: None,
            suitability: Suitability::Unjudged,
        }
    }
}

/// A counter bumped whenever a backend's quarantine, strikes or state
/// changes in any pool that shares it; a writer subscribes and wakes on
/// each bump instead of polling.
#[derive(Debug)]
pub struct HealthChanges {
    version: watch::Sender<u64>,
}

impl Default for HealthChanges {
    fn default() -> Self {
        HealthChanges {
            version: watch::Sender::new(0),
        }
    }
}

impl HealthChanges {
    /// Something worth saving changed. Cheap, and safe under the pool lock
    /// (the watch's own lock is held only to add one).
    pub fn bump(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The number of changes so far.
    pub fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// A receiver that sees each bump (`changed()` resolves after one).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}

/// The part of a record whose change is worth writing down.
pub(in crate::pool) type Kept = (Option<Quarantine>, u32, State);

/// What of `h` a saved record must follow.
pub(in crate::pool) fn kept(h: &BackendHealth) -> Kept {
    (h.quarantine(), h.strikes(), h.state())
}

/// The monotonic instant of wall-clock time `at`, given both clocks' `now`.
fn instant_at(at: SystemTime, now: Instant, wall: SystemTime) -> Instant {
    match at.duration_since(wall) {
        Ok(ahead) => later(now, ahead),
        Err(behind) => now.checked_sub(behind.duration()).unwrap_or(now),
    }
}

/// A pool's health records as plain data: what the state file and a live
/// upgrade carry out and bring back.
#[derive(Clone, Copy)]
pub struct Saved<'a> {
    pool: &'a Pool,
}

impl Pool {
    /// This pool's health records as plain data.
    pub fn saved(&self) -> Saved<'_> {
        Saved { pool: self }
    }
}

impl Saved<'_> {
    /// Bumped whenever what [`Saved::save`] returns may have changed: what
    /// the state file writer waits on.
    pub fn changes(&self) -> &Arc<HealthChanges> {
        &self.pool.changes
    }

    /// Every backend's health record, in config order, under one lock;
    /// instants read as wall-clock time. Records a state file brought for
    /// discovered members not found yet come last.
    pub fn save(&self) -> Vec<SavedBackend> {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let m = self.pool.backends();
        let mut saved: Vec<SavedBackend> = m
            .active
            .iter()
            .map(|b| {
                let h = b.health();
                SavedBackend {
                    name: b.config().name.clone(),
                    addr: b.config().addr.clone(),
                    base: h.base(),
                    quarantine: h.quarantine().map(|q| QuarantineSnapshot {
                        until: wall_time(q.until, now, wall),
                        reason: q.reason,
                    }),
                    strikes: h.strikes(),
                    connect_failures: h.connect_failures(),
                    closes_at_once: h.closes_at_once(),
                    bad_probes: h.bad_probes(),
                    good_probes: h.good_probes(),
                    height: b.height(),
                    proven: b.proven(),
                    last_probe: b.last_probe().cloned(),
                    node: b.node().cloned(),
                    suitability: b.suitability(),
                }
            })
            .collect();
        // Records of discovered members not found again yet stay kept.
        saved.extend(m.unclaimed.iter().cloned());
        saved
    }

    /// Put a state file's records back, each on the backend with the same
    /// name and address (records of other backends are ignored). A window
    /// still running makes the backend unusable at once, for the rest of
    /// it, but never longer than such a window can be from `wall_now`
    /// ([`latest_end`]): a clock that was wrong when it was written keeps
    /// no node out for good. A window that ended while the process was
    /// down is kept as ended: the backend returns after `rise` passed
    /// probes, as it would have had the process run on, not on the clock.
    /// Each restored backend's epoch moves on, so a probe in flight is
    /// stale. Records of discovered members not found yet wait for the
    /// lookup that finds them.
    /// Returns how many records were applied.
    pub fn restore(&self, saved: &[SavedBackend], wall_now: SystemTime) -> usize {
        self.pool.put_back(saved, wall_now, true)
    }

    /// As [`Saved::restore`] for the records a live upgrade carries
    /// over from the moment before (every member it names is configured).
    pub fn restore_handed(&self, saved: &[SavedBackend], wall_now: SystemTime) -> usize {
        self.pool.put_back(saved, wall_now, false)
    }
}

impl Pool {
    /// Tell the writer when `before` (what [`kept`] read before a change)
    /// differs from `h` now.
    pub(in crate::pool) fn note(&self, before: Kept, h: &BackendHealth) {
        if kept(h) != before {
            self.changes.bump();
        }
    }

    pub(in crate::pool) fn put_back(
        &self,
        saved: &[SavedBackend],
        wall_now: SystemTime,
        from_file: bool,
    ) -> usize {
        let now = Instant::now();
        let at = At {
            pool: &self.name,
            now,
            wall_now,
            max: self.config().quarantine.max,
        };
        let mut applied = 0;
        let mut m = self.backends();
        for b in m.active.iter_mut() {
            let Some(s) = saved
                .iter()
                .find(|s| s.name == b.config().name && s.addr == b.config().addr)
            else {
                continue;
            };
            apply_saved(b, s, at);
            applied += 1;
        }
        if from_file {
            // A discovered member a state file knows may not have been
            // found yet: its record waits for the lookup that finds it.
            let entries: Vec<String> = m
                .sources
                .iter()
                .map(|s| format!("{}/", s.config.name))
                .collect();
            let waiting = saved.iter().filter(|s| {
                entries.iter().any(|e| s.name.starts_with(e))
                    && !m.active.iter().any(|b| b.config().name == s.name)
            });
            m.unclaimed = waiting.cloned().collect();
        }
        self.note_servable(&m, &self.config());
        drop(m);
        if applied > 0 {
            // Windows were cut to their caps: what a writer holds is out of date.
            self.changes.bump();
        }
        applied
    }

    /// Put the record `unclaimed` holds for the new backend `b` on it.
    pub(in crate::pool) fn claim_saved(&self, unclaimed: &mut Vec<SavedBackend>, b: &mut Backend) {
        let Some(i) = unclaimed
            .iter()
            .position(|s| s.name == b.config().name && s.addr == b.config().addr)
        else {
            return;
        };
        let s = unclaimed.swap_remove(i);
        let at = At {
            pool: &self.name,
            now: Instant::now(),
            wall_now: SystemTime::now(),
            max: self.config().quarantine.max,
        };
        apply_saved(b, &s, at);
        tracing::info!(pool = %self.name, backend = %b.config().name, "state_claimed");
    }
}

/// The moment a record is put back, on both clocks, and the pool's
/// `quarantine.max`.
#[derive(Clone, Copy)]
struct At<'a> {
    pool: &'a str,
    now: Instant,
    wall_now: SystemTime,
    max: Duration,
}

/// The latest a restored window with `reason` may end, from `wall_now`:
/// an automatic one `max` (`quarantine.max`) away, a manual one the
/// longest an operator can ask for.
fn latest_end(reason: QuarantineReason, max: Duration, wall_now: SystemTime) -> SystemTime {
    let cap = match reason {
        QuarantineReason::Manual => MAX_MANUAL_WINDOW,
        _ => max,
    };
    wall_now.checked_add(cap).unwrap_or(wall_now)
}

/// Put the saved record `s` on `b`: see [`Saved::restore`].
fn apply_saved(b: &mut Backend, s: &SavedBackend, at: At<'_>) {
    let At { now, wall_now, .. } = at;
    let name = b.config().name.clone();
    let quarantine = s.quarantine.map(|q| {
        let latest = latest_end(q.reason, at.max, wall_now);
        if q.until > latest {
            let secs = |t: SystemTime| t.duration_since(wall_now).unwrap_or_default().as_secs();
            tracing::warn!(
                pool = at.pool, backend = %name, reason = q.reason.as_str(),
                saved_s = secs(q.until), window_s = secs(latest), "window_capped"
            );
        }
        Quarantine {
            until: instant_at(q.until.min(latest), now, wall_now),
            reason: q.reason,
        }
    });
    let counts = Counts {
        strikes: s.strikes,
        connect_failures: s.connect_failures,
        closes_at_once: s.closes_at_once,
        bad_probes: s.bad_probes,
        good_probes: s.good_probes,
    };
    let h = b.health_mut();
    h.set_base(s.base);
    h.restore(quarantine, counts);
    b.set_height(s.height, s.proven);
    b.set_last_probe(s.last_probe.clone());
    if let Some(facts) = &s.node {
        b.set_node(facts.clone(), s.suitability);
    }
    let closing = s.closes_at_once > 0;
    b.stats().closing_at_once.store(closing, Ordering::Relaxed);
}

#[cfg(test)]
#[path = "saved_tests.rs"]
mod tests;
