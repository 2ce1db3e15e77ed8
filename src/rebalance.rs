//! The rebalance tick: move one connection per tick from the busiest usable
//! backend to an emptier one, but only after the emptier one answered a test
//! connect. Connections on a backup move back to a usable primary one per
//! tick whatever `min_imbalance` says. A balanced pool makes no connection.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tracing::{debug, info};

use crate::close::CloseReason;
use crate::connect;
use crate::registry::{BackendId, Pool};

/// How often a disabled rebalancer checks whether a reload enabled it.
const DISABLED_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// What the planner needs to know about one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// `healthy` or `unknown`.
    pub usable: bool,
    /// A backup.
    pub backup: bool,
    /// Live client connections.
    pub live: usize,
}

/// `(from, to)` indexes of one move, or `None` when the pool is balanced.
pub fn plan(loads: &[Load], min_imbalance: usize) -> Option<(usize, usize)> {
    let usable = |i: &usize| loads[*i].usable;
    let primaries: Vec<usize> = (0..loads.len())
        .filter(usable)
        .filter(|&i| !loads[i].backup)
        .collect();
    let emptiest = |set: &[usize]| set.iter().copied().min_by_key(|&i| loads[i].live);
    // Ties go to config order: the first busiest.
    let busiest = |set: &[usize]| {
        set.iter()
            .copied()
            .rev()
            .max_by_key(|&i| loads[i].live)
            .filter(|&i| loads[i].live > 0)
    };
    if let Some(to) = emptiest(&primaries) {
        let on_backup: Vec<usize> = (0..loads.len()).filter(|&i| loads[i].backup).collect();
        if let Some(from) = busiest(&on_backup) {
            return Some((from, to));
        }
    }
    let pool: Vec<usize> = if primaries.is_empty() {
        (0..loads.len()).filter(usable).collect()
    } else {
        primaries
    };
    let (from, to) = (busiest(&pool)?, emptiest(&pool)?);
    (loads[from].live - loads[to].live >= min_imbalance.max(1)).then_some((from, to))
}

/// Run ticks every `rebalance.interval` until the pool stops. The interval
/// is re-read each tick, so a reload applies to the next one.
pub async fn run(pool: Arc<Pool>) {
    loop {
        // Disabled (`0s`): look again later, a reload may enable it.
        let interval = pool.config().rebalance.interval;
        tokio::select! {
            () = pool.token.cancelled() => return,
            () = tokio::time::sleep(interval.unwrap_or(DISABLED_RECHECK)) => {}
        }
        if interval.is_some() {
            tick(&pool).await;
        }
    }
}

/// One tick: plan, test-connect, move.
pub async fn tick(pool: &Pool) {
    let config = pool.config();
    let Some((from, to, to_addr)) = pool_plan(pool, config.rebalance.min_imbalance) else {
        return;
    };
    match connect::connect_avoiding(&to_addr, config.connect_timeout, pool.own()).await {
        // The test connection only proves the node answers; it carries nothing.
        Ok(stream) => drop(stream),
        Err(err) => {
            debug!(pool = %pool.name, to = %to_addr, err = err.to_string().as_str(), "rebalance_skipped");
            return;
        }
    }
    let backends = pool.backends();
    let (Some(src), Some(dst)) = (
        backends.iter().find(|b| b.id == from),
        backends.iter().find(|b| b.id == to),
    ) else {
        return;
    };
    let newest = src.conns.iter().rev().find(|(_, e)| e.closer.is_movable());
    if let Some((conn, entry)) = newest {
        entry.closer.close(CloseReason::Rebalanced);
        pool.rebalance_moves.fetch_add(1, Ordering::Relaxed);
        info!(
            pool = %pool.name, from = %src.config.name, to = %dst.config.name, conn = *conn,
            from_connections = src.conns.len(), to_connections = dst.conns.len(), "rebalanced"
        );
    }
}

fn pool_plan(pool: &Pool, min_imbalance: usize) -> Option<(BackendId, BackendId, String)> {
    let backends = pool.backends();
    let loads: Vec<Load> = backends
        .iter()
        .map(|b| Load {
            usable: b.health.is_usable(),
            backup: b.config.backup,
            // O(1): a connection just closed by the previous tick leaves the
            // map within milliseconds, long before the next tick.
            live: b.conns.len(),
        })
        .collect();
    let (from, to) = plan(&loads, min_imbalance)?;
    Some((
        backends[from].id,
        backends[to].id,
        backends[to].config.addr.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(usable: bool, backup: bool, live: usize) -> Load {
        Load {
            usable,
            backup,
            live,
        }
    }

    #[test]
    fn balanced_pools_plan_nothing() {
        assert_eq!(plan(&[l(true, false, 1), l(true, false, 1)], 2), None);
        assert_eq!(plan(&[l(true, false, 2), l(true, false, 1)], 2), None);
        assert_eq!(plan(&[l(true, false, 0), l(true, false, 0)], 1), None);
    }

    #[test]
    fn busiest_to_emptiest_at_min_imbalance() {
        assert_eq!(
            plan(&[l(true, false, 2), l(true, false, 0)], 2),
            Some((0, 1))
        );
        assert_eq!(
            plan(
                &[
                    l(true, false, 1),
                    l(true, false, 3),
                    l(true, false, 3),
                    l(true, false, 0)
                ],
                2
            ),
            Some((1, 3)),
            "ties: first busiest, first emptiest"
        );
    }

    #[test]
    fn unusable_backends_neither_give_nor_take() {
        assert_eq!(plan(&[l(false, false, 0), l(true, false, 2)], 2), None);
        assert_eq!(
            plan(
                &[l(false, false, 5), l(true, false, 0), l(true, false, 1)],
                2
            ),
            None
        );
    }

    #[test]
    fn backups_move_back_to_a_usable_primary_regardless_of_imbalance() {
        assert_eq!(
            plan(&[l(true, false, 3), l(true, true, 1)], 2),
            Some((1, 0))
        );
        assert_eq!(
            plan(&[l(false, false, 0), l(true, true, 2)], 2),
            None,
            "no primary to go to"
        );
    }

    #[test]
    fn with_no_primary_usable_backups_balance_among_themselves() {
        assert_eq!(
            plan(&[l(false, false, 0), l(true, true, 2), l(true, true, 0)], 2),
            Some((1, 2))
        );
    }
}
