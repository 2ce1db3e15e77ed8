//! The rebalance plan: which backend gives one connection to which, and the
//! move itself. Connections on a backup move back to a usable primary one
//! per tick whatever `min_imbalance` says. The tick that test-connects the
//! receiving backend before a move runs in `runtime::rebalance`.

use std::sync::atomic::Ordering;

use tracing::info;

use crate::pool::close::CloseReason;
use crate::pool::node;
use crate::pool::registry::{BackendId, Pool};

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

/// One planned move: a connection from `from` to `to`, whose address the
/// tick test-connects first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The busier backend, which gives its newest connection.
    pub from: BackendId,
    /// The emptier backend, which the client redials to.
    pub to: BackendId,
    /// `to`'s address, for the test connect.
    pub to_addr: String,
}

/// A pool's rebalancing: the move the tick would make now, and making it.
#[derive(Clone, Copy)]
pub struct Rebalance<'a> {
    pool: &'a Pool,
}

impl Pool {
    /// This pool's rebalancing.
    pub fn rebalance(&self) -> Rebalance<'_> {
        Rebalance { pool: self }
    }
}

impl Rebalance<'_> {
    /// The move the pool needs now, or `None` when it is balanced.
    pub fn plan(&self) -> Option<Move> {
        let config = self.pool.config();
        let (min_imbalance, strict) =
            (config.rebalance.min_imbalance, node::strict(&config.health));
        let backends = self.pool.backends();
        let loads: Vec<Load> = backends
            .active
            .iter()
            .map(|b| Load {
                usable: b.takes_clients(strict),
                backup: b.config().backup,
                // O(1): a connection just closed by the previous tick leaves the
                // map within milliseconds, long before the next tick.
                live: b.conns().len(),
            })
            .collect();
        let (from, to) = plan(&loads, min_imbalance)?;
        Some(Move {
            from: backends.active[from].id(),
            to: backends.active[to].id(),
            to_addr: backends.active[to].config().addr.clone(),
        })
    }

    /// Close `m.from`'s newest movable connection (its client redials and
    /// lands on the emptier backend). Nothing when a backend is gone or no
    /// connection can move.
    pub fn make(&self, m: &Move) {
        let backends = self.pool.backends();
        let (Some(src), Some(dst)) = (
            backends.active.iter().find(|b| b.id() == m.from),
            backends.active.iter().find(|b| b.id() == m.to),
        ) else {
            return;
        };
        let newest = src
            .conns()
            .iter()
            .rev()
            .find(|(_, e)| e.closer.is_movable());
        if let Some((conn, entry)) = newest {
            entry.closer.close(CloseReason::Rebalanced);
            self.pool.rebalance_moves.fetch_add(1, Ordering::Relaxed);
            info!(
                pool = %self.pool.name, from = %src.config().name, to = %dst.config().name, conn = *conn,
                from_connections = src.conns().len(), to_connections = dst.conns().len(), "rebalanced"
            );
        }
    }
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
