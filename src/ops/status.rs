//! The pools in the shape `/status` serves them, built from a
//! [`PoolSnapshot`]: one lock per pool, held only while copying numbers out.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::pool::health::{Policy, ProbeOutcome, QuarantineReason, State};
use crate::pool::node::NodeFacts;
use crate::pool::registry::Pool;
use crate::pool::snapshot::{BackendSnapshot, PoolSnapshot};

/// The whole `/status` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Crate version.
    pub version: String,
    /// This process.
    #[serde(default)]
    pub pid: u32,
    /// Live upgrades since the cold start (0 at a cold start).
    #[serde(default)]
    pub generation: u64,
    /// Seconds since start.
    pub uptime_s: u64,
    /// Pools in config order.
    pub pools: Vec<PoolStatus>,
}

/// One pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolStatus {
    /// Pool name.
    pub name: String,
    /// Bound listen addresses.
    pub listen: Vec<SocketAddr>,
    /// Live client connections.
    pub connections: usize,
    /// `health.fall`: consecutive bad probe verdicts that take a backend
    /// out (0 from an instance that does not report it).
    #[serde(default)]
    pub fall: u32,
    /// `health.rise`: consecutive passed probes that bring one back after
    /// its window (0 from an instance that does not report it).
    #[serde(default)]
    pub rise: u32,
    /// Backends in config order (discovered members after the static ones).
    pub backends: Vec<BackendStatus>,
    /// The pool's discover entries; left out when it has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub discovery: Vec<DiscoveryStatus>,
}

/// One discover entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiscoveryStatus {
    /// The entry's name.
    pub name: String,
    /// What it looks up.
    pub query: String,
    /// Its members now.
    pub members: usize,
    /// When the last lookup finished, RFC 3339 UTC.
    pub last_lookup: Option<String>,
    /// Why the last lookup failed; `None` when it succeeded.
    pub error: Option<String>,
}

/// One backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendStatus {
    /// Name.
    pub name: String,
    /// `host:port`.
    pub addr: String,
    /// A backup.
    pub backup: bool,
    /// The discover entry that found it; `None` for a static backend.
    #[serde(default)]
    pub discovered_from: Option<String>,
    /// A discovered member that DNS answers leave out: when it is removed
    /// (the end of `discovery.hold`), RFC 3339 UTC, unless named again.
    /// Left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaving_at: Option<String>,
    /// `healthy`, `unknown`, `lagging`, `unhealthy`, `stalled`, `down`,
    /// `quarantined` or `unsuitable`.
    pub state: State,
    /// Live client connections.
    pub connections: usize,
    /// Last height a probe read.
    pub height: Option<u64>,
    /// The quarantine, while it lasts (window or waiting for probes).
    pub quarantine: Option<QuarantineStatus>,
    /// Quarantines since the last success.
    pub strikes: u32,
    /// Consecutive bad probe verdicts so far, toward the pool's `fall`.
    #[serde(default)]
    pub bad_probes: u32,
    /// Consecutive passed probes since its window ended, toward the
    /// pool's `rise`.
    #[serde(default)]
    pub good_probes: u32,
    /// The last probe.
    pub last_probe: Option<ProbeStatus>,
    /// Bytes client → backend since start.
    pub bytes_up: u64,
    /// Bytes backend → client since start.
    pub bytes_down: u64,
    /// Client connections it closed at once, before a byte, since start:
    /// its refusals of clients (`refused_by_node`).
    #[serde(default)]
    pub refused_by_node: u64,
    /// Client connections made from the proxy's own address because the
    /// client's address family is not the backend's (`source_fallback`).
    #[serde(default)]
    pub source_fallbacks: u64,
    /// What the node told its probe: services (hex and names), protocol
    /// and user agent (`bitcoin-p2p`), server version and genesis
    /// (`electrum*`), coin and version (`blockbook`). `null` until a
    /// probe has told, and for probes that read none (`connect`, `http`),
    /// as `height`, `quarantine` and `last_probe` are.
    #[serde(default)]
    pub node: Option<NodeFacts>,
}

/// A quarantine window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuarantineStatus {
    /// End of the window, RFC 3339 UTC.
    pub until: String,
    /// Why.
    pub reason: QuarantineReason,
}

/// A probe result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeStatus {
    /// When, RFC 3339 UTC.
    pub at: String,
    /// Outcome.
    pub outcome: ProbeOutcome,
    /// Detail.
    pub detail: String,
}

/// Copy out `pool`'s status (from an [`overview`](crate::pool::snapshot::PoolView::overview): one
/// lock, O(backends)).
pub fn of_pool(pool: &Pool) -> PoolStatus {
    PoolStatus::of(&pool.view().overview(), &Policy::of(&pool.config()))
}

impl PoolStatus {
    /// The status of `snap`, a pool whose thresholds are `policy`.
    pub fn of(snap: &PoolSnapshot, policy: &Policy) -> PoolStatus {
        PoolStatus {
            name: snap.name.clone(),
            listen: snap.listen.clone(),
            connections: snap.clients,
            fall: policy.fall,
            rise: policy.rise,
            backends: snap.backends.iter().map(BackendStatus::from).collect(),
            discovery: snap
                .discovery
                .iter()
                .map(|d| DiscoveryStatus {
                    name: d.name.clone(),
                    query: d.query.clone(),
                    members: d.members,
                    last_lookup: d.last_lookup.as_ref().map(|(at, _)| rfc3339(*at)),
                    error: d.last_lookup.as_ref().and_then(|(_, e)| e.clone()),
                })
                .collect(),
        }
    }
}

impl From<&BackendSnapshot> for BackendStatus {
    fn from(b: &BackendSnapshot) -> BackendStatus {
        BackendStatus {
            name: b.name.clone(),
            addr: b.addr.clone(),
            backup: b.backup,
            discovered_from: b.discovered_from.clone(),
            leaving_at: b.leaving_at.map(rfc3339),
            state: b.state,
            connections: b.connections,
            height: b.height,
            quarantine: b.quarantine.map(|q| QuarantineStatus {
                until: rfc3339(q.until),
                reason: q.reason,
            }),
            strikes: b.strikes,
            bad_probes: b.bad_probes,
            good_probes: b.good_probes,
            last_probe: b.last_probe.as_ref().map(|p| ProbeStatus {
                at: rfc3339(p.at),
                outcome: p.outcome,
                detail: p.detail.clone(),
            }),
            bytes_up: b.counters.bytes_up,
            bytes_down: b.counters.bytes_down,
            refused_by_node: b.counters.refused_by_node,
            source_fallbacks: b.counters.source_fallbacks,
            node: b.node.clone(),
        }
    }
}

/// `2026-11-30T18:01:53Z` (seconds precision).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/status` names each state, reason and outcome as the logs and
    /// metrics do.
    #[test]
    fn status_names_are_the_log_and_metric_names() {
        let states = [
            State::Unknown,
            State::Healthy,
            State::Lagging,
            State::Unhealthy,
            State::Stalled,
            State::Down,
            State::Quarantined,
        ];
        let json = |v: serde_json::Value| v.as_str().unwrap().to_owned();
        for s in states {
            assert_eq!(json(serde_json::to_value(s).unwrap()), s.as_str());
        }
        for r in QuarantineReason::ALL {
            assert_eq!(json(serde_json::to_value(r).unwrap()), r.as_str());
        }
        for o in ProbeOutcome::ALL {
            assert_eq!(json(serde_json::to_value(o).unwrap()), o.as_str());
        }
    }
}
