//! Sheds: an operator closes a backend's newest connections (`POST
//! .../shed?count=N`), whatever the backend's state, spread over
//! `health.drain_spread` as a drain is, so their clients do not redial in
//! one burst. The connections are chosen when the shed is asked for;
//! [`Drains::step`](crate::pool::drain::Drains::step) closes each when it
//! is due, on the pace of the same pure [`Schedule`] as drains.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use crate::pool::backend::Backend;
use crate::pool::close::CloseReason;
use crate::pool::drain::Schedule;
use crate::pool::registry::{ConnId, Pool};

/// One running shed of one backend.
#[derive(Debug, Clone)]
pub(in crate::pool) struct ShedRun {
    /// The connections chosen, in the order they close (newest first).
    conns: Vec<ConnId>,
    /// How many of them were closed (or found gone already).
    done: usize,
    schedule: Schedule,
}

impl ShedRun {
    /// The connections it has yet to close.
    pub(in crate::pool) fn pending(&self) -> &[ConnId] {
        self.conns.get(self.done..).unwrap_or_default()
    }
}

impl Pool {
    /// Choose `b`'s `count` newest connections that are spliced, not
    /// closing and not chosen by a shed already, and shed them from `now`
    /// over `spread` (with those of a shed still running: its pace starts
    /// again, over the same spread, for all that are left). Returns the
    /// ones chosen, newest first; none is closed yet (the caller steps the
    /// drains).
    pub(in crate::pool) fn start_shed(
        &self,
        b: &mut Backend,
        count: usize,
        now: Instant,
        spread: Duration,
    ) -> Vec<ConnId> {
        let pending: HashSet<ConnId> = b
            .shed()
            .map(|run| run.pending().iter().copied().collect())
            .unwrap_or_default();
        let chosen: Vec<ConnId> = b
            .conns()
            .iter()
            .rev()
            .filter(|(id, e)| e.closer.is_movable() && !pending.contains(id))
            .map(|(&id, _)| id)
            .take(count)
            .collect();
        if chosen.is_empty() {
            return chosen;
        }
        let mut conns: Vec<ConnId> = b
            .shed()
            .map(|run| run.pending().to_vec())
            .unwrap_or_default();
        conns.extend_from_slice(&chosen);
        info!(
            pool = %self.name, backend = %b.config().name, connections = chosen.len(),
            spread_ms = u64::try_from(spread.as_millis()).unwrap_or(u64::MAX), "shed"
        );
        *b.shed_mut() = Some(ShedRun {
            schedule: Schedule::new(now, spread, conns.len()),
            conns,
            done: 0,
        });
        chosen
    }

    /// Close `b`'s shed connections that are due at `now`. Returns when
    /// the next one is due; `None` once the shed is over (or there is none).
    pub(in crate::pool) fn advance_shed(&self, b: &mut Backend, now: Instant) -> Option<Instant> {
        let mut run = b.shed_mut().take()?;
        let due = run.schedule.due(now);
        while (run.done as u64) < due {
            let Some(&id) = run.conns.get(run.done) else {
                break;
            };
            run.done += 1;
            // One that ended meanwhile is simply gone; one closing for
            // another reason keeps that reason.
            if let Some(entry) = b.conns().get(&id) {
                entry.closer.close(CloseReason::Shed);
            }
        }
        if run.done >= run.conns.len() {
            return None;
        }
        let next = run.schedule.at(run.done as u64);
        *b.shed_mut() = Some(run);
        Some(next)
    }
}
