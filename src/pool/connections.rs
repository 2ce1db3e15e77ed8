//! One client connection seen and acted on (`pool.connections()`): a
//! pool's connections listed newest first, with filters, at a cost bounded
//! by how many are listed; one closed by its id; a backend's newest shed.
//!
//! A listing copies out only the connections it returns: each backend's
//! registry is ordered by id (ids grow, so newest last), so its newest
//! matches are read from the end, at most `limit` of them, and the
//! backends' are merged. Counting every match (`total`) walks the entries
//! only when a client filter must be tested on each; otherwise it is the
//! sum of the backends' counts.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::config::{BackendConfig, IpNet};
use crate::pool::backend::Backend;
use crate::pool::close::{CloseReason, Tick};
use crate::pool::operator::UnknownBackend;
use crate::pool::registry::{ConnEntry, ConnId, LegSource, Pool};
use crate::pool::snapshot::ConnState;

/// Which connections a listing shows.
#[derive(Debug, Clone, Default)]
pub struct ConnFilter {
    /// Only those on the backend of this name.
    pub backend: Option<String>,
    /// Only those whose client address is in this network (IPv4-mapped
    /// IPv6 clients match as the IPv4 address they are).
    pub client: Option<IpNet>,
}

impl ConnFilter {
    fn admits(&self, entry: &ConnEntry) -> bool {
        self.client
            .is_none_or(|net| net.contains(&entry.client.ip().to_canonical()))
    }
}

/// Where a listed connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnPhase {
    /// Its backend leg is being connected.
    Connecting,
    /// Bytes flow.
    Spliced,
    /// Asked to close, or to be closed by its backend's drain or a shed.
    Draining,
}

impl ConnPhase {
    /// The name `/connections` and the CLI use.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnPhase::Connecting => "connecting",
            ConnPhase::Spliced => "spliced",
            ConnPhase::Draining => "draining",
        }
    }
}

/// One listed connection, copied out.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// Its id, as logged in `conn`.
    pub conn: ConnId,
    /// Its backend's settings (`name`).
    pub backend: Arc<BackendConfig>,
    /// The client's address.
    pub client: SocketAddr,
    /// The PROXY header's sender it came through.
    pub via: Option<SocketAddr>,
    /// Its backend leg's socket, once connected (see [`ConnInfo::source`]).
    pub leg: Option<LegSource>,
    /// When the client was accepted (wall clock).
    pub started: SystemTime,
    /// Bytes client → backend so far.
    pub bytes_up: u64,
    /// Bytes backend → client so far.
    pub bytes_down: u64,
    /// How long since a byte moved either way (since it was accepted,
    /// when none has).
    pub idle: Duration,
    /// Where it stands.
    pub phase: ConnPhase,
}

impl ConnInfo {
    /// The local address of its backend leg, while it is open: asked of
    /// the socket now (one `getsockname`), out of the pool lock.
    pub fn source(&self) -> Option<SocketAddr> {
        self.leg.as_ref()?.upgrade()?.local()
    }
}

/// A pool's share of a listing.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    /// Every connection of the pool the filter admits.
    pub total: usize,
    /// The newest of them, newest first, at most the limit asked for.
    pub conns: Vec<ConnInfo>,
}

/// One client connection seen and acted on.
#[derive(Clone, Copy)]
pub struct Connections<'a> {
    pool: &'a Pool,
}

impl Pool {
    /// This pool's connections, one by one.
    pub fn connections(&self) -> Connections<'_> {
        Connections { pool: self }
    }
}

impl Connections<'_> {
    /// The pool's connections that `filter` admits: how many, and the
    /// newest `limit` of them with ids below `below` (when given: what a
    /// listing across pools already has enough newer ones than), newest
    /// first. `None` when the filter names a backend the pool does not
    /// have. Under the pool lock; copies out at most `limit` entries.
    pub fn list(&self, filter: &ConnFilter, limit: usize, below: Option<ConnId>) -> Option<Listed> {
        let now = Tick::now();
        let m = self.pool.backends();
        let backends: Vec<&Backend> = m
            .active
            .iter()
            .chain(&m.leaving)
            .filter(|b| {
                filter
                    .backend
                    .as_ref()
                    .is_none_or(|n| *n == b.config().name)
            })
            .collect();
        if backends.is_empty() && filter.backend.is_some() {
            return None;
        }
        let total = backends
            .iter()
            .map(|b| match filter.client {
                None => b.conns().len(),
                Some(_) => b.conns().values().filter(|e| filter.admits(e)).count(),
            })
            .sum();
        let upper = below.map_or(Bound::Unbounded, Bound::Excluded);
        // Each backend's newest matches, then the newest of them all.
        let mut newest: Vec<(ConnId, usize, &ConnEntry)> = Vec::new();
        for (i, b) in backends.iter().enumerate() {
            let from = b.conns().range((Bound::Unbounded, upper)).rev();
            newest.extend(
                from.filter(|(_, e)| filter.admits(e))
                    .take(limit)
                    .map(|(&id, e)| (id, i, e)),
            );
        }
        newest.sort_unstable_by_key(|n| std::cmp::Reverse(n.0));
        newest.truncate(limit);
        let shed: Vec<HashSet<ConnId>> = backends
            .iter()
            .map(|b| {
                b.shed()
                    .map(|run| run.pending().iter().copied().collect())
                    .unwrap_or_default()
            })
            .collect();
        let conns = newest
            .into_iter()
            .map(|(conn, i, e)| {
                let b = backends[i];
                let phase = match e.closer.state() {
                    ConnState::Connecting => ConnPhase::Connecting,
                    ConnState::Closing => ConnPhase::Draining,
                    ConnState::Spliced if b.drain().is_some() || shed[i].contains(&conn) => {
                        ConnPhase::Draining
                    }
                    ConnState::Spliced => ConnPhase::Spliced,
                };
                ConnInfo {
                    conn,
                    backend: b.config().clone(),
                    client: e.client,
                    via: e.via.as_deref().copied(),
                    leg: e.source.clone(),
                    started: e.started,
                    bytes_up: e.closer.bytes_up.load(std::sync::atomic::Ordering::Relaxed),
                    bytes_down: e
                        .closer
                        .bytes_down
                        .load(std::sync::atomic::Ordering::Relaxed),
                    idle: now.since(e.closer.last_active()),
                    phase,
                }
            })
            .collect();
        Some(Listed { total, conns })
    }

    /// Close connection `conn` (`closed` reason `admin`). False when the
    /// pool has no such connection.
    pub fn close(&self, conn: ConnId) -> bool {
        let m = self.pool.backends();
        let entry = m
            .active
            .iter()
            .chain(&m.leaving)
            .find_map(|b| b.conns().get(&conn));
        match entry {
            Some(entry) => {
                entry.closer.close(CloseReason::Admin);
                true
            }
            None => false,
        }
    }

    /// Shed the `count` newest connections of the backend named `backend`
    /// (spliced ones, not closing already), spread over
    /// `health.drain_spread` from now (`closed` reason `shed`); the first
    /// is closed before this returns. Returns the ones chosen, newest
    /// first.
    ///
    /// # Errors
    /// When the pool has no such backend.
    pub fn shed(&self, backend: &str, count: usize) -> Result<Vec<ConnId>, UnknownBackend> {
        let config = self.pool.config();
        let now = Instant::now();
        let mut m = self.pool.backends();
        let b = self.pool.by_name(&mut m.active, backend)?;
        let chosen = self
            .pool
            .start_shed(b, count, now, config.health.drain_spread);
        if !chosen.is_empty() {
            // Closes what is due now and wakes the drain task for the rest.
            self.pool.settle(&mut m, &config, now);
        }
        Ok(chosen)
    }
}

#[cfg(test)]
#[path = "connections_tests.rs"]
mod tests;
