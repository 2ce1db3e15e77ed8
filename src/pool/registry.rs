//! Per-pool state: backends, their health, their live connections and counters.
//!
//! One `Mutex` per pool guards membership, health and connection sets
//! together, so selection sees them in step and reserves its slot in the same
//! critical section (concurrent clients spread 3/2/2, never 7/0/0). The lock
//! is never held across an `.await`. Byte counters (each backend's, and each
//! connection's in its [`Closer`]) are atomics the splice updates without
//! the lock.
//!
//! Each connection registers a [`Closer`] so any one of them can be closed
//! from outside (drain, rebalance: "the busiest backend's newest connection";
//! connection ids grow, so the newest is the largest).
//!
//! A backend removed by a reload (or gone from the config a live upgrade's
//! process started with) leaves selection, probes and snapshots at once
//! but stays in the pool's `leaving` list while its connections are
//! drained (see [`drain`](crate::pool::drain)); their leases unregister
//! there.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{BackendConfig, PoolConfig};
use crate::pool::backend::Backend;
use crate::pool::close::{CloseReason, Closer};
use crate::pool::discovered::{self, Source};
use crate::pool::fold::Folds;
use crate::pool::health::{ProbeOutcome, QuarantineReason};
use crate::pool::members::Members;
use crate::pool::members::{Change, MemberPlan};
use crate::pool::node;
use crate::pool::own::OwnListeners;
use crate::pool::refused::Refusals;
use crate::pool::saved::HealthChanges;
use crate::pool::tally::Tally;

/// Process-wide connection id, as logged in `conn`.
pub type ConnId = u64;

/// Stable identity of a backend within its pool (survives reloads).
pub type BackendId = u64;

/// Cumulative counters of one backend, shared with its connections.
#[derive(Debug, Default)]
pub struct BackendStats {
    /// Client connections spliced to it.
    pub connections_total: AtomicU64,
    /// Failed connects from client traffic (closes at once included).
    pub connect_failures_total: AtomicU64,
    /// Some client connections were closed at once since one was served:
    /// the next one that receives bytes tells the pool (see
    /// [`Legs::record_served`](crate::pool::legs::Legs::record_served)). Read without the lock on every close.
    pub closing_at_once: AtomicBool,
    /// Bytes client → backend.
    pub bytes_up: AtomicU64,
    /// Bytes backend → client.
    pub bytes_down: AtomicU64,
    /// Probe results by outcome, at [`ProbeOutcome::index`].
    pub probes: [AtomicU64; ProbeOutcome::ALL.len()],
    /// Quarantines by reason, at [`QuarantineReason::index`].
    pub quarantines: [AtomicU64; QuarantineReason::ALL.len()],
    /// Connections that ended, by reason, at [`CloseReason::index`].
    pub closed: [AtomicU64; CloseReason::ALL.len()],
    /// Client connections it closed at once, before a byte: its refusals
    /// of clients (`refused_by_node`).
    pub refused_by_node: AtomicU64,
    /// Client connections made from the proxy's own address because the
    /// client's family is not the backend's (`source_fallback`).
    pub source_fallbacks: AtomicU64,
}

/// The last probe of a backend, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// When it finished.
    pub at: SystemTime,
    /// What it found.
    pub outcome: ProbeOutcome,
    /// Why, in a few words.
    pub detail: String,
}

/// A live connection as the registry knows it (one per connection: kept
/// small; what `/connections` lists).
#[derive(Debug, Clone)]
pub struct ConnEntry {
    /// The client's address.
    pub client: SocketAddr,
    /// When the client was accepted (wall clock, for snapshots).
    pub started: SystemTime,
    /// Closes it and counts its bytes.
    pub closer: Arc<Closer>,
    /// The PROXY header's sender it came through: boxed, so a direct
    /// client's entry (most are) holds a null pointer, never an address.
    pub via: Option<Box<SocketAddr>>,
    /// Its backend leg's socket, once connected: asked for its local
    /// address only when a listing shows it.
    pub source: Option<LegSource>,
}

/// A backend leg's socket as the registry may ask it, without owning it.
pub trait LegSocket: Send + Sync {
    /// Its local address, while it is open.
    fn local(&self) -> Option<SocketAddr>;
}

/// Where a connection's backend leg leaves from: its socket, asked when a
/// listing shows it, so a connection nobody lists makes no `getsockname`.
pub type LegSource = Weak<dyn LegSocket>;

impl ConnEntry {
    /// A connection from `client`, accepted now, not yet connected.
    pub fn new(client: SocketAddr, closer: Arc<Closer>) -> ConnEntry {
        ConnEntry {
            client,
            started: SystemTime::now(),
            closer,
            via: None,
            source: None,
        }
    }

    /// The same, come through the PROXY header's sender `via`.
    pub fn via(self, via: Option<SocketAddr>) -> ConnEntry {
        ConnEntry {
            via: via.map(Box::new),
            ..self
        }
    }
}

/// Where a chosen connection goes.
#[derive(Debug, Clone)]
pub struct Target {
    /// Backend id.
    pub id: BackendId,
    /// Its settings as they were when chosen: `name` for logs, `addr`
    /// (`host:port`) to resolve and connect.
    pub config: Arc<BackendConfig>,
    /// Counters to update.
    pub stats: Arc<BackendStats>,
    /// It was usable when chosen (false: a fail-open attempt).
    pub usable: bool,
}

/// A pool and its mutable state.
#[derive(Debug)]
pub struct Pool {
    /// Pool name.
    pub name: String,
    config: ArcSwap<PoolConfig>,
    listen: ArcSwap<Vec<SocketAddr>>,
    backends: Mutex<Members>,
    pub(in crate::pool) clients: AtomicUsize,
    /// Connections from a trusted sender whose PROXY header is still being
    /// read: not admitted yet, but clients all the same.
    pub(in crate::pool) headers: AtomicUsize,
    /// Live clients per source address, while a per-source limit is set.
    pub(in crate::pool) sources: Mutex<HashMap<IpAddr, usize>>,
    /// Connections moved by the rebalancer.
    pub(in crate::pool) rebalance_moves: AtomicU64,
    /// Rejected clients and connection ends, for `/metrics`.
    pub(in crate::pool) tally: Tally,
    /// Cancelled when the pool stops (shutdown or removal by reload).
    pub token: CancellationToken,
    /// No backend can serve the pool's clients (each judged unfit, or
    /// not judged while the pool is strict): clients are refused at accept
    /// (`no_suitable_backend`). Set under the lock by
    /// [`Pool::note_servable`], read without it.
    pub(in crate::pool) unservable: AtomicBool,
    /// Set by [`Pool::stop`]: the reason every connection closes with.
    stopped: OnceLock<CloseReason>,
    /// Every listener of the process, which backend legs never dial.
    own: Arc<OwnListeners>,
    /// A live upgrade is taking the connections: each one is stopped for
    /// the handover as soon as it is spliced. Read and set under the lock.
    pub(in crate::pool) handing_over: AtomicBool,
    /// Wakes the drain task: a drain started, resumed or has new work.
    pub(in crate::pool) drain_wake: Notify,
    /// Wakes the discovery task: a reload changed what it looks up.
    pub discover_wake: Notify,
    /// Bumped when a backend's quarantine, strikes or state changes (or
    /// membership does): what the state file writer waits on.
    pub(in crate::pool) changes: Arc<HealthChanges>,
    /// `closed` lines of short or empty connections, folded per reason.
    pub closed_folds: Folds<&'static str>,
}

impl Pool {
    /// A pool with fresh backend states; `token` stops its listeners and
    /// tasks, [`Pool::stop`] also closes its connections.
    pub fn new(config: PoolConfig, token: CancellationToken) -> Pool {
        let backends = config
            .backends
            .iter()
            .zip(0..)
            .map(|(b, id)| Backend::new(id, b.clone()))
            .collect();
        let sources = config.discover.iter().cloned().map(Source::new).collect();
        // No probe has judged a backend yet: a strict pool serves nobody.
        let unservable = node::strict(&config.health) && !config.backends.is_empty();
        Pool {
            name: config.name.clone(),
            config: ArcSwap::from_pointee(config),
            listen: ArcSwap::from_pointee(Vec::new()),
            backends: Mutex::new(Members {
                active: backends,
                leaving: Vec::new(),
                sources,
                unclaimed: Vec::new(),
                refused: Refusals::default(),
            }),
            clients: AtomicUsize::new(0),
            headers: AtomicUsize::new(0),
            sources: Mutex::default(),
            rebalance_moves: AtomicU64::new(0),
            tally: Tally::default(),
            token,
            unservable: AtomicBool::new(unservable),
            stopped: OnceLock::new(),
            own: Arc::default(),
            handing_over: AtomicBool::new(false),
            drain_wake: Notify::new(),
            discover_wake: Notify::new(),
            changes: Arc::default(),
            closed_folds: Folds::default(),
        }
    }

    /// The pool, telling `changes` (shared by every pool of the process)
    /// when a backend's saved health changes.
    pub fn with_changes(self, changes: Arc<HealthChanges>) -> Pool {
        Pool { changes, ..self }
    }

    /// The pool, sharing the process's listener set `own`.
    pub fn with_own(self, own: Arc<OwnListeners>) -> Pool {
        Pool { own, ..self }
    }

    /// The process's listeners, which backend legs never dial.
    pub fn own(&self) -> &OwnListeners {
        &self.own
    }

    /// The current settings (a cheap snapshot).
    pub fn config(&self) -> Arc<PoolConfig> {
        self.config.load_full()
    }

    /// The addresses its listeners are bound to.
    pub fn listen(&self) -> Arc<Vec<SocketAddr>> {
        self.listen.load_full()
    }

    /// Record the bound listener addresses.
    pub fn set_listen(&self, addrs: Vec<SocketAddr>) {
        self.listen.store(Arc::new(addrs));
    }

    /// Lock the backends. Callers keep the guard short and never `.await`
    /// with it held. Readers outside the pool take a snapshot instead.
    pub(in crate::pool) fn backends(&self) -> MutexGuard<'_, Members> {
        // A panic while holding the lock leaves plain data behind that is
        // still consistent enough to serve; keep going rather than cascade.
        self.backends.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Apply a reloaded config: backends are matched by name (and address;
    /// a backend whose address changed is a different node). Kept ones keep
    /// their health, strikes and connections (a removed one still being
    /// drained comes back with what it has left); removed ones leave
    /// selection at once and have their connections drained over the new
    /// `health.drain_spread`, the last leg kept. Settings apply to new work.
    /// A discover entry that looks up the same thing keeps its members.
    pub fn reconfigure(&self, config: PoolConfig) {
        let now = Instant::now();
        let mut m = self.backends();
        discovered::reconfigure_sources(&mut m, &config);
        self.config.store(Arc::new(config));
        let config = self.config();
        self.set_members(&mut m, &config, now);
        // A new entry is looked up now, not an interval later.
        self.discover_wake.notify_one();
    }

    /// Make the pool's backends the ones `config` and the discover
    /// entries' members name, as the [`MemberPlan`] between them has it
    /// (a reload and a lookup alike). Returns the members that joined and
    /// how many left.
    pub(in crate::pool) fn set_members(
        &self,
        m: &mut Members,
        config: &PoolConfig,
        now: Instant,
    ) -> (Vec<(BackendId, Arc<BackendConfig>)>, usize) {
        let ids = m.active.iter().chain(&m.leaving).map(|b| b.id() + 1);
        let mut next_id = ids.max().unwrap_or(0);
        let wanted = discovered::wanted(config, &m.sources);
        let plan = MemberPlan::between(m.active.iter().map(|b| &**b.config()), &wanted);
        let changes: Vec<Change> = plan.wanted.iter().map(|(_, c)| *c).collect();
        drop(plan);
        // By name and address, as the plan matched them.
        let mut old: HashMap<(String, String), Backend> = std::mem::take(&mut m.active)
            .into_iter()
            .map(|b| ((b.config().name.clone(), b.config().addr.clone()), b))
            .collect();
        let mut added = Vec::new();
        for (bc, change) in wanted.into_iter().zip(changes) {
            let same = |b: &Backend| b.config().same_backend(&bc);
            let kept = match change {
                Change::Kept | Change::Changed => old.remove(&(bc.name.clone(), bc.addr.clone())),
                Change::Added => None,
            };
            let backend = if let Some(b) = kept {
                b
            } else if let Some(i) = m.leaving.iter().position(same) {
                let mut b = m.leaving.swap_remove(i);
                self.stop_drain(&mut b);
                b
            } else {
                next_id += 1;
                tracing::info!(pool = %self.name, backend = %bc.name, addr = bc.addr.as_str(), "backend_added");
                let mut b = Backend::new(next_id, bc.clone());
                self.claim_saved(&mut m.unclaimed, &mut b);
                added.push((b.id(), b.config().clone()));
                b
            };
            let mut backend = backend;
            backend.set_config(Arc::new(bc));
            m.active.push(backend);
        }
        let removed = old.len();
        let mut old: Vec<Backend> = old.into_values().collect();
        old.sort_by_key(|b| b.id());
        for gone in old {
            self.remove_backend(m, gone, now, config.health.drain_spread);
        }
        self.note_servable(m, config);
        self.settle(m, config, now);
        // Backends may have come or gone: the saved set changes with them.
        self.changes.bump();
        (added, removed)
    }

    /// `gone` is no longer wanted (a reload, a lookup, or the config a live
    /// upgrade's process started with left it out): out of selection, its
    /// connections drained over `spread`, the last leg kept, in `leaving`
    /// until they are all gone.
    pub(in crate::pool) fn remove_backend(
        &self,
        m: &mut Members,
        mut gone: Backend,
        now: Instant,
        spread: Duration,
    ) {
        tracing::info!(pool = %self.name, backend = %gone.config().name, connections = gone.conns().len(), "backend_removed");
        if !gone.conns().is_empty() {
            self.drain_removed(&mut gone, now, spread);
            m.leaving.push(gone);
        }
    }

    /// Put connection `conn` on backend `b`: its lease and target. A
    /// connection registered after the pool stopped is closed at once
    /// (`stop` has already swept the registry).
    pub(in crate::pool) fn register(
        self: &Arc<Self>,
        b: &mut Backend,
        conn: ConnId,
        entry: ConnEntry,
    ) -> (Lease, Target) {
        if let Some(reason) = self.stopped.get() {
            entry.closer.close(*reason);
        }
        b.attach(conn, entry);
        let target = Target {
            id: b.id(),
            config: b.config().clone(),
            stats: b.stats().clone(),
            usable: b.health().is_usable(),
        };
        let lease = Lease {
            pool: self.clone(),
            backend: b.id(),
            conn,
        };
        (lease, target)
    }

    /// Stop the pool: cancel its token (listeners, rebalancer) and close
    /// every connection with `reason`, including one that registers later.
    pub fn stop(&self, reason: CloseReason) {
        // A second stop keeps the first reason.
        let _ = self.stopped.set(reason);
        self.token.cancel();
        self.close_all(reason);
    }

    /// Close every connection of the pool with `reason`.
    pub fn close_all(&self, reason: CloseReason) {
        let m = self.backends();
        for b in m.active.iter().chain(&m.leaving) {
            for entry in b.conns().values() {
                entry.closer.close(reason);
            }
        }
    }

    /// Work out again whether any backend can serve the pool's clients:
    /// after a probe judged one, and when members or the requirement
    /// changed. A pool with no backends at all is not `unservable` (its
    /// clients find no backend, as before).
    pub(in crate::pool) fn note_servable(&self, m: &Members, config: &PoolConfig) {
        let strict = node::strict(&config.health);
        let none = !m.active.is_empty() && !m.active.iter().any(|b| b.may_serve(strict));
        self.unservable.store(none, Ordering::Release);
    }

    /// The backend with id `id`, if it is still configured.
    pub(in crate::pool) fn find(backends: &mut [Backend], id: BackendId) -> Option<&mut Backend> {
        // Ids are handed out in config order, so a backend usually sits at
        // its id: every probe and its window checks find theirs without a
        // walk through a pool of thousands.
        let at = usize::try_from(id)
            .ok()
            .filter(|&i| backends.get(i).is_some_and(|b| b.id() == id));
        match at {
            Some(i) => backends.get_mut(i),
            None => backends.iter_mut().find(|b| b.id() == id),
        }
    }

    fn unregister(&self, backend: BackendId, conn: ConnId) {
        let mut m = self.backends();
        let Members {
            active, leaving, ..
        } = &mut *m;
        if let Some(b) = active
            .iter_mut()
            .chain(leaving.iter_mut())
            .find(|b| b.id() == backend)
        {
            b.detach(conn);
            if b.drain().is_some() {
                // The drain may be done now that this one has gone.
                self.drain_wake.notify_one();
            }
        }
        leaving.retain(|b| b.drain().is_some() || !b.conns().is_empty());
    }
}

/// A connection's registration on a backend; unregistered on drop.
#[derive(Debug)]
pub struct Lease {
    pool: Arc<Pool>,
    backend: BackendId,
    conn: ConnId,
}

impl Lease {
    /// The backend this lease is on.
    pub fn backend(&self) -> BackendId {
        self.backend
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.unregister(self.backend, self.conn);
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
