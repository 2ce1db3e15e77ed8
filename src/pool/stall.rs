//! Stalled backends, told from their clients' own traffic: a backend is
//! stalled when every spliced connection of it that has been watched for
//! `health.stall_timeout` received nothing from it in that time, while a
//! connection of another usable backend of the pool did receive bytes in
//! it. The comparison keeps a quiet network (no backend sends) from taking
//! anyone out; connections younger than the timeout are not judged, so new
//! clients that get a fresh handshake do not hide a node that stopped
//! relaying to its existing peers.
//!
//! What each connection received is read from its byte counter (the splice
//! keeps it) whenever a probe result is applied, so the data path does no
//! extra work; a change is seen at the sample after it, which can only make
//! a silence look shorter than it was, never longer.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::pool::registry::{Backend, BackendId, ConnId};

/// What the samples saw of one connection's bytes from its backend.
#[derive(Debug, Clone, Copy)]
pub(in crate::pool) struct Heard {
    /// The counter at the last sample that saw it change.
    bytes: u64,
    /// That sample.
    changed: Instant,
    /// The first sample of the connection.
    first: Instant,
}

/// The samples of one backend's connections.
#[derive(Debug, Default)]
pub(in crate::pool) struct Traffic {
    conns: BTreeMap<ConnId, Heard>,
    /// The last sample that saw any of its connections receive.
    last_heard: Option<Instant>,
}

/// Sample every spliced connection of `backends` at `now`.
pub(in crate::pool) fn sample(backends: &mut [Backend], now: Instant) {
    for b in backends {
        let Backend { conns, traffic, .. } = b;
        traffic.conns.retain(|id, _| conns.contains_key(id));
        for (id, entry) in conns.iter() {
            if !entry.closer.is_movable() {
                continue;
            }
            let bytes = entry.closer.bytes_down.load(Ordering::Relaxed);
            match traffic.conns.get_mut(id) {
                Some(h) if h.bytes != bytes => {
                    h.bytes = bytes;
                    h.changed = now;
                    traffic.last_heard = Some(now);
                }
                Some(_) => {}
                None => {
                    // What it received before this first look counts as
                    // received now, for the others' comparison only.
                    if bytes > 0 {
                        traffic.last_heard = Some(now);
                    }
                    traffic.conns.insert(
                        *id,
                        Heard {
                            bytes,
                            changed: now,
                            first: now,
                        },
                    );
                }
            }
        }
    }
}

/// Why `id` is stalled at `now` under `timeout`, if it is: how many of its
/// connections have been silent, and which usable backend was heard.
pub(in crate::pool) fn stalled(
    backends: &[Backend],
    id: BackendId,
    now: Instant,
    timeout: Duration,
) -> Option<String> {
    let b = backends.iter().find(|b| b.id == id)?;
    let since = now.checked_sub(timeout)?;
    let judged: Vec<&Heard> = b.traffic.conns.values().filter(|h| h.first <= since).collect();
    if judged.is_empty() || judged.iter().any(|h| h.changed > since) {
        return None;
    }
    let heard = backends.iter().find(|o| {
        o.id != id
            && o.health.is_usable()
            && o.traffic.last_heard.is_some_and(|at| at > since)
    })?;
    Some(format!(
        "{} connections received nothing for {} while {} sent",
        judged.len(),
        crate::config::span(timeout),
        heard.config.name
    ))
}

#[cfg(test)]
#[path = "stall_tests.rs"]
mod tests;
