//! What a pool hands the new process of a live upgrade besides its
//! connections: what its discover entries found, each backend's health
//! record (states, windows, strikes, heights, last probe) and its
//! cumulative counters, so the new process
//! judges as the old one did and `/status` and `/metrics` go on from where
//! they stood instead of from zero.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::config::BackendConfig;
use crate::pool::admission::Admission;
use crate::pool::backend::Backend;
use crate::pool::close::{CloseReason, Closer, Tick};
use crate::pool::discovered::HandedSource;
use crate::pool::health::{ProbeOutcome, QuarantineReason};
use crate::pool::members::Members;
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
    /// Clients refused at accept, per reason (`pin_proxy_rejected_total`).
    #[serde(default)]
    pub rejected: BTreeMap<String, u64>,
    /// Connections that ended without a backend, per `closed` reason.
    #[serde(default)]
    pub unplaced: BTreeMap<String, u64>,
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

/// A spliced connection a live upgrade stops, and how long it has been idle.
#[derive(Debug, Clone)]
pub struct Movable {
    /// How long since it last moved a byte, when the upgrade began.
    pub idle: Duration,
    /// Its closer: closed with [`CloseReason::Handover`], it stops for the
    /// handover; once its session is done, this is the last reference.
    pub closer: Arc<Closer>,
}

impl Movable {
    /// The idlest first and the busiest last: the order a live upgrade stops
    /// them in, so a connection in use keeps splicing here the longest and
    /// waits the least between processes.
    pub fn idlest_first(movable: &mut [Movable]) {
        movable.sort_by_key(|m| std::cmp::Reverse(m.idle));
    }

    /// Stop it for the handover.
    pub fn stop(&self) {
        self.closer.close(CloseReason::Handover);
    }

    /// True once its session is done with it: handed over, or ended.
    pub fn is_done(&self) -> bool {
        Arc::strong_count(&self.closer) == 1
    }
}

/// A live upgrade's pace: the connections stop a wave at a time, in the
/// order given, and the next wave only once every one of the last is done.
#[derive(Debug)]
pub struct Waves {
    movable: Vec<Movable>,
    size: usize,
    /// How many have been stopped (a prefix of `movable`).
    stopped: usize,
    /// How many of those are known done (a prefix of the stopped).
    done: usize,
}

impl Waves {
    /// `movable` in the order to stop them, `size` at a time (at least 1).
    /// None stops yet.
    pub fn new(movable: Vec<Movable>, size: usize) -> Waves {
        Waves {
            movable,
            size: size.max(1),
            stopped: 0,
            done: 0,
        }
    }

    /// True once every connection stopped so far is done.
    pub fn settled(&mut self) -> bool {
        while self.done < self.stopped && self.movable[self.done].is_done() {
            self.done += 1;
        }
        self.done == self.stopped
    }

    /// Stop the next wave, or every one left when `all`. False when none
    /// was left to stop.
    pub fn stop_next(&mut self, all: bool) -> bool {
        let left = self.movable.len() - self.stopped;
        if left == 0 {
            return false;
        }
        let n = if all { left } else { left.min(self.size) };
        let wave = &self.movable[self.stopped..self.stopped + n];
        wave.iter().for_each(Movable::stop);
        self.stopped += n;
        true
    }
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
        let (rejected, unplaced) = self.pool.tally.handed();
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
            rejected,
            unplaced,
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
        self.pool
            .tally
            .add_handed(&handed.rejected, &handed.unplaced);
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
            crate::pool::tally::add_closed(&s.closed, &n.closed);
            for o in ProbeOutcome::ALL {
                add(&s.probes[o.index()], n.probe_count(o));
            }
            for r in QuarantineReason::ALL {
                add(&s.quarantines[r.index()], n.quarantine_count(r));
            }
        }
        matched
    }

    /// A live upgrade takes the connections: every one still connecting
    /// stops for the handover as soon as it is spliced (see
    /// [`Legs::splice_if_wanted`](crate::pool::legs::Legs::splice_if_wanted)),
    /// and every spliced one is returned, idlest first, for the upgrade to
    /// stop in waves, so none is left behind. Under the lock, as splices are
    /// marked.
    pub fn begin(&self) -> Vec<Movable> {
        let m = self.pool.backends();
        self.pool.handing_over.store(true, Ordering::Relaxed);
        let now = Tick::now();
        // Leaving backends' too: the new process, which has no such
        // backend, drains them as a reload does.
        let mut movable: Vec<Movable> = m
            .active
            .iter()
            .chain(&m.leaving)
            .flat_map(|b| b.conns().values())
            .filter(|entry| entry.closer.is_movable())
            .map(|entry| Movable {
                idle: now.since(entry.closer.last_active()),
                closer: entry.closer.clone(),
            })
            .collect();
        Movable::idlest_first(&mut movable);
        movable
    }

    /// The upgrade failed: connections splice here again.
    pub fn end(&self) {
        let _guard = self.pool.backends();
        self.pool.handing_over.store(false, Ordering::Relaxed);
    }

    /// Register connection `conn`, carried over from another process, on
    /// the backend named `name` at `addr` (a backend whose address changed
    /// is another node), already spliced. A backend the pool no longer has
    /// is kept as a leaving one, one for all its connections, which are
    /// drained as a reload drains them once every connection has come
    /// over ([`Drains::recheck`](crate::pool::drain::Drains::recheck)).
    pub fn take_conn(
        &self,
        conn: ConnId,
        entry: ConnEntry,
        name: &str,
        addr: &str,
    ) -> (Lease, Target) {
        let mut m = self.pool.backends();
        entry.closer.set_spliced();
        let is = |b: &&mut Backend| b.config().name == name && b.config().addr == addr;
        let Members {
            active, leaving, ..
        } = &mut *m;
        if let Some(b) = active.iter_mut().chain(leaving.iter_mut()).find(is) {
            return self.pool.register(b, conn, entry);
        }
        let ids = active.iter().chain(leaving.iter()).map(|b| b.id() + 1);
        let gone = BackendConfig {
            name: name.to_owned(),
            addr: addr.to_owned(),
            backup: false,
            probe_url: None,
            discovered_from: None,
        };
        let mut gone = Backend::new(ids.max().unwrap_or(0), gone);
        let taken = self.pool.register(&mut gone, conn, entry);
        leaving.push(gone);
        taken
    }

    /// Admit a client handed over by another process: it was admitted
    /// there, so it counts here even above the limits (its source too).
    pub fn admit(&self, peer: IpAddr) -> Admission {
        Admission::handed_over(self.pool, peer)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Mutex, Weak};
    use std::task::{Context, Wake, Waker};
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::config::Config;

    /// Notes, in order, which connection's closer was woken.
    struct Woken {
        conn: ConnId,
        order: Arc<Mutex<Vec<ConnId>>>,
    }

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.order.lock().unwrap().push(self.conn);
        }
    }

    /// What `/metrics` counts of how connections ended and of clients
    /// refused goes on in the new process from where it stood, through the
    /// handed state's JSON; a reason this build does not know is dropped.
    #[test]
    fn ends_and_rejects_are_handed_over_with_the_counters() {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                    backends: [{ name: a, addr: \"127.0.0.1:9\" }, { name: b, addr: \"127.0.0.1:10\" }]\n";
        let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
        let pool = |_| Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()));
        let old = pool(());
        let b = old.backends().active[1].stats().clone();
        for _ in 0..3 {
            old.legs().count_closed(Some(&b), CloseReason::ClientClosed);
        }
        old.legs().count_closed(Some(&b), CloseReason::Drained);
        old.legs().count_closed(None, CloseReason::NoBackend);
        old.gate()
            .count_rejected(crate::pool::admission::Refusal::PerSource);
        old.gate()
            .count_rejected(crate::pool::admission::Refusal::PerSource);
        let before = old.view().ends();

        let json = serde_json::to_string(&old.upgrade().state()).unwrap();
        let mut handed: HandedPool = serde_json::from_str(&json).unwrap();
        handed.rejected.insert("from_a_later_build".to_owned(), 7);
        let new = pool(());
        assert_eq!(new.upgrade().take(&handed), 2);
        assert_eq!(new.view().ends(), before);
        // And it goes on counting from there.
        let b = new.backends().active[1].stats().clone();
        new.legs().count_closed(Some(&b), CloseReason::ClientClosed);
        let after = new.view().ends();
        let client_closed = |ends: &crate::pool::tally::Ends| {
            ends.closed.iter().find(|(name, _)| name == "b").unwrap().1
                [CloseReason::ClientClosed.index()]
            .1
        };
        assert_eq!((client_closed(&before), client_closed(&after)), (3, 4));
        assert_eq!(after.rejected.get("per_source"), Some(&2));
    }

    /// A live upgrade stops the idlest connections first and the busiest
    /// last, so the ones in use spend the least time between processes;
    /// nothing stops before the upgrade says so, and a connection is done
    /// once its session let go of it.
    #[test]
    fn a_handover_stops_the_idlest_first_and_the_busiest_last() {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                    backends: [{ name: a, addr: \"127.0.0.1:9\" }, { name: b, addr: \"127.0.0.1:10\" }]\n";
        let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
        let pool = Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()));
        let order = Arc::new(Mutex::new(Vec::new()));
        // Idle for: conn 1 a minute, 2 never, 3 an hour, 4 a second.
        let idle = [60, 0, 3600, 1];
        let mut held = Vec::new();
        for (conn, secs) in (1..).zip(idle) {
            let closer = Arc::new(Closer::handed(0, 0, Duration::from_secs(secs)));
            let entry = ConnEntry::new("10.0.0.1:1".parse().unwrap(), closer.clone());
            let (lease, target) = pool.legs().reserve(conn, entry, &[]).unwrap();
            assert!(
                pool.legs()
                    .splice_if_wanted(target.id, target.usable, &closer, None)
            );
            let waker = Waker::from(Arc::new(Woken {
                conn,
                order: order.clone(),
            }));
            assert!(
                closer
                    .poll_closed(&mut Context::from_waker(&waker))
                    .is_pending()
            );
            held.push((closer, lease));
        }
        let movable = pool.upgrade().begin();
        assert!(order.lock().unwrap().is_empty(), "none stopped yet");
        assert!(held.iter().all(|(c, _)| c.is_movable()));
        for m in &movable {
            m.stop();
        }
        assert_eq!(*order.lock().unwrap(), [3, 1, 4, 2]);
        assert!(
            held.iter()
                .all(|(c, _)| c.reason() == CloseReason::Handover)
        );
        assert!(!movable.iter().any(Movable::is_done));
        drop(held);
        assert!(movable.iter().all(Movable::is_done));
    }

    /// A backend whose address changed is another node: the connections
    /// handed over for the old one go to one leaving backend of their
    /// own, never to the configured one of that name.
    #[test]
    fn connections_of_a_backend_at_another_address_are_not_taken_by_it() {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                    backends: [{ name: a, addr: \"127.0.0.1:9\" }]\n";
        let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
        let pool = Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()));
        let take = |conn, addr| {
            let entry = ConnEntry::new("10.0.0.1:1".parse().unwrap(), Arc::new(Closer::new()));
            pool.upgrade().take_conn(conn, entry, "a", addr)
        };
        let (_kept, here) = take(1, "127.0.0.1:9");
        let (_gone, old) = take(2, "127.0.0.1:8");
        let (_gone_too, old_too) = take(3, "127.0.0.1:8");
        assert_ne!(old.id, here.id);
        assert_eq!(old_too.id, old.id);
        let m = pool.backends();
        assert_eq!(m.active[0].conns().keys().collect::<Vec<_>>(), [&1]);
        assert_eq!(m.leaving.len(), 1);
        assert_eq!(m.leaving[0].conns().keys().collect::<Vec<_>>(), [&2, &3]);
    }

    /// The next wave stops only once every connection of the last is done
    /// (its session let go of it), never two at once; a late upgrade stops
    /// all that are left.
    #[test]
    fn waves_stop_one_at_a_time_and_each_after_the_last_is_done() {
        // Seven connections, each held by its "session" until dropped.
        let mut held: Vec<Option<Arc<Closer>>> =
            (0..7).map(|_| Some(Arc::new(Closer::new()))).collect();
        let watch: Vec<Weak<Closer>> = held.iter().flatten().map(Arc::downgrade).collect();
        let stopped = || {
            watch
                .iter()
                .filter(|w| w.upgrade().is_some_and(|c| c.is_closing()))
                .count()
        };
        let movable = held
            .iter()
            .flatten()
            .map(|closer| Movable {
                idle: Duration::ZERO,
                closer: closer.clone(),
            })
            .collect();
        let mut waves = Waves::new(movable, 3);
        assert!(waves.settled(), "nothing stopped, nothing to wait for");
        assert_eq!(stopped(), 0, "none stops before it is asked");

        assert!(waves.stop_next(false));
        assert_eq!(stopped(), 3);
        let first = &held[..3];
        assert!(
            first
                .iter()
                .flatten()
                .all(|c| c.reason() == CloseReason::Handover)
        );
        // Two of the wave are done: not settled yet.
        held[0] = None;
        held[2] = None;
        assert!(!waves.settled());
        assert_eq!(stopped(), 3, "nothing more stops until asked");
        held[1] = None;
        assert!(waves.settled());

        assert!(waves.stop_next(false));
        assert_eq!(stopped(), 6);
        assert!(
            !waves.settled(),
            "the second wave's sessions still hold them"
        );
        held[3] = None;
        held[4] = None;
        assert!(!waves.settled());

        // Late: the rest stop at once, whatever the last wave's state.
        assert!(waves.stop_next(true));
        assert_eq!(stopped(), 7);
        assert!(!waves.stop_next(false), "none left");
        assert!(!waves.settled());
        held.iter_mut().for_each(|h| *h = None);
        assert!(waves.settled());
    }
}
