//! Point-in-time views of the pools, in the shape `/status` serves them.
//! One lock per pool, held only while copying numbers out.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::pool::registry::Pool;

/// The whole `/status` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Crate version.
    pub version: String,
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
    /// Backends in config order.
    pub backends: Vec<BackendStatus>,
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
    /// `healthy`, `unknown`, `lagging`, `unhealthy`, `down` or `quarantined`.
    pub state: String,
    /// Live client connections.
    pub connections: usize,
    /// Last height a probe read.
    pub height: Option<u64>,
    /// The quarantine, while it lasts (window or waiting for probes).
    pub quarantine: Option<QuarantineStatus>,
    /// Quarantines since the last success.
    pub strikes: u32,
    /// The last probe.
    pub last_probe: Option<ProbeStatus>,
    /// Bytes client → backend since start.
    pub bytes_up: u64,
    /// Bytes backend → client since start.
    pub bytes_down: u64,
}

/// A quarantine window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuarantineStatus {
    /// End of the window, RFC 3339 UTC.
    pub until: String,
    /// Why.
    pub reason: String,
}

/// A probe result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeStatus {
    /// When, RFC 3339 UTC.
    pub at: String,
    /// Outcome.
    pub outcome: String,
    /// Detail.
    pub detail: String,
}

impl Pool {
    /// Copy out this pool's status.
    pub fn status(&self) -> PoolStatus {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let backends = self.backends();
        let backends = backends
            .iter()
            .map(|b| BackendStatus {
                name: b.config.name.clone(),
                addr: b.config.addr.clone(),
                backup: b.config.backup,
                state: b.health.state().as_str().to_owned(),
                connections: b.conns.len(),
                height: b.height,
                quarantine: b.health.quarantine.map(|q| QuarantineStatus {
                    until: rfc3339(wall_time(q.until, now, wall)),
                    reason: q.reason.as_str().to_owned(),
                }),
                strikes: b.health.strikes,
                last_probe: b.last_probe.as_ref().map(|p| ProbeStatus {
                    at: rfc3339(p.at),
                    outcome: p.outcome.as_str().to_owned(),
                    detail: p.detail.clone(),
                }),
                bytes_up: b.stats.bytes_up.load(Ordering::Relaxed),
                bytes_down: b.stats.bytes_down.load(Ordering::Relaxed),
            })
            .collect();
        PoolStatus {
            name: self.name.clone(),
            listen: self.listen().to_vec(),
            connections: self.clients(),
            backends,
        }
    }
}

/// The wall-clock time of monotonic instant `at`, given both clocks' `now`.
fn wall_time(at: Instant, now: Instant, wall: SystemTime) -> SystemTime {
    if at >= now {
        wall + (at - now)
    } else {
        wall.checked_sub(now - at).unwrap_or(UNIX_EPOCH)
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
