//! `/connections`: the pools' client connections in the shape it serves
//! them, newest first, and the operator's commands on them: close one, or
//! shed a backend's newest. The pools do the work
//! ([`Connections`](crate::pool::connections::Connections)); this joins
//! their answers at a cost bounded by the `limit` asked for.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::config::IpNet;
use crate::ops::status::rfc3339;
use crate::pool::connections::{ConnFilter, ConnInfo, ConnPhase};
use crate::pool::operator::UnknownBackend;
use crate::pool::registry::{ConnId, Pool};

/// Connections listed when the request names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// The most one request may list.
pub const MAX_LIMIT: usize = 10_000;

/// What `GET /connections` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnQuery {
    /// Only this pool's.
    pub pool: Option<String>,
    /// Only those on backends of this name.
    pub backend: Option<String>,
    /// Only those whose client address is in this network.
    pub client: Option<IpNet>,
    /// At most this many, the newest (1 to [`MAX_LIMIT`]).
    pub limit: usize,
}

impl Default for ConnQuery {
    fn default() -> ConnQuery {
        ConnQuery {
            pool: None,
            backend: None,
            client: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

/// The `/connections` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// Every connection the filters admit.
    pub total: usize,
    /// The newest of them, newest first, at most `limit`.
    pub connections: Vec<Connection>,
}

/// One client connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Connection {
    /// Its id, as logged in `conn` (kept across a live upgrade).
    pub conn: ConnId,
    /// Its pool.
    pub pool: String,
    /// Its backend's name.
    pub backend: String,
    /// The client's address (the one a trusted PROXY header names).
    pub client: SocketAddr,
    /// The PROXY header's sender; `null` without a header.
    pub via: Option<SocketAddr>,
    /// The local address of the backend leg; `null` while connecting.
    pub source: Option<SocketAddr>,
    /// When the client was accepted, RFC 3339 UTC.
    pub started: String,
    /// Seconds since then.
    pub age_s: u64,
    /// Bytes client → backend so far.
    pub bytes_up: u64,
    /// Bytes backend → client so far.
    pub bytes_down: u64,
    /// Seconds since a byte moved either way.
    pub idle_s: u64,
    /// `connecting`, `spliced` or `draining`.
    pub state: ConnPhase,
}

impl Connection {
    fn of(pool: &str, c: &ConnInfo, now: SystemTime) -> Connection {
        Connection {
            conn: c.conn,
            pool: pool.to_owned(),
            backend: c.backend.name.clone(),
            client: c.client,
            via: c.via,
            source: c.source(),
            started: rfc3339(c.started),
            age_s: now.duration_since(c.started).unwrap_or_default().as_secs(),
            bytes_up: c.bytes_up,
            bytes_down: c.bytes_down,
            idle_s: c.idle.as_secs(),
            state: c.phase,
        }
    }
}

/// A listing or a shed named what is not there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotFound {
    /// No pool of this name.
    #[error("no pool {0}")]
    Pool(String),
    /// No pool has a backend of this name.
    #[error("no pool has a backend {0}")]
    Backend(String),
    /// This pool has no backend of this name.
    #[error(transparent)]
    PoolBackend(#[from] UnknownBackend),
}

/// The listing `query` asks for, across `pools` (in config order).
///
/// # Errors
/// When it names a pool, or a backend, that is not there.
pub fn list(pools: &[Arc<Pool>], query: &ConnQuery) -> Result<Listing, NotFound> {
    let chosen: Vec<&Arc<Pool>> = pools
        .iter()
        .filter(|p| query.pool.as_ref().is_none_or(|n| *n == p.name))
        .collect();
    if let (Some(name), true) = (&query.pool, chosen.is_empty()) {
        return Err(NotFound::Pool(name.clone()));
    }
    let filter = ConnFilter {
        backend: query.backend.clone(),
        client: query.client,
    };
    let (mut total, mut found) = (0, false);
    let mut newest: Vec<(&str, ConnInfo)> = Vec::new();
    for pool in chosen.iter().copied() {
        // Once `limit` are in hand, a pool need only give newer ones.
        let below = (newest.len() >= query.limit)
            .then(|| newest.last().map(|(_, c)| c.conn))
            .flatten();
        let Some(listed) = pool.connections().list(&filter, query.limit, below) else {
            continue;
        };
        found = true;
        total += listed.total;
        newest.extend(listed.conns.into_iter().map(|c| (pool.name.as_str(), c)));
        newest.sort_unstable_by_key(|(_, c)| std::cmp::Reverse(c.conn));
        newest.truncate(query.limit);
    }
    if !found && let Some(backend) = &query.backend {
        return Err(match chosen.as_slice() {
            [pool] if query.pool.is_some() => NotFound::PoolBackend(UnknownBackend {
                pool: pool.name.clone(),
                backend: backend.clone(),
                known: pool
                    .view()
                    .overview()
                    .backends
                    .into_iter()
                    .map(|b| b.name)
                    .collect(),
            }),
            _ => NotFound::Backend(backend.clone()),
        });
    }
    let now = SystemTime::now();
    Ok(Listing {
        total,
        connections: newest
            .iter()
            .map(|(pool, c)| Connection::of(pool, c, now))
            .collect(),
    })
}

/// A listing as JSON, one connection a line.
///
/// # Errors
/// When a value cannot be encoded (not seen: plain data).
pub fn render(listing: &Listing) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(64 + listing.connections.len() * 300);
    out.extend_from_slice(format!("{{\"total\":{},\"connections\":[", listing.total).as_bytes());
    for (i, c) in listing.connections.iter().enumerate() {
        out.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
        serde_json::to_writer(&mut out, c)?;
    }
    out.extend_from_slice(b"\n]}\n");
    Ok(out)
}

/// Close connection `conn`, wherever it is (`closed` reason `admin`).
/// False when no pool has it.
pub fn close(pools: &[Arc<Pool>], conn: ConnId) -> bool {
    pools.iter().any(|p| p.connections().close(conn))
}

/// Shed the `count` newest connections of `backend` in `pool`.
///
/// # Errors
/// When there is no such pool or backend.
pub fn shed(
    pools: &[Arc<Pool>],
    pool: &str,
    backend: &str,
    count: usize,
) -> Result<Vec<ConnId>, NotFound> {
    let p = pools
        .iter()
        .find(|p| p.name == pool)
        .ok_or_else(|| NotFound::Pool(pool.to_owned()))?;
    Ok(p.connections().shed(backend, count)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_renders_one_connection_a_line_and_reads_back() {
        let c = Connection {
            conn: 7,
            pool: "p".into(),
            backend: "a".into(),
            client: "10.0.0.1:5000".parse().unwrap(),
            via: None,
            source: Some("127.0.0.1:40000".parse().unwrap()),
            started: "2026-12-02T00:00:00Z".into(),
            age_s: 3,
            bytes_up: 1,
            bytes_down: 2,
            idle_s: 0,
            state: ConnPhase::Spliced,
        };
        let listing = Listing {
            total: 5,
            connections: vec![c.clone(), Connection { conn: 6, ..c }],
        };
        let text = String::from_utf8(render(&listing).unwrap()).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.contains("\"via\":null"), "{text}");
        assert!(text.contains("\"state\":\"spliced\""), "{text}");
        let back: Listing = serde_json::from_str(&text).unwrap();
        assert_eq!(back, listing);
        let empty = render(&Listing {
            total: 0,
            connections: Vec::new(),
        })
        .unwrap();
        let back: Listing = serde_json::from_slice(&empty).unwrap();
        assert_eq!(back.total, 0);
    }
}
