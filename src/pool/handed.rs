//! What a pool hands the new process of a live upgrade besides its
//! connections: what its discover entries found, each backend's health
//! record (states, windows, strikes, heights, last probe) and its
//! cumulative counters, so the new process
//! judges as the old one did and `/status` and `/metrics` go on from where
//! they stood instead of from zero.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::pool::discovered::HandedSource;
use crate::pool::health::{ProbeOutcome, QuarantineReason};
use crate::pool::registry::Pool;
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

impl Pool {
    /// This pool's state to hand over.
    pub fn hand_over(&self) -> HandedPool {
        let snap = self.overview();
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
            health: self.save_health(),
            discovered: self.discovery().hand_over_sources(),
        }
    }

    /// Take the health records and counters handed over from the old process
    /// onto the backends that are still configured (same name and
    /// address); returns how many matched. Run once, before any traffic.
    pub fn take_handed(&self, handed: &HandedPool) -> usize {
        // Discovered members first: their health records find them by name.
        self.discovery().take_handed_sources(&handed.discovered);
        self.restore_handed_health(&handed.health, SystemTime::now());
        self.rebalance_moves
            .fetch_add(handed.rebalance_moves, Ordering::Relaxed);
        let backends = self.backends();
        let mut matched = 0;
        for c in &handed.backends {
            let Some(b) = backends
                .active
                .iter()
                .find(|b| b.config.name == c.name && b.config.addr == c.addr)
            else {
                continue;
            };
            matched += 1;
            let (s, n) = (&b.stats, &c.counters);
            let add = |a: &AtomicU64, v: u64| a.fetch_add(v, Ordering::Relaxed);
            add(&s.connections_total, n.connections_total);
            add(&s.connect_failures_total, n.connect_failures_total);
            add(&s.bytes_up, n.bytes_up);
            add(&s.bytes_down, n.bytes_down);
            for o in ProbeOutcome::ALL {
                add(&s.probes[o.index()], n.probe_count(o));
            }
            for r in QuarantineReason::ALL {
                add(&s.quarantines[r.index()], n.quarantine_count(r));
            }
        }
        matched
    }
}
