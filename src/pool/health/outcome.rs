//! The words of a backend's health, as the contract names them: where it
//! stands ([`State`]), what one probe found ([`ProbeOutcome`]),
//! and why it is quarantined ([`QuarantineReason`]), each with the name
//! logs, `/status` and metrics use.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a backend stands, as the contract names the states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Never probed, or the last probe could not tell. Usable.
    Unknown,
    /// The last probe or connect passed. Usable.
    Healthy,
    /// Out: its height trails the best usable backend by more than `max_lag_blocks`.
    Lagging,
    /// Out: a probe said so (e.g. Blockbook `inSync: false`).
    Unhealthy,
    /// Out: its clients' connections received nothing from it for
    /// `health.stall_timeout` while another backend's did.
    Stalled,
    /// Out: the node's own address refused or timed out the TCP connect.
    Down,
    /// Out: put in maintenance by an operator.
    Quarantined,
    /// Out: the node cannot serve this pool's clients (services, protocol
    /// or chain); it never gets a client, not even to fail open.
    Unsuitable,
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
            State::Lagging => "lagging",
            State::Unhealthy => "unhealthy",
            State::Stalled => "stalled",
            State::Down => "down",
            State::Quarantined => "quarantined",
            State::Unsuitable => "unsuitable",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one probe found, once the lag rule has been applied: the `outcome`
/// of `probe` events, `/status` and `pin_proxy_probes_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// Passed.
    Healthy,
    /// Could not tell; usable, neither passes nor fails.
    Unknown,
    /// Failed: the node says it is not fit to serve.
    Unhealthy,
    /// Failed: its height trails the reference by more than `max_lag_blocks`.
    Lagging,
    /// Failed: the node's own address refused or timed out the connect.
    Down,
    /// Failed: the probe passed, but its clients' connections have
    /// received nothing for `health.stall_timeout` while another
    /// backend's did.
    Stalled,
    /// Failed: the node told what it is, and it cannot serve this pool's
    /// clients (`health.require_services`, `min_protocol_version`, chain).
    Unsuitable,
}

impl ProbeOutcome {
    /// Every outcome, in the order of [`ProbeOutcome::index`].
    pub const ALL: [ProbeOutcome; 7] = [
        ProbeOutcome::Healthy,
        ProbeOutcome::Unknown,
        ProbeOutcome::Unhealthy,
        ProbeOutcome::Lagging,
        ProbeOutcome::Down,
        ProbeOutcome::Stalled,
        ProbeOutcome::Unsuitable,
    ];

    /// Its position in [`ProbeOutcome::ALL`], for per-outcome counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name used in logs, `/status` and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeOutcome::Healthy => "healthy",
            ProbeOutcome::Unknown => "unknown",
            ProbeOutcome::Unhealthy => "unhealthy",
            ProbeOutcome::Lagging => "lagging",
            ProbeOutcome::Down => "down",
            ProbeOutcome::Stalled => "stalled",
            ProbeOutcome::Unsuitable => "unsuitable",
        }
    }
}

/// Why a backend was taken out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuarantineReason {
    /// `quarantine.failures` consecutive connect failures from client traffic.
    ConnectFailures,
    /// `health.fall` probes said down.
    Down,
    /// `health.fall` probes said unhealthy.
    Unhealthy,
    /// `health.fall` probes found it lagging.
    Lagging,
    /// An operator's maintenance window.
    Manual,
    /// Its address is one of this proxy's own listeners.
    SelfLoop,
    /// `health.fall` probes found its clients' connections stalled.
    Stalled,
    /// A probe found the node unfit for this pool's clients.
    Unsuitable,
}

impl QuarantineReason {
    /// Every reason, in the order of [`QuarantineReason::index`].
    pub const ALL: [QuarantineReason; 8] = [
        QuarantineReason::ConnectFailures,
        QuarantineReason::Down,
        QuarantineReason::Unhealthy,
        QuarantineReason::Lagging,
        QuarantineReason::Manual,
        QuarantineReason::SelfLoop,
        QuarantineReason::Stalled,
        QuarantineReason::Unsuitable,
    ];

    /// Its position in [`QuarantineReason::ALL`], for per-reason counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name used in logs, `/status` and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineReason::ConnectFailures => "connect_failures",
            QuarantineReason::Down => "down",
            QuarantineReason::Unhealthy => "unhealthy",
            QuarantineReason::Lagging => "lagging",
            QuarantineReason::Manual => "manual",
            QuarantineReason::SelfLoop => "self_loop",
            QuarantineReason::Stalled => "stalled",
            QuarantineReason::Unsuitable => "unsuitable",
        }
    }

    pub(super) fn state(self) -> State {
        match self {
            QuarantineReason::ConnectFailures
            | QuarantineReason::Down
            | QuarantineReason::SelfLoop => State::Down,
            QuarantineReason::Unhealthy => State::Unhealthy,
            QuarantineReason::Lagging => State::Lagging,
            QuarantineReason::Stalled => State::Stalled,
            QuarantineReason::Manual => State::Quarantined,
            QuarantineReason::Unsuitable => State::Unsuitable,
        }
    }
}

impl fmt::Display for ProbeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for QuarantineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
