//! A complete copy of one pool's state at one moment: what `/status`,
//! metrics, the demo and tests read, and what a state file or a live
//! upgrade carries. Taken under one lock, with every number copied out, so
//! it is plain data: no locks, atomics or handles into the live pool.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::pool::backend::{Backend, Suitability};
use crate::pool::discovered;
use crate::pool::health::{ProbeOutcome, QuarantineReason, State};
use crate::pool::node::NodeFacts;
use crate::pool::registry::{BackendStats, ConnEntry, ConnId, Pool, ProbeRecord};
use crate::pool::tally::Ends;

/// One pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSnapshot {
    /// Pool name.
    pub name: String,
    /// Bound listen addresses.
    pub listen: Vec<SocketAddr>,
    /// Admitted client connections (counted against `max_connections`).
    pub clients: usize,
    /// Connections moved by the rebalancer since start.
    pub rebalance_moves: u64,
    /// Backends in config order (discovered members after the static ones).
    pub backends: Vec<BackendSnapshot>,
    /// Each discover entry: what it looks up and how its last lookup went.
    #[serde(default)]
    pub discovery: Vec<DiscoverySnapshot>,
}

/// One discover entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoverySnapshot {
    /// The entry's name.
    pub name: String,
    /// What it looks up.
    pub query: String,
    /// Its members now.
    pub members: usize,
    /// The last lookup: when, and why it failed (`None`: it succeeded).
    pub last_lookup: Option<(SystemTime, Option<String>)>,
    /// Lookups that succeeded since the entry was configured.
    pub lookups_ok: u64,
    /// Lookups that failed since the entry was configured.
    pub lookups_failed: u64,
}

/// One backend: its settings' identity, health record, last probe,
/// counters and live connections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendSnapshot {
    /// Name.
    pub name: String,
    /// `host:port`.
    pub addr: String,
    /// A backup.
    pub backup: bool,
    /// The discover entry that found it; `None` for a static backend.
    #[serde(default)]
    pub discovered_from: Option<String>,
    /// A discovered member that answers leave out: when `discovery.hold`
    /// ends and it is removed, unless an answer names it again.
    #[serde(default)]
    pub leaving_at: Option<SystemTime>,
    /// Where it stands.
    pub state: State,
    /// The quarantine, while it lasts (window or waiting for probes).
    pub quarantine: Option<QuarantineSnapshot>,
    /// Quarantines since the last success; sets the next window (there is
    /// no other escalation level).
    pub strikes: u32,
    /// Consecutive passed probes since the window ended.
    pub good_probes: u32,
    /// Consecutive bad probe verdicts.
    pub bad_probes: u32,
    /// Consecutive connect failures from client traffic.
    pub connect_failures: u32,
    /// Client connections it closed at once since one it served.
    pub closes_at_once: u32,
    /// Last block height a probe read.
    pub height: Option<u64>,
    /// That height was proven by the node's headers.
    pub proven: bool,
    /// The last probe.
    pub last_probe: Option<ProbeRecord>,
    /// Cumulative counters since start.
    pub counters: Counters,
    /// Live connections registered on it (connecting ones included).
    pub connections: usize,
    /// What the node told a probe (services, protocol, software, chain).
    #[serde(default)]
    pub node: Option<NodeFacts>,
    /// Whether it can serve the pool's clients, as that probe found.
    #[serde(default)]
    pub suitability: Suitability,
    /// Those connections, oldest first; empty in an
    /// [`overview`](crate::pool::snapshot::PoolView::overview), which only counts them.
    pub conns: Vec<ConnSnapshot>,
}

/// A quarantine window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantineSnapshot {
    /// End of the window (wall clock).
    pub until: SystemTime,
    /// Why.
    pub reason: QuarantineReason,
}

/// A backend's cumulative counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Client connections spliced to it.
    pub connections_total: u64,
    /// Failed connects from client traffic (closes at once included).
    pub connect_failures_total: u64,
    /// Bytes client → backend.
    pub bytes_up: u64,
    /// Bytes backend → client.
    pub bytes_down: u64,
    /// Probe results, one entry per outcome (zeros included).
    pub probes: BTreeMap<ProbeOutcome, u64>,
    /// Quarantines, one entry per reason (zeros included).
    pub quarantines: BTreeMap<QuarantineReason, u64>,
    /// Client connections it closed at once, before a byte.
    #[serde(default)]
    pub refused_by_node: u64,
    /// Client connections made from the proxy's own address instead of
    /// `source` (another address family).
    #[serde(default)]
    pub source_fallbacks: u64,
    /// Its client connections that ended, per `closed` reason (those not
    /// zero), as `pin_proxy_closed_total` counts them.
    #[serde(default)]
    pub closed: BTreeMap<String, u64>,
}

impl Counters {
    /// Probe results with `outcome`.
    pub fn probe_count(&self, outcome: ProbeOutcome) -> u64 {
        self.probes.get(&outcome).copied().unwrap_or(0)
    }

    /// Quarantines for `reason`.
    pub fn quarantine_count(&self, reason: QuarantineReason) -> u64 {
        self.quarantines.get(&reason).copied().unwrap_or(0)
    }

    fn of(stats: &BackendStats) -> Counters {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            connections_total: load(&stats.connections_total),
            connect_failures_total: load(&stats.connect_failures_total),
            bytes_up: load(&stats.bytes_up),
            bytes_down: load(&stats.bytes_down),
            probes: ProbeOutcome::ALL
                .iter()
                .map(|&o| (o, load(&stats.probes[o.index()])))
                .collect(),
            quarantines: QuarantineReason::ALL
                .iter()
                .map(|&r| (r, load(&stats.quarantines[r.index()])))
                .collect(),
            refused_by_node: load(&stats.refused_by_node),
            source_fallbacks: load(&stats.source_fallbacks),
            closed: crate::pool::tally::closed_by_name(&stats.closed),
        }
    }
}

/// One live client connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnSnapshot {
    /// Its id, as logged in `conn`.
    pub id: ConnId,
    /// The client's address.
    pub client: SocketAddr,
    /// When the client was accepted (wall clock).
    pub started: SystemTime,
    /// Bytes client → backend so far.
    pub bytes_up: u64,
    /// Bytes backend → client so far.
    pub bytes_down: u64,
    /// Where it stands.
    pub state: ConnState,
}

/// Where a registered connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnState {
    /// Its backend leg is being connected; drain and rebalance leave it be.
    Connecting,
    /// Bytes flow; drain and rebalance may close it.
    Spliced,
    /// Asked to close, not yet gone from the registry.
    Closing,
}

impl ConnSnapshot {
    fn of(id: ConnId, entry: &ConnEntry) -> ConnSnapshot {
        ConnSnapshot {
            id,
            client: entry.client,
            started: entry.started,
            bytes_up: entry.closer.bytes_up.load(Ordering::Relaxed),
            bytes_down: entry.closer.bytes_down.load(Ordering::Relaxed),
            state: entry.closer.state(),
        }
    }
}

/// What a pool shows of itself: its snapshots, its client counts and how
/// its connections ended. Every read copies out; nothing changes.
#[derive(Clone, Copy)]
pub struct PoolView<'a> {
    pool: &'a Pool,
}

impl Pool {
    /// What this pool shows of itself.
    pub fn view(&self) -> PoolView<'_> {
        PoolView { pool: self }
    }
}

impl PoolView<'_> {
    /// Everything about this pool now, every live connection included.
    /// Costs O(connections) under the pool lock: for state files, the demo
    /// and tests, not for every scrape.
    pub fn snapshot(&self) -> PoolSnapshot {
        self.pool.take_snapshot(true)
    }

    /// The same snapshot without the per-connection list (`conns` empty,
    /// `connections` still counts them): O(backends) under the lock, what
    /// `/status` and `/metrics` read.
    pub fn overview(&self) -> PoolSnapshot {
        self.pool.take_snapshot(false)
    }

    /// The rejects and ends so far, each configured backend's included
    /// (at 0 when none ended).
    pub fn ends(&self) -> Ends {
        let m = self.pool.backends();
        let backends = m
            .active
            .iter()
            .map(|b| (b.config().name.as_str(), &**b.stats()));
        self.pool.tally.ends(backends)
    }

    /// Live client connections in the pool.
    pub fn clients(&self) -> usize {
        self.pool.clients.load(Ordering::Acquire)
    }

    /// Client connections not spliced yet: a PROXY header being read, or
    /// admitted and being accepted, connecting to a backend or failing
    /// over. O(connections).
    pub fn connecting(&self) -> usize {
        let m = self.pool.backends();
        let spliced = m
            .active
            .iter()
            .chain(&m.leaving)
            .flat_map(|b| b.conns().values())
            .filter(|e| e.closer.is_spliced())
            .count();
        drop(m);
        let headers = self.pool.headers.load(Ordering::Acquire);
        self.clients().saturating_sub(spliced) + headers
    }
}

impl Pool {
    fn take_snapshot(&self, with_conns: bool) -> PoolSnapshot {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let m = self.backends();
        let leaving = discovered::leaving(&m.sources, self.config().discovery.hold);
        let backends = m
            .active
            .iter()
            .map(|b| {
                let mut snap = BackendSnapshot::of(b, with_conns, now, wall);
                if let Some(&at) = leaving
                    .get(&snap.name)
                    .filter(|_| snap.discovered_from.is_some())
                {
                    snap.leaving_at = Some(wall_time(at, now, wall));
                }
                snap
            })
            .collect();
        let discovery = m
            .sources
            .iter()
            .map(|s| DiscoverySnapshot {
                name: s.config.name.clone(),
                query: s.config.query.to_string(),
                members: s.members.len(),
                last_lookup: s.last_lookup.clone(),
                lookups_ok: s.lookups.0,
                lookups_failed: s.lookups.1,
            })
            .collect();
        drop(m);
        PoolSnapshot {
            name: self.name.clone(),
            listen: self.listen().to_vec(),
            clients: self.view().clients(),
            rebalance_moves: self.rebalance_moves.load(Ordering::Relaxed),
            backends,
            discovery,
        }
    }
}

impl BackendSnapshot {
    /// Copy `b` out; `now` and `wall` are the two clocks' same moment.
    fn of(b: &Backend, with_conns: bool, now: Instant, wall: SystemTime) -> BackendSnapshot {
        let h = b.health();
        let conns = if with_conns {
            b.conns()
                .iter()
                .map(|(&id, e)| ConnSnapshot::of(id, e))
                .collect()
        } else {
            Vec::new()
        };
        BackendSnapshot {
            name: b.config().name.clone(),
            addr: b.config().addr.clone(),
            backup: b.config().backup,
            discovered_from: b.config().discovered_from.clone(),
            leaving_at: None,
            state: h.state(),
            quarantine: h.quarantine().map(|q| QuarantineSnapshot {
                until: wall_time(q.until, now, wall),
                reason: q.reason,
            }),
            strikes: h.strikes(),
            good_probes: h.good_probes(),
            bad_probes: h.bad_probes(),
            connect_failures: h.connect_failures(),
            closes_at_once: h.closes_at_once(),
            height: b.height(),
            proven: b.proven(),
            last_probe: b.last_probe().cloned(),
            counters: Counters::of(b.stats()),
            connections: b.conns().len(),
            node: b.node().cloned(),
            suitability: b.suitability(),
            conns,
        }
    }
}

/// The wall-clock time of monotonic instant `at`, given both clocks' `now`.
pub(in crate::pool) fn wall_time(at: Instant, now: Instant, wall: SystemTime) -> SystemTime {
    if at >= now {
        wall + (at - now)
    } else {
        wall.checked_sub(now - at).unwrap_or(UNIX_EPOCH)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::config::Config;
    use crate::pool::close::Closer;

    fn pool() -> Arc<Pool> {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                    backends: [{ name: a, addr: \"127.0.0.1:9\" }, { name: b, addr: \"127.0.0.1:10\", backup: true }]\n";
        let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
        Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()))
    }

    #[test]
    fn a_registered_connection_is_copied_out_with_its_client_start_and_bytes() {
        let pool = pool();
        let started = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let entry = ConnEntry {
            started,
            ..ConnEntry::new("192.0.2.7:40001".parse().unwrap(), Arc::new(Closer::new()))
        };
        let (_lease, target) = pool.legs().reserve(42, entry.clone(), &[]).unwrap();
        entry.closer.bytes_up.fetch_add(100, Ordering::Relaxed);
        entry.closer.bytes_down.fetch_add(2500, Ordering::Relaxed);
        target.stats.bytes_up.fetch_add(100, Ordering::Relaxed);
        assert!(
            pool.legs()
                .splice_if_wanted(target.id, target.usable, &entry.closer, None)
        );

        let snap = pool.view().snapshot();
        assert_eq!(snap.name, "p");
        assert_eq!(snap.backends.len(), 2);
        let a = &snap.backends[0];
        assert_eq!(
            (a.name.as_str(), a.addr.as_str(), a.backup),
            ("a", "127.0.0.1:9", false)
        );
        assert!(snap.backends[1].backup);
        assert_eq!(a.connections, 1);
        assert_eq!(
            a.conns,
            [ConnSnapshot {
                id: 42,
                client: "192.0.2.7:40001".parse().unwrap(),
                started,
                bytes_up: 100,
                bytes_down: 2500,
                state: ConnState::Spliced,
            }]
        );
        assert_eq!(a.counters.bytes_up, 100);
        assert_eq!(a.counters.probes.len(), ProbeOutcome::ALL.len());
        assert!(snap.backends[1].conns.is_empty());

        // The overview counts connections without listing them.
        let overview = pool.view().overview();
        assert_eq!(overview.backends[0].connections, 1);
        assert!(overview.backends[0].conns.is_empty());

        entry.closer.close(crate::pool::close::CloseReason::Drained);
        assert_eq!(
            pool.view().snapshot().backends[0].conns[0].state,
            ConnState::Closing
        );
    }

    #[test]
    fn a_quarantined_backend_carries_its_window_and_reason() {
        let pool = pool();
        let before = SystemTime::now();
        pool.operator()
            .quarantine("b", Duration::from_secs(600))
            .unwrap();
        let after = SystemTime::now();

        let snap = pool.view().snapshot();
        let b = &snap.backends[1];
        assert_eq!(b.state, State::Quarantined);
        let q = b.quarantine.expect("quarantined");
        assert_eq!(q.reason, QuarantineReason::Manual);
        // Read back on the wall clock: ten minutes from when it was set,
        // give or take the snapshot's own clock reads.
        let slack = Duration::from_secs(1);
        assert!(
            q.until >= before + Duration::from_secs(600) - slack,
            "{q:?}"
        );
        assert!(q.until <= after + Duration::from_secs(600) + slack, "{q:?}");
        assert_eq!(snap.backends[0].quarantine, None);
        assert_eq!(snap.backends[0].state, State::Unknown);
    }

    #[test]
    fn a_snapshot_survives_serde() {
        let pool = pool();
        pool.operator()
            .quarantine("a", Duration::from_secs(60))
            .unwrap();
        let entry = ConnEntry::new("192.0.2.7:40001".parse().unwrap(), Arc::new(Closer::new()));
        let (_lease, _) = pool.legs().reserve(1, entry, &[]).unwrap();
        let snap = pool.view().snapshot();
        let json = serde_json::to_string(&snap).unwrap();
        assert!(json.contains("\"state\":\"quarantined\""), "{json}");
        assert!(json.contains("\"reason\":\"manual\""), "{json}");
        let back: PoolSnapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, snap);
    }

    #[test]
    fn wall_time_follows_the_monotonic_offset() {
        let now = Instant::now();
        let wall = UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(
            wall_time(now + Duration::from_secs(5), now, wall),
            wall + Duration::from_secs(5)
        );
        if let Some(earlier) = now.checked_sub(Duration::from_secs(20)) {
            assert_eq!(
                wall_time(earlier, now, wall),
                wall - Duration::from_secs(20)
            );
        }
    }
}
