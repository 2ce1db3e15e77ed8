//! A backend's health state and the pure rules that move it.
//!
//! The registry owns one [`BackendHealth`] per backend and feeds it events
//! (connect results now; probe verdicts and quarantine windows later). Every
//! transition here is a plain function of (state, event, now) so it can be
//! table-tested without sockets or timers.

use std::fmt;

use tokio::time::Instant;

/// Where a backend stands, as the contract names the states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Never checked, or the last check could not tell. Usable.
    Unknown,
    /// The last check passed. Usable.
    Healthy,
    /// The node's own address refused or timed out a TCP connect.
    Down,
}

impl State {
    /// `healthy` and `unknown` backends take new clients.
    pub fn is_usable(self) -> bool {
        matches!(self, State::Healthy | State::Unknown)
    }

    /// The name used in logs, `/status` and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Unknown => "unknown",
            State::Healthy => "healthy",
            State::Down => "down",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A backend's health record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendHealth {
    /// Current state.
    pub state: State,
    /// When a connect to it last failed; orders fail-open attempts.
    pub last_failure: Option<Instant>,
    /// Consecutive connect failures from client traffic.
    pub consecutive_failures: u32,
}

impl Default for BackendHealth {
    fn default() -> Self {
        BackendHealth {
            state: State::Unknown,
            last_failure: None,
            consecutive_failures: 0,
        }
    }
}

/// What a state change looked like, for the caller to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// State before the event.
    pub from: State,
    /// State after the event.
    pub to: State,
}

impl BackendHealth {
    /// A client connection reached the backend.
    pub fn connect_succeeded(&mut self) -> Option<Transition> {
        self.consecutive_failures = 0;
        self.set(State::Healthy)
    }

    /// A client connection to the backend was refused or timed out.
    pub fn connect_failed(&mut self, now: Instant) -> Option<Transition> {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.last_failure = Some(now);
        self.set(State::Down)
    }

    fn set(&mut self, to: State) -> Option<Transition> {
        let from = self.state;
        self.state = to;
        (from != to).then_some(Transition { from, to })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_makes_unusable_and_success_restores() {
        let now = Instant::now();
        let mut h = BackendHealth::default();
        assert!(h.state.is_usable());
        assert_eq!(
            h.connect_failed(now),
            Some(Transition {
                from: State::Unknown,
                to: State::Down
            })
        );
        assert!(!h.state.is_usable());
        assert_eq!(h.connect_failed(now), None, "no change, no transition");
        assert_eq!(h.consecutive_failures, 2);
        assert_eq!(h.last_failure, Some(now));
        assert!(h.connect_succeeded().is_some());
        assert_eq!(h.state, State::Healthy);
        assert_eq!(h.consecutive_failures, 0);
    }
}
