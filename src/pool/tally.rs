//! What a pool counts beyond its backends' figures: clients turned away at
//! accept (by reason), and how connections ended (by backend and reason),
//! for `/metrics`. Every end is counted here, whether its `closed` line was
//! logged or folded.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::pool::admission::Refusal;
use crate::pool::close::CloseReason;
use crate::pool::registry::BackendStats;

/// The pool's own counters.
#[derive(Debug, Default)]
pub struct Tally {
    /// Clients refused at accept, by reason (the `rejected` event's).
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    /// Connections that ended without a backend (every connect failed,
    /// no descriptor, its backend gone before it resumed), at
    /// [`CloseReason::index`].
    unplaced: [AtomicU64; CloseReason::ALL.len()],
}

/// How a pool's connections ended, copied out for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ends {
    /// Clients refused at accept, per reason (only reasons that occurred).
    pub rejected: BTreeMap<&'static str, u64>,
    /// Per backend name (`""`: none was reached), the closed connections
    /// per reason, every reason listed.
    pub closed: Vec<(String, Vec<(CloseReason, u64)>)>,
}

/// Add `handed` (`closed` reason name → count) into `counts`; a name this
/// build does not know is dropped.
pub(in crate::pool) fn add_closed(
    counts: &[AtomicU64; CloseReason::ALL.len()],
    handed: &BTreeMap<String, u64>,
) {
    for (name, &n) in handed {
        if let Some(r) = CloseReason::ALL.iter().find(|r| r.as_str() == name) {
            counts[r.index()].fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// `counts` by `closed` reason name, the reasons not at zero: as a live
/// upgrade hands them over (the inverse of [`add_closed`]).
pub(in crate::pool) fn closed_by_name(
    counts: &[AtomicU64; CloseReason::ALL.len()],
) -> BTreeMap<String, u64> {
    nonzero(per_reason(counts).into_iter().map(|(r, n)| (r.as_str(), n)))
}

/// The counts of `counts` that are not zero, by name.
fn nonzero<'a>(counts: impl IntoIterator<Item = (&'a str, u64)>) -> BTreeMap<String, u64> {
    counts
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(name, n)| (name.to_owned(), n))
        .collect()
}

fn per_reason(counts: &[AtomicU64; CloseReason::ALL.len()]) -> Vec<(CloseReason, u64)> {
    CloseReason::ALL
        .iter()
        .map(|&r| (r, counts[r.index()].load(Ordering::Relaxed)))
        .collect()
}

impl Tally {
    /// A client was refused at accept for `reason`.
    pub(in crate::pool) fn count_rejected(&self, reason: Refusal) {
        let mut rejected = self.rejected.lock().unwrap_or_else(|e| e.into_inner());
        *rejected.entry(reason.as_str()).or_default() += 1;
    }

    /// A connection ended for `reason`, on the backend whose counters are
    /// `stats`, or before it reached one (`None`).
    pub(in crate::pool) fn count_closed(&self, stats: Option<&BackendStats>, reason: CloseReason) {
        let counts = stats.map_or(&self.unplaced, |s| &s.closed);
        counts[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts handed over by the process before a live upgrade: rejects
    /// per reason and ends without a backend per reason, by name (a name
    /// this build does not know is dropped).
    pub(in crate::pool) fn add_handed(
        &self,
        rejected: &BTreeMap<String, u64>,
        unplaced: &BTreeMap<String, u64>,
    ) {
        {
            let mut mine = self.rejected.lock().unwrap_or_else(|e| e.into_inner());
            for (name, &n) in rejected {
                if let Some(r) = Refusal::ALL.iter().find(|r| r.as_str() == name) {
                    *mine.entry(r.as_str()).or_default() += n;
                }
            }
        }
        add_closed(&self.unplaced, unplaced);
    }

    /// The counts of rejects per reason and of ends without a backend per
    /// reason, by name, not zero: what a live upgrade hands over.
    pub(in crate::pool) fn handed(&self) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let rejected = self.rejected.lock().unwrap_or_else(|e| e.into_inner());
        (
            nonzero(rejected.iter().map(|(&name, &n)| (name, n))),
            closed_by_name(&self.unplaced),
        )
    }

    /// The rejects and ends so far; `backends` gives each configured
    /// backend's name and counters (listed at 0 when none ended).
    pub(in crate::pool) fn ends<'b>(
        &self,
        backends: impl Iterator<Item = (&'b str, &'b BackendStats)>,
    ) -> Ends {
        let rejected = self
            .rejected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut closed = vec![(String::new(), per_reason(&self.unplaced))];
        closed.extend(backends.map(|(name, stats)| (name.to_owned(), per_reason(&stats.closed))));
        Ends { rejected, closed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::pool::registry::Pool;
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    #[test]
    fn ends_are_counted_per_backend_and_reason_and_rejects_per_reason() {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends: [127.0.0.1:1, 127.0.0.1:2]\n";
        let c = Config::parse(yaml, "t.yaml".as_ref()).unwrap();
        let pool = Arc::new(Pool::new(c.pools[0].clone(), CancellationToken::new()));
        let stats = pool.backends().active[1].stats().clone();
        pool.legs()
            .count_closed(Some(&stats), CloseReason::ClientClosed);
        pool.legs()
            .count_closed(Some(&stats), CloseReason::ClientClosed);
        pool.legs().count_closed(None, CloseReason::NoBackend);
        pool.gate().count_rejected(Refusal::MaxConnections);
        let ends = pool.view().ends();
        assert_eq!(ends.rejected, BTreeMap::from([("max_connections", 1)]));
        let count = |backend: &str, reason| {
            let (_, reasons) = ends.closed.iter().find(|(b, _)| b == backend).unwrap();
            reasons.iter().find(|(r, _)| *r == reason).unwrap().1
        };
        assert_eq!(count("127.0.0.1:2", CloseReason::ClientClosed), 2);
        assert_eq!(count("127.0.0.1:1", CloseReason::ClientClosed), 0);
        assert_eq!(count("", CloseReason::NoBackend), 1);
        assert_eq!(ends.closed.len(), 3);
        assert!(
            ends.closed
                .iter()
                .all(|(_, r)| r.len() == CloseReason::ALL.len())
        );
    }
}
