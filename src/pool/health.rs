//! A backend's health record and the pure rules that move it: hysteresis,
//! quarantine windows that double per repeat offence, probe-gated return.
//!
//! Every transition is a plain function of (record, event, now), so the
//! rules are table-tested here without sockets or timers; the registry feeds
//! events in and acts on the [`Effect`]s that come out. The words they
//! use (a backend's [`State`], a probe's [`ProbeOutcome`], a
//! [`QuarantineReason`]) are in `health/outcome.rs`.

use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::PoolConfig;
use crate::pool::refused::ClosedFrom;

mod outcome;

pub use outcome::{ProbeOutcome, QuarantineReason, State};

/// The longest manual window an operator can ask for (`?for=`, `--for`):
/// far beyond any maintenance; a restored manual window is capped at it.
pub const MAX_MANUAL_WINDOW: Duration = Duration::from_secs(365 * 86_400);

/// A quarantine window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quarantine {
    /// When the window ends; after it, `rise` passed probes bring the backend back.
    pub until: Instant,
    /// Why.
    pub reason: QuarantineReason,
}

/// The thresholds the rules use, from the pool's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// First window.
    pub base: Duration,
    /// Window cap.
    pub max: Duration,
    /// Consecutive client connect failures that quarantine.
    pub failures: u32,
    /// Consecutive bad probe verdicts that quarantine.
    pub fall: u32,
    /// Consecutive passed probes, after the window, that bring it back.
    pub rise: u32,
}

impl Policy {
    /// The policy of a pool.
    pub fn of(config: &PoolConfig) -> Policy {
        Policy {
            base: config.quarantine.base,
            max: config.quarantine.max,
            failures: config.quarantine.failures,
            fall: config.health.fall,
            rise: config.health.rise,
        }
    }

    /// Window for the `strikes`-th quarantine since the last success:
    /// base, 2×base, 4×base … capped at max.
    pub fn window(&self, strikes: u32) -> Duration {
        let doublings = strikes.saturating_sub(1).min(31);
        self.base.saturating_mul(1 << doublings).min(self.max)
    }
}

/// What a transition did, for the caller to log and act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing an operator needs to hear about.
    None,
    /// Taken out for `window`.
    Quarantined {
        /// Why.
        reason: QuarantineReason,
        /// How long.
        window: Duration,
    },
    /// Back in service.
    Released,
}

/// A backend's health record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendHealth {
    /// `Unknown` or `Healthy`: the state while not taken out.
    base: State,
    /// Present while taken out (in the window or waiting for `rise` probes).
    quarantine: Option<Quarantine>,
    /// Quarantines since the last success; sets the next window.
    strikes: u32,
    /// Consecutive connect failures from client traffic.
    connect_failures: u32,
    /// Client connections the backend closed at once, with no byte sent,
    /// since one it served: they count with `connect_failures` (a node that
    /// banned our address accepts every connect, then closes it).
    closes_at_once: u32,
    /// The client addresses those closes came from: while they all came
    /// from one, they never reach `quarantine.failures` (one client's
    /// garbage is that client's matter, not the node's).
    closed_from: ClosedFrom,
    /// Consecutive bad probe verdicts.
    bad_probes: u32,
    /// Consecutive passed probes since the window ended.
    good_probes: u32,
    /// Last failed connect; orders fail-open attempts and merges one
    /// outage's concurrent failures into one.
    last_failure: Option<Instant>,
    /// Last probe that found the address down (refused or timed out).
    probe_down: Option<Instant>,
    /// Bumped by every change that is not a probe's doing (manual
    /// quarantine, release, client-traffic quarantine), so a probe that
    /// started before it is recognised as stale.
    epoch: u64,
}

impl BackendHealth {
    /// The window and reason, while taken out.
    pub fn quarantine(&self) -> Option<Quarantine> {
        self.quarantine
    }

    /// Quarantines since the last success.
    pub fn strikes(&self) -> u32 {
        self.strikes
    }

    /// Consecutive connect failures from client traffic.
    pub fn connect_failures(&self) -> u32 {
        self.connect_failures
    }

    /// Closes at once since a connection was served.
    pub fn closes_at_once(&self) -> u32 {
        self.closes_at_once
    }

    /// Consecutive bad probe verdicts.
    pub fn bad_probes(&self) -> u32 {
        self.bad_probes
    }

    /// Consecutive passed probes since the window ended.
    pub fn good_probes(&self) -> u32 {
        self.good_probes
    }

    /// The epoch: bumped by every change that is not a probe's doing.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Put a saved record back: its window (as the caller capped it),
    /// strikes and counts. The epoch moves on, so a probe in flight is
    /// stale.
    pub fn restore(&mut self, quarantine: Option<Quarantine>, counts: Counts) {
        self.quarantine = quarantine;
        self.strikes = counts.strikes;
        self.connect_failures = counts.connect_failures;
        self.closes_at_once = counts.closes_at_once;
        self.bad_probes = counts.bad_probes;
        self.good_probes = counts.good_probes;
        self.epoch += 1;
    }
}

/// The counts of a health record a saved record brings back.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// Quarantines since the last success.
    pub strikes: u32,
    /// Consecutive connect failures from client traffic.
    pub connect_failures: u32,
    /// Closes at once since a connection was served.
    pub closes_at_once: u32,
    /// Consecutive bad probe verdicts.
    pub bad_probes: u32,
    /// Consecutive passed probes since the window ended.
    pub good_probes: u32,
}

impl Default for BackendHealth {
    fn default() -> Self {
        BackendHealth {
            base: State::Unknown,
            quarantine: None,
            strikes: 0,
            connect_failures: 0,
            closes_at_once: 0,
            closed_from: ClosedFrom::Nobody,
            bad_probes: 0,
            good_probes: 0,
            last_failure: None,
            probe_down: None,
            epoch: 0,
        }
    }
}

impl BackendHealth {
    /// The state as reported.
    pub fn state(&self) -> State {
        self.quarantine.map_or(self.base, |q| q.reason.state())
    }

    /// The state while not taken out: `Unknown` or `Healthy`.
    pub fn base(&self) -> State {
        self.base
    }

    /// Set the state while not taken out, as a saved record had it; a
    /// state other than `Healthy` reads as `Unknown` (the others are
    /// quarantines, carried by [`BackendHealth::quarantine`]).
    pub fn set_base(&mut self, base: State) {
        self.base = match base {
            State::Healthy => State::Healthy,
            _ => State::Unknown,
        };
    }

    /// When a connect to it last failed, a client's or a probe's: fail-open
    /// attempts go to the least recently failed first.
    pub fn failed_at(&self) -> Option<Instant> {
        self.last_failure.max(self.probe_down)
    }

    /// Takes new clients.
    pub fn is_usable(&self) -> bool {
        self.state().is_usable()
    }

    /// Out, but its window is over (ended or released): its next probes
    /// decide whether it returns or gets a new window, so its connections
    /// are not drained meanwhile.
    pub fn awaiting_return(&self, now: Instant) -> bool {
        self.quarantine.is_some_and(|q| now >= q.until)
    }

    /// A client connection reached the backend.
    pub fn connect_succeeded(&mut self) {
        self.connect_failures = 0;
        if self.quarantine.is_none() {
            self.strikes = 0;
            self.base = State::Healthy;
        }
    }

    /// A client connect that began at `started` failed at `now`. Attempts
    /// that began before an already recorded failure belong to that same
    /// incident and count once.
    pub fn connect_failed(&mut self, started: Instant, now: Instant, policy: &Policy) -> Effect {
        let same_incident = self.last_failure.is_some_and(|t| started <= t);
        self.last_failure = Some(now);
        if same_incident || self.quarantine.is_some() {
            return Effect::None;
        }
        self.connect_failures = self.connect_failures.saturating_add(1);
        self.strike_if_failing(now, policy)
    }

    /// A client connection from `client` (its address as
    /// [`source_of`](crate::pool::admission::source_of) keys it) that
    /// began at `started` was closed by the backend at `now`, at once and
    /// before it sent a byte. Counts toward `quarantine.failures` like a
    /// failed connect (one incident once), but only as far as the closes
    /// come from at least 2 client addresses: one address's closes stop one
    /// short of the threshold. True in the second value when it moved the
    /// count (a new incident, and not one address's beyond that cap).
    pub fn closed_at_once(
        &mut self,
        client: IpAddr,
        started: Instant,
        now: Instant,
        policy: &Policy,
    ) -> (Effect, bool) {
        let same_incident = self.last_failure.is_some_and(|t| started <= t);
        self.last_failure = Some(now);
        if same_incident || self.quarantine.is_some() {
            return (Effect::None, false);
        }
        let before = self.failures(policy);
        self.closes_at_once = self.closes_at_once.saturating_add(1);
        self.closed_from = self.closed_from.and(client);
        let moved = self.failures(policy) > before;
        (self.strike_if_failing(now, policy), moved)
    }

    /// A client connection received bytes from the backend: it serves
    /// clients, closes so far were the clients' doing.
    pub fn served(&mut self) {
        self.closes_at_once = 0;
        self.closed_from = ClosedFrom::Nobody;
    }

    /// The failures from client traffic that count toward
    /// `quarantine.failures`: connect failures, and closes at once as far
    /// as they came from more than one client address.
    pub fn failures(&self, policy: &Policy) -> u32 {
        let closes = match self.closed_from {
            ClosedFrom::Many => self.closes_at_once,
            ClosedFrom::Nobody | ClosedFrom::One(_) => {
                self.closes_at_once.min(policy.failures.saturating_sub(1))
            }
        };
        self.connect_failures.saturating_add(closes)
    }

    fn strike_if_failing(&mut self, now: Instant, policy: &Policy) -> Effect {
        if self.failures(policy) < policy.failures {
            return Effect::None;
        }
        self.epoch += 1;
        self.take_out(QuarantineReason::ConnectFailures, now, policy)
    }

    /// A client connect or a probe found the backend's address to be one
    /// of this proxy's own listeners: out at once (every connect would
    /// loop), unless already out; again, for a longer window, when its
    /// window is over.
    pub fn self_loop(&mut self, now: Instant, policy: &Policy) -> Effect {
        self.last_failure = Some(now);
        if self.quarantine.is_some_and(|q| now < q.until) {
            return Effect::None;
        }
        self.epoch += 1;
        self.take_out(QuarantineReason::SelfLoop, now, policy)
    }

    /// Apply a probe's outcome at `now`.
    pub fn probe(&mut self, outcome: ProbeOutcome, now: Instant, policy: &Policy) -> Effect {
        let in_window = self.quarantine.is_some_and(|q| now < q.until);
        let reason = match outcome {
            ProbeOutcome::Healthy => return self.passed(in_window, policy),
            ProbeOutcome::Unknown => {
                self.bad_probes = 0;
                self.good_probes = 0;
                if self.quarantine.is_none() {
                    self.base = State::Unknown;
                }
                return Effect::None;
            }
            ProbeOutcome::Unhealthy => QuarantineReason::Unhealthy,
            ProbeOutcome::Lagging => QuarantineReason::Lagging,
            ProbeOutcome::Down => {
                self.probe_down = Some(now);
                QuarantineReason::Down
            }
            ProbeOutcome::Stalled => QuarantineReason::Stalled,
            ProbeOutcome::Unsuitable => QuarantineReason::Unsuitable,
        };
        self.bad_probes = self.bad_probes.saturating_add(1);
        self.good_probes = 0;
        // What the node says it is needs no second opinion: out at once.
        let fall = if reason == QuarantineReason::Unsuitable {
            1
        } else {
            policy.fall
        };
        match self.quarantine {
            Some(_) if in_window => Effect::None,
            // The window is over and it is still bad: the next, longer one.
            Some(_) => self.take_out(reason, now, policy),
            None if self.bad_probes >= fall => self.take_out(reason, now, policy),
            None => Effect::None,
        }
    }

    /// A probe passed: healthy again, or, once the window is over, one of
    /// the `rise` passes that bring it back.
    fn passed(&mut self, in_window: bool, policy: &Policy) -> Effect {
        self.bad_probes = 0;
        match self.quarantine {
            None => {
                self.strikes = 0;
                self.base = State::Healthy;
                Effect::None
            }
            Some(_) if in_window => Effect::None,
            Some(_) => {
                self.good_probes = self.good_probes.saturating_add(1);
                if self.good_probes < policy.rise {
                    return Effect::None;
                }
                self.quarantine = None;
                self.good_probes = 0;
                self.connect_failures = 0;
                self.closes_at_once = 0;
                self.closed_from = ClosedFrom::Nobody;
                self.base = State::Healthy;
                Effect::Released
            }
        }
    }

    /// An operator's maintenance window: exactly `window` from `now`;
    /// probes neither shorten nor extend it.
    pub fn quarantine_manual(&mut self, window: Duration, now: Instant) {
        self.epoch += 1;
        self.good_probes = 0;
        self.quarantine = Some(Quarantine {
            until: later(now, window),
            reason: QuarantineReason::Manual,
        });
    }

    /// End the window now; the backend still returns only after `rise`
    /// passed probes. Returns false (and changes nothing) when it was not
    /// quarantined.
    pub fn release(&mut self, now: Instant) -> bool {
        let Some(q) = &mut self.quarantine else {
            return false;
        };
        self.epoch += 1;
        q.until = q.until.min(now);
        true
    }

    fn take_out(&mut self, reason: QuarantineReason, now: Instant, policy: &Policy) -> Effect {
        self.strikes = self.strikes.saturating_add(1);
        self.bad_probes = 0;
        self.good_probes = 0;
        let window = policy.window(self.strikes);
        self.quarantine = Some(Quarantine {
            until: later(now, window),
            reason,
        });
        Effect::Quarantined { reason, window }
    }
}

/// `now + window`, saturating at a century instead of overflowing.
pub(in crate::pool) fn later(now: Instant, window: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    now.checked_add(window.min(CENTURY))
        .or_else(|| now.checked_add(Duration::from_secs(86_400)))
        .unwrap_or(now)
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
