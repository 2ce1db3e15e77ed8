//! Drains: closing the connections of a backend taken out (or removed by a
//! reload) so its clients redial elsewhere, spread over
//! `health.drain_spread`, oldest first, and never the last usable leg.
//!
//! A drain starts when a backend's usability changes ([`Pool::drain`], under
//! the pool lock, from `apply` and `reconfigure`) and closes what is due at
//! once; the rest is closed by [`Drains::step`], which the runtime's
//! drain task calls at the deadline it returns or when
//! [`Drains::woken`] fires. The pace itself is the pure [`Schedule`].

mod schedule;

use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::time::Instant;
use tracing::{debug, info};

pub use schedule::Schedule;

use crate::config::PoolConfig;
use crate::pool::backend::Backend;
use crate::pool::close::CloseReason;
use crate::pool::health::State;
use crate::pool::members::Members;
use crate::pool::node;
use crate::pool::registry::Pool;
use crate::pool::snapshot::ConnState;

/// Why a backend is drained: the `reason` of its `drained` events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// Taken out: its state then.
    Out(State),
    /// Gone from the config (a reload, a lookup, a live upgrade's).
    Removed,
}

impl Cause {
    fn as_str(self) -> &'static str {
        match self {
            Cause::Out(state) => state.as_str(),
            Cause::Removed => "backend_removed",
        }
    }

    fn close_reason(self) -> CloseReason {
        match self {
            Cause::Out(_) => CloseReason::Drained,
            Cause::Removed => CloseReason::BackendRemoved,
        }
    }
}

/// One running drain of one backend.
#[derive(Debug, Clone)]
pub(in crate::pool) struct DrainRun {
    schedule: Schedule,
    cause: Cause,
    /// Connections movable when it started.
    planned: usize,
    /// Closed so far.
    closed: u64,
    started: Instant,
    spread: Duration,
    /// Held up by the last-leg rule until another backend is usable.
    paused: bool,
    /// Its start was logged (it did not finish in its first step).
    announced: bool,
}

impl DrainRun {
    /// A drain of the `planned` movable connections of a backend, from `now`.
    fn new(now: Instant, spread: Duration, planned: usize, cause: Cause) -> DrainRun {
        DrainRun {
            schedule: Schedule::new(now, spread, planned),
            cause,
            planned,
            closed: 0,
            started: now,
            spread,
            paused: false,
            announced: false,
        }
    }
}

/// Out of service: unusable and inside its window (a backend whose window
/// is over is left to its next probe: two released together both keep
/// their clients, whichever passes first).
fn out(b: &Backend, now: Instant) -> bool {
    !b.health().is_usable() && !b.health().awaiting_return(now)
}

impl Members {
    /// The connections of backend `name` that only the last-leg rule
    /// keeps: it is out, drains are on, and no backend of the pool is
    /// usable to take its clients. 0 otherwise.
    pub(in crate::pool) fn last_leg_kept(&self, config: &PoolConfig, name: &str) -> usize {
        if !config.health.drain || self.any_takes_clients(node::strict(&config.health)) {
            return 0;
        }
        let now = Instant::now();
        self.active
            .iter()
            .find(|b| b.config().name == name && out(b, now))
            .map_or(0, movable)
    }
}

fn movable(b: &Backend) -> usize {
    b.conns().values().filter(|e| e.closer.is_movable()).count()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A pool's drains: the task that closes their connections on their
/// pace steps them and waits for their wake; a live upgrade rechecks them.
#[derive(Clone, Copy)]
pub struct Drains<'a> {
    pool: &'a Pool,
}

impl Pool {
    /// This pool's drains.
    pub fn drains(&self) -> Drains<'_> {
        Drains { pool: self }
    }
}

impl<'a> Drains<'a> {
    /// Run the drain check now, once a live upgrade has adopted every
    /// connection: those on backends that are out drain here as they did
    /// before, and those kept for backends this config no longer has
    /// ([`Upgrade::take_conn`](crate::pool::handed::Upgrade::take_conn))
    /// are drained as a reload drains a removed backend's, all of them in
    /// one spread.
    pub fn recheck(&self) {
        let config = self.pool.config();
        let now = Instant::now();
        let mut m = self.pool.backends();
        // No drain yet, yet connections to close: only taken over ones.
        let (taken, draining) = std::mem::take(&mut m.leaving)
            .into_iter()
            .partition(|b| b.drain().is_none() && movable(b) > 0);
        m.leaving = draining;
        for gone in taken {
            let spread = config.health.drain_spread;
            self.pool.remove_backend(&mut m, gone, now, spread);
        }
        self.pool.drain(&mut m, &config);
    }

    /// Close the connections of running drains and sheds
    /// ([`crate::pool::shed`]) that are due at `now`, and end the drains
    /// that are done or whose backend is back. Returns when the next close
    /// is due; `None` when none is scheduled (nothing drains or sheds, or
    /// every drain waits for a peer to become usable or for a connecting
    /// client): [`Drains::woken`] fires when that changes.
    pub fn step(&self, now: Instant) -> Option<Instant> {
        let config = self.pool.config();
        let mut m = self.pool.backends();
        self.pool.step_locked(&mut m, &config, now)
    }

    /// Resolves once a drain started, resumed or may have new work: what
    /// the drain task waits on besides its deadline. A wake that came while
    /// nobody waited is kept for the next wait. Cancel-safe.
    pub fn woken(&self) -> Notified<'a> {
        self.pool.drain_wake.notified()
    }
}

impl Pool {
    /// Start a drain of every backend taken out that has none (or hurry
    /// one whose backend went `down`), and close what is due now, resuming
    /// the drains the last-leg rule held up. Runs
    /// after every usability change (so a kept last leg is drained as soon
    /// as a peer is usable), under the pool lock. A `down` backend is
    /// drained at once, whatever `drain_spread` says.
    pub(in crate::pool) fn drain(&self, m: &mut Members, config: &PoolConfig) {
        let now = Instant::now();
        if config.health.drain && m.any_takes_clients(node::strict(&config.health)) {
            for b in m.active.iter_mut().filter(|b| out(b, now)) {
                let state = b.health().state();
                let spread = if state == State::Down {
                    Duration::ZERO
                } else {
                    config.health.drain_spread
                };
                match b.drain_mut() {
                    None => {
                        let planned = movable(b);
                        if planned > 0 {
                            *b.drain_mut() =
                                Some(DrainRun::new(now, spread, planned, Cause::Out(state)));
                        }
                    }
                    Some(run) if spread.is_zero() && !run.schedule.is_at_once() => {
                        // Turned down mid-drain: the rest go now.
                        run.schedule = run.schedule.at_once(run.closed, now);
                        run.spread = spread;
                        run.cause = Cause::Out(state);
                    }
                    Some(_) => {}
                }
            }
        }
        self.settle(m, config, now);
    }

    /// Close what is due (drains and sheds), announce the drains that go
    /// on, wake the drain task to wait for their next deadline. Under the
    /// pool lock.
    pub(in crate::pool) fn settle(&self, m: &mut Members, config: &PoolConfig, now: Instant) {
        self.step_locked(m, config, now);
        for b in m.active.iter_mut().chain(m.leaving.iter_mut()) {
            let name = b.config().clone();
            let Some(run) = b.drain_mut().as_mut().filter(|r| !r.announced) else {
                continue;
            };
            run.announced = true;
            info!(
                pool = %self.name, backend = %name.name, connections = run.planned,
                spread_ms = millis(run.spread), reason = run.cause.as_str(), phase = "start",
                "drained"
            );
        }
        self.drain_wake.notify_one();
    }

    fn step_locked(&self, m: &mut Members, config: &PoolConfig, now: Instant) -> Option<Instant> {
        // The last-leg rule, checked again before each close.
        let any_takes = m.any_takes_clients(node::strict(&config.health));
        let mut next: Option<Instant> = None;
        for b in &mut m.active {
            next = earliest(next, self.advance_shed(b, now));
            if b.drain().is_none() {
                continue;
            }
            if !config.health.drain || !out(b, now) {
                self.stop_drain(b);
                continue;
            }
            next = earliest(next, self.advance(b, any_takes, now));
        }
        for b in &mut m.leaving {
            next = earliest(next, self.advance_shed(b, now));
            next = earliest(next, self.advance(b, any_takes, now));
        }
        m.leaving
            .retain(|b| b.drain().is_some() || !b.conns().is_empty());
        next
    }

    /// Close `b`'s connections that are due, oldest first.
    fn advance(&self, b: &mut Backend, any_takes: bool, now: Instant) -> Option<Instant> {
        let mut run = b.drain_mut().take()?;
        if !any_takes {
            if !run.paused {
                run.paused = true;
                debug!(
                    pool = %self.name, backend = %b.config().name, closed = run.closed,
                    "drain_paused"
                );
            }
            *b.drain_mut() = Some(run);
            return None;
        }
        if run.paused {
            // A peer is usable again: go on at the same pace, not in a burst.
            run.paused = false;
            run.schedule = run.schedule.resumed(run.closed, now);
            debug!(pool = %self.name, backend = %b.config().name, "drain_resumed");
        }
        let due = run.schedule.due(now);
        let reason = run.cause.close_reason();
        let mut open = b.conns().values().filter(|e| e.closer.is_movable());
        while run.closed < due {
            let Some(entry) = open.next() else { break };
            entry.closer.close(reason);
            run.closed += 1;
        }
        let left = open.count();
        let connecting = b
            .conns()
            .values()
            .any(|e| e.closer.state() == ConnState::Connecting);
        if left == 0 && !connecting {
            info!(
                pool = %self.name, backend = %b.config().name, connections = run.closed,
                spread_ms = millis(run.spread), duration_ms = millis(now - run.started),
                reason = run.cause.as_str(), phase = "end", "drained"
            );
            return None;
        }
        let next = (left > 0).then(|| run.schedule.at(run.closed));
        *b.drain_mut() = Some(run);
        next
    }

    /// `b` is back (usable, its window over, put back by a reload, or
    /// drains are switched off): the rest of its connections stay.
    pub(in crate::pool) fn stop_drain(&self, b: &mut Backend) {
        let Some(run) = b.drain_mut().take() else {
            return;
        };
        info!(
            pool = %self.name, backend = %b.config().name, connections = run.closed,
            kept = movable(b), reason = run.cause.as_str(), state = b.health().state().as_str(),
            "drain_stopped"
        );
    }

    /// `b` is gone from the config: drain all its connections, the
    /// last-leg rule kept, spread over `spread`. A drain it had for being
    /// out gives way to this one.
    pub(in crate::pool) fn drain_removed(&self, b: &mut Backend, now: Instant, spread: Duration) {
        self.stop_drain(b);
        *b.drain_mut() = Some(DrainRun::new(now, spread, movable(b), Cause::Removed));
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
#[path = "drain_tests.rs"]
mod tests;
