//! Stalled backends, told from their clients' own traffic: a backend is
//! stalled when every spliced connection of it that has been watched for
//! `health.stall_timeout` received nothing from it in that time, while a
//! connection of another usable backend of the pool did receive bytes in
//! it. The comparison keeps a quiet network (no backend sends) from taking
//! anyone out. A connection younger than the timeout cannot have been
//! silent that long: it is not judged, unless it is being served (a sample
//! saw its bytes grow after an earlier sample had already seen some), and
//! then the backend is not stalled. So the burst a new client gets at once
//! (a handshake, whether a sample comes before it or after) does not hide
//! a node that stopped relaying to its existing peers, and a node that is
//! answering its young connections is never taken for stalled. (A sample
//! that falls inside the burst itself, between its first and last byte,
//! makes it count: a young connection then defers the verdict until it has
//! been silent for the timeout.)
//!
//! Under `health.stall_rule: request` a connection is silent only while
//! it owes an answer (its client sent bytes after the backend's last
//! byte) and has owed it for the whole timeout: a quiet client of a
//! request/response service is not silent, so it keeps its backend from
//! being judged stalled, as a busy one that is answered does.
//!
//! What each connection received is read from its byte counter (the splice
//! keeps it, and the flag that says it owes an answer) whenever a probe
//! result is applied, so the data path does no extra work; a change is
//! seen at the sample after it, which can only make a silence look shorter
//! than it was, never longer.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::StallRule;
use crate::pool::backend::Backend;
use crate::pool::registry::{BackendId, ConnId};

/// What the samples saw of one connection's bytes from its backend.
#[derive(Debug, Clone, Copy)]
pub(in crate::pool) struct Heard {
    /// The counter at the last sample that saw it change.
    bytes: u64,
    /// That sample.
    changed: Instant,
    /// The first sample of the connection.
    first: Instant,
    /// The first sample that saw it owe the answer it owes now.
    owes_since: Option<Instant>,
    /// A sample saw it receive more after an earlier one had already seen
    /// bytes from it: served, not just greeted.
    served: bool,
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
        let (conns, traffic) = b.conns_and_traffic();
        traffic.conns.retain(|id, _| conns.contains_key(id));
        for (id, entry) in conns.iter() {
            if !entry.closer.is_movable() {
                continue;
            }
            let bytes = entry.closer.bytes_down.load(Ordering::Relaxed);
            let owes = entry.closer.owes.load(Ordering::Relaxed);
            match traffic.conns.get_mut(id) {
                Some(h) => {
                    let answered = h.bytes != bytes;
                    if answered {
                        h.served |= h.bytes > 0;
                        h.bytes = bytes;
                        h.changed = now;
                        traffic.last_heard = Some(now);
                    }
                    // Still owing after an answer: a new request since.
                    h.owes_since = match h.owes_since {
                        Some(since) if owes && !answered => Some(since),
                        _ => owes.then_some(now),
                    };
                }
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
                            owes_since: owes.then_some(now),
                            served: false,
                        },
                    );
                }
            }
        }
    }
}

/// Why `id` is stalled at `now` under `timeout` and `rule`, if it is: how
/// many of its connections have been silent, and which usable backend was
/// heard.
pub(in crate::pool) fn stalled(
    backends: &[Backend],
    id: BackendId,
    now: Instant,
    timeout: Duration,
    rule: StallRule,
) -> Option<String> {
    let b = backends.iter().find(|b| b.id() == id)?;
    let since = now.checked_sub(timeout)?;
    let silent = |h: &Heard| {
        h.changed <= since
            && match rule {
                StallRule::Push => true,
                StallRule::Request => h.owes_since.is_some_and(|t| t <= since),
            }
    };
    // Old enough to judge, or young and served (then it is not silent).
    let judged: Vec<&Heard> = b
        .traffic()
        .conns
        .values()
        .filter(|h| h.first <= since || h.served)
        .collect();
    if judged.is_empty() || !judged.iter().all(|h| silent(h)) {
        return None;
    }
    let heard = backends.iter().find(|o| {
        o.id() != id
            && o.health().is_usable()
            && o.traffic().last_heard.is_some_and(|at| at > since)
    })?;
    let what = match rule {
        StallRule::Push => "received nothing",
        StallRule::Request => "waited for an answer",
    };
    Some(format!(
        "{} connections {what} for {} while {} sent",
        judged.len(),
        crate::config::span(timeout),
        heard.config().name
    ))
}

#[cfg(test)]
#[path = "stall_tests.rs"]
mod tests;
