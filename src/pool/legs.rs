//! A pool's side of its client connections' backend legs: the backend a
//! connection is placed on, whether it may splice there, and what its
//! connect, first bytes and end tell the pool. Failures of client traffic
//! count toward quarantine through the pure rules of
//! [`crate::pool::health`], applied under the pool lock as a probe report is
//! ([`crate::pool::apply`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::pool::admission::source_of;
use crate::pool::backend::Backend;
use crate::pool::close::{CloseReason, Closer};
use crate::pool::health::{Effect, Policy};
use crate::pool::members::Members;
use crate::pool::node;
use crate::pool::registry::{
    BackendId, BackendStats, ConnEntry, ConnId, Lease, LegSource, Pool, Target,
};
use crate::pool::saved::kept;
use crate::pool::select::{self, Candidate};

/// A pool's side of its connections' backend legs.
#[derive(Clone, Copy)]
pub struct Legs<'a> {
    pool: &'a Arc<Pool>,
}

impl Pool {
    /// This pool's side of its connections' backend legs.
    pub fn legs(self: &Arc<Self>) -> Legs<'_> {
        Legs { pool: self }
    }
}

impl Legs<'_> {
    /// Choose the next backend for connection `conn` and register it there.
    /// `tried` lists backends that already failed for this connection.
    pub fn reserve(
        &self,
        conn: ConnId,
        entry: ConnEntry,
        tried: &[BackendId],
    ) -> Option<(Lease, Target)> {
        let strict = node::strict(&self.pool.config().health);
        let mut backends = self.pool.backends();
        let now = Instant::now();
        backends.refused.forget_expired(now);
        let refused = backends.refused.of(source_of(entry.client.ip()), now);
        let cands: Vec<Candidate> = backends
            .active
            .iter()
            .map(|b| Candidate {
                usable: b.health().is_usable(),
                backup: b.config().backup,
                live: b.conns().len(),
                last_failure: b.health().failed_at(),
                tried: tried.contains(&b.id()),
                refused: refused(b.id()),
                unfit: !b.may_serve(strict),
            })
            .collect();
        drop(refused);
        let chosen = &mut backends.active[select::pick(&cands)?];
        Some(self.pool.register(chosen, conn, entry))
    }

    /// A client's backend leg to `backend` is up: mark it spliced (from
    /// then on drain and rebalance may close it) and return true, unless
    /// the backend was usable when chosen (`chosen_usable`) and has been
    /// taken out since while another is usable, or was found unable to
    /// serve the pool's clients: then false, and the client should go
    /// elsewhere. Under the pool lock, as drains are: a drain
    /// either came first (false here) or sees the connection spliced and
    /// closes it, so no client lands on a drained backend. `leg`, the
    /// connection's id and its backend leg's socket, is recorded for
    /// `/connections` in the same critical section.
    pub fn splice_if_wanted(
        &self,
        backend: BackendId,
        chosen_usable: bool,
        closer: &Closer,
        leg: Option<(ConnId, LegSource)>,
    ) -> bool {
        let strict = node::strict(&self.pool.config().health);
        let mut m = self.pool.backends();
        let wanted = m
            .active
            .iter()
            .any(|b| b.id() == backend && b.health().is_usable())
            || !m.any_takes_clients(strict);
        // Found unfit while we connected: never splice there, whatever else.
        let unfit = m
            .active
            .iter()
            .any(|b| b.id() == backend && !b.may_serve(strict));
        if unfit || (chosen_usable && !wanted) {
            return false;
        }
        closer.set_spliced();
        if let Some((conn, source)) = leg {
            set_source(&mut m, backend, conn, source);
        }
        if self.pool.handing_over.load(Ordering::Relaxed) {
            closer.close(CloseReason::Handover);
        } else if m.any_draining(backend) {
            // A fail-open client on a draining backend: the drain closes it too.
            self.pool.drain_wake.notify_one();
        }
        true
    }

    /// Record connection `conn`'s backend leg socket, on `backend`, for
    /// `/connections` (a connection handed over by a live upgrade, whose
    /// socket joins this process's loop after it is registered).
    pub fn set_source(&self, backend: BackendId, conn: ConnId, source: LegSource) {
        set_source(&mut self.pool.backends(), backend, conn, source);
    }

    /// Record the outcome of a client connect to `backend` that began at
    /// `started`.
    pub fn record_connect(&self, backend: BackendId, started: Instant, ok: bool) {
        if ok {
            let mut backends = self.pool.backends();
            if let Some(b) = Pool::find(&mut backends.active, backend) {
                b.stats().connections_total.fetch_add(1, Ordering::Relaxed);
                let before = kept(b.health());
                b.health_mut().connect_succeeded();
                self.pool.note(before, b.health());
            }
            return;
        }
        self.record_failure(backend, |_, b, policy| {
            b.health_mut()
                .connect_failed(started, Instant::now(), policy)
        });
    }

    /// A client connection from `client` to `backend` that began at
    /// `started` (connection `conn`) was closed by the backend at once,
    /// before it sent a byte:
    /// what a node that banned our address does to every client, and what
    /// any node does to one client's garbage; also a connect made from the
    /// client's own address (`source: client`) that the node refused or
    /// left unanswered, which may be of that client alone. Counts toward
    /// `quarantine.failures` like a failed connect, one incident once, as
    /// far as such closes come from 2 client addresses or more; the address
    /// is steered to the other backends for `quarantine.base`
    /// ([`crate::pool::refused`]).
    pub fn record_closed_at_once(
        &self,
        backend: BackendId,
        conn: ConnId,
        started: Instant,
        client: IpAddr,
    ) {
        let source = source_of(client);
        self.record_refused(backend, source, client);
        self.record_failure(backend, |pool, b, policy| {
            let now = Instant::now();
            // A client served since the last refusal ends the run, even
            // one still connected (pinned clients stay for days).
            if b.note_refused(conn) {
                b.health_mut().served();
            }
            let (effect, counted) = b.health_mut().closed_at_once(source, started, now, policy);
            let closing = b.health().closes_at_once() > 0;
            b.stats().closing_at_once.store(closing, Ordering::Relaxed);
            if counted {
                warn!(
                    pool = %pool.name, backend = %b.config().name,
                    closes = b.health().closes_at_once(), failures = policy.failures,
                    "closed_at_once"
                );
            }
            effect
        });
    }

    /// Remember that `backend` refused the address `source`; logged at
    /// each of its first 16 closes in a row, then the 32nd, 64th ...
    /// ([`fold::nth_logged`](crate::pool::fold::nth_logged)).
    fn record_refused(&self, backend: BackendId, source: IpAddr, client: IpAddr) {
        let config = self.pool.config();
        let q = &config.quarantine;
        let mut m = self.pool.backends();
        let count = m
            .refused
            .record(source, backend, Instant::now(), q.base, q.refused_clients);
        let Some(b) = m.active.iter().find(|b| b.id() == backend) else {
            return;
        };
        b.stats().refused_by_node.fetch_add(1, Ordering::Relaxed);
        if crate::pool::fold::nth_logged(u64::from(count)) {
            info!(
                pool = %self.pool.name, backend = %b.config().name, client = %client, count,
                "refused_by_node"
            );
        }
    }

    /// A client connection received bytes from `backend`: the closes at
    /// once counted so far were not the backend refusing clients.
    pub fn record_served(&self, backend: BackendId) {
        let mut backends = self.pool.backends();
        if let Some(b) = Pool::find(&mut backends.active, backend) {
            b.health_mut().served();
            b.stats().closing_at_once.store(false, Ordering::Relaxed);
        }
    }

    /// A client connect or a probe found `backend`'s address to be our own
    /// listener `to`: take it out at once (logged once per window).
    pub fn record_self_loop(&self, backend: BackendId, to: std::net::SocketAddr) {
        self.record_failure(backend, |pool, b, policy| {
            let effect = b.health_mut().self_loop(Instant::now(), policy);
            if effect != Effect::None {
                warn!(
                    pool = %pool.name, backend = %b.config().name, addr = b.config().addr.as_str(),
                    listener = %to, "self_loop"
                );
            }
            effect
        });
    }

    /// Count a failure of client traffic on `backend`, apply it with
    /// `apply`, and act on the effect.
    fn record_failure(
        &self,
        backend: BackendId,
        apply: impl FnOnce(&Pool, &mut Backend, &Policy) -> Effect,
    ) {
        let config = self.pool.config();
        let mut backends = self.pool.backends();
        let Some(b) = Pool::find(&mut backends.active, backend) else {
            return;
        };
        b.stats()
            .connect_failures_total
            .fetch_add(1, Ordering::Relaxed);
        let before = kept(b.health());
        let effect = apply(self.pool, b, &Policy::of(&config));
        self.pool.note(before, b.health());
        if self.pool.report(b, effect) {
            self.pool.drain(&mut backends, &config);
        }
    }

    /// A connection ended for `reason`, on the backend whose counters are
    /// `stats`, or before it reached one (`None`).
    pub fn count_closed(&self, stats: Option<&BackendStats>, reason: CloseReason) {
        self.pool.tally.count_closed(stats, reason);
    }
}

/// Record connection `conn`'s backend leg socket on `backend` (active or
/// leaving).
fn set_source(m: &mut Members, backend: BackendId, conn: ConnId, source: LegSource) {
    let Members {
        active, leaving, ..
    } = m;
    let mut on = active.iter_mut().chain(leaving.iter_mut());
    if let Some(b) = on.find(|b| b.id() == backend) {
        b.set_source(conn, source);
    }
}
