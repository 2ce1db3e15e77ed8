//! What a probe reports about a backend: the vocabulary probes produce and
//! the pool judges (`apply`). A probe only observes; what its verdict does
//! to a backend (hysteresis, lag, quarantine) is the pool's decision.

use std::fmt;

use super::node::{NodeFacts, Unfit};

/// What one probe concluded about a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The node answered and says it is fine.
    Healthy,
    /// The node answered and says it is not fine (e.g. Blockbook `inSync: false`).
    Unhealthy,
    /// The node's own address refused or timed out the TCP connect.
    Down,
    /// Reached, but no answer the probe understands; or the REST twin failed.
    Unknown,
}

impl Verdict {
    /// The name used in logs, `/status` and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Healthy => "healthy",
            Verdict::Unhealthy => "unhealthy",
            Verdict::Down => "down",
            Verdict::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A probe's verdict, the node's block height when the probe reads one, and
/// a short human-readable detail (never containing secrets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The verdict.
    pub verdict: Verdict,
    /// Block height the node reported, if the probe reads heights.
    pub height: Option<u64>,
    /// Why, in a few words (`refused`, `bad checksum`, `inSync false` ...).
    pub detail: String,
    /// Whether the height was proven by the node's headers.
    pub proof: Proof,
    /// What the probe learnt about the node (services, protocol, software,
    /// chain); `None` when it learnt nothing (no answer, or a probe kind
    /// that reads none).
    pub node: Option<NodeFacts>,
    /// Why the node cannot serve this pool's clients, judged by the prober
    /// against the pool's requirement ([`super::node::judge`]); `None` when
    /// it can, or nothing was learnt to judge.
    pub unfit: Option<Unfit>,
}

impl Report {
    /// A report without a height.
    pub fn new(verdict: Verdict, detail: impl Into<String>) -> Report {
        Report {
            verdict,
            height: None,
            detail: detail.into(),
            proof: Proof::NotAsked,
            node: None,
            unfit: None,
        }
    }

    /// This report, carrying what the probe learnt about the node.
    #[must_use]
    pub fn with_node(self, facts: NodeFacts) -> Report {
        Report {
            node: Some(facts),
            ..self
        }
    }

    /// A report of a height, not (yet) proven.
    pub fn with_height(verdict: Verdict, height: u64, detail: impl Into<String>) -> Report {
        Report {
            height: Some(height),
            ..Report::new(verdict, detail)
        }
    }
}

/// What became of a height claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// Nobody needed it proven (it would make no other backend lag).
    NotAsked,
    /// The node served valid headers up to the claimed height.
    Proven,
    /// Not proven, and why, with nothing against the claim: the proof was
    /// cut short by the timeout, goes on at the next probe, or cannot be
    /// made (no rules for a custom network).
    Unproven(String),
    /// The node's own headers contradict its claim, and how: none, too
    /// few, not linked, not enough work, another chain's. A node lying or
    /// broken: a bad verdict.
    Contradicted(String),
}
