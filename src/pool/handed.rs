//! What a pool hands the new process of a live upgrade besides its
//! connections: what its discover entries found, each backend's health
//! record (states, windows, strikes, heights, last probe) and its
//! cumulative counters, so the new process
//! judges as the old one did and `/status` and `/metrics` go on from where
//! they stood instead of from zero.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::pool::admission::Admission;
use crate::pool::close::CloseReason;
use crate::pool::discovered::HandedSource;
use crate::pool::health::{ProbeOutcome, QuarantineReason};
use crate::pool::registry::{ConnEntry, ConnId, Lease, Pool, Target};
use crate::pool::saved::SavedBackend;
use crate::pool::snapshot::Counters;

/// One pool's handed over state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandedPool {
    /// Pool name.
    pub name: String,
    /// Connections moved by the rebalancer.
    pub rebalance_moves: u64,
    /// Its backends' counters.
    pub backends: Vec<HandedBackend>,
    /// Its backends' health records.
    pub health: Vec<SavedBackend>,
    /// What its discover entries had found.
    #[serde(default)]
    pub discovered: Vec<HandedSource>,
}

/// One backend's handed over state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandedBackend {
    /// Name.
    pub name: String,
    /// Address: with another address it is another node.
    pub addr: String,
    /// Cumulative counters.
    pub counters: Counters,
}

/// A pool's part in a live upgrade: its state to hand over, the state
/// and connections taken over, and the pause of its splices meanwhile.
#[derive(Clone, Copy)]
pub struct Upgrade<'a> {
    pool: &'a Arc<Pool>,
}

impl Pool {
    /// This pool's part in a live upgrade.
    pub fn upgrade(self: &Arc<Self>) -> Upgrade<'_> {
        Upgrade { pool: self }
    }
}

impl Upgrade<'_> {
    /// This pool's state to hand over.
    pub fn state(&self) -> HandedPool {
        let snap = self.pool.view().overview();
        HandedPool {
            name: snap.name,
            rebalance_moves: snap.rebalance_moves,
            backends: snap
                .backends
                .into_iter()
                .map(|b| HandedBackend {
                    name: b.name,
                    addr: b.addr,
                    counters: b.counters,
                })
                .collect(),
            health: self.pool.saved().save(),
            discovered: self.pool.discovery().hand_over_sources(),
        }
    }

    /// Take the health records and counters handed over from the old process
    /// onto the backends that are still configured (same name and
    /// address); returns how many matched. Run once, before any traffic.
    pub fn take(&self, handed: &HandedPool) -> usize {
        // Discovered members first: their health records find them by name.
        self.pool
            .discovery()
            .take_handed_sources(&handed.discovered);
        self.pool
            .saved()
            .restore_handed(&handed.health, SystemTime::now());
        self.pool
            .rebalance_moves
            .fetch_add(handed.rebalance_moves, Ordering::Relaxed);
        let backends = self.pool.backends();
        let mut matched = 0;
        for c in &handed.backends {
            let Some(b) = backends
                .active
                .iter()
                .find(|b| b.config().name == c.name && b.config().addr == c.addr)
            else {
                continue;
            };
            matched += 1;
            let (s, n) = (&b.stats(), &c.counters);
            let add = |a: &AtomicU64, v: u64| a.fetch_add(v, Ordering::Relaxed);
            add(&s.connections_total, n.connections_total);
            add(&s.connect_failures_total, n.connect_failures_total);
            add(&s.bytes_up, n.bytes_up);
            add(&s.bytes_down, n.bytes_down);
            add(&s.refused_by_node, n.refused_by_node);
            add(&s.source_fallbacks, n.source_fallbacks);
            for o in ProbeOutcome::ALL {
                add(&s.probes[o.index()], n.probe_count(o));
            }
            for r in QuarantineReason::ALL {
                add(&s.quarantines[r.index()], n.quarantine_count(r));
            }
        }
        matched
    }

    /// A live upgrade takes the connections: every spliced one stops for
    /// the handover now, and every one still connecting as soon as it is
    /// spliced (see [`Legs::splice_if_wanted`](crate::pool::legs::Legs::splice_if_wanted)), so none is left behind.
    /// Under the lock, as splices are marked.
    pub fn begin(&self) {
        let m = self.pool.backends();
        self.pool.handing_over.store(true, Ordering::Relaxed);
        // Leaving backends' too: the new process, which has no such
        // backend, closes them as a reload does.
        for entry in m
            .active
            .iter()
            .chain(&m.leaving)
            .flat_map(|b| b.conns().values())
        {
            if entry.closer.is_movable() {
                entry.closer.close(CloseReason::Handover);
            }
        }
    }

    /// The upgrade failed: connections splice here again.
    pub fn end(&self) {
        let _guard = self.pool.backends();
        self.pool.handing_over.store(false, Ordering::Relaxed);
    }

    /// Register connection `conn`, carried over from another process, on
    /// the backend named `name` at `addr` (a backend whose address changed
    /// is another node), already spliced. `None` when the pool has no such
    /// backend any more.
    pub fn take_conn(
        &self,
        conn: ConnId,
        entry: ConnEntry,
        name: &str,
        addr: &str,
    ) -> Option<(Lease, Target)> {
        let mut backends = self.pool.backends();
        let b = backends
            .active
            .iter_mut()
            .find(|b| b.config().name == name && b.config().addr == addr)?;
        entry.closer.set_spliced();
        Some(self.pool.register(b, conn, entry))
    }

    /// Admit a client handed over by another process: it was admitted
    /// there, so it counts here even above the limits (its source too).
    pub fn admit(&self, peer: IpAddr) -> Admission {
        Admission::handed_over(self.pool, peer)
    }
}
