//! A pool's listeners: binding them (one socket per data worker), tying
//! them to their pool, starting their accept loops, and a reload's changes
//! to them.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::BindError;
use crate::config::PoolConfig;
use crate::pool::registry::Pool;
use crate::runtime::reload::Bound;
use crate::net::workers::Workers;
use crate::net::listener;
use crate::net::sockopt;

/// One bound listen address of a pool.
pub(super) struct Listen {
    /// As configured (`127.0.0.1:0` stays `:0`), to diff reloads against.
    configured: SocketAddr,
    pub(super) local: SocketAddr,
    token: CancellationToken,
    /// Bound (one socket per data worker, `SO_REUSEPORT`) but not yet
    /// accepting.
    pending: Vec<std::net::TcpListener>,
}

impl Listen {
    pub(super) fn bound(&self) -> Bound {
        Bound {
            configured: self.configured,
            local: self.local,
        }
    }
}

/// A pool and its listeners.
pub(super) struct PoolRun {
    pub(super) pool: Arc<Pool>,
    pub(super) listens: Vec<Listen>,
}

/// Every bound listen address of every pool.
pub(super) fn bound_addrs(pools: &[PoolRun]) -> Vec<SocketAddr> {
    pools
        .iter()
        .flat_map(|p| p.listens.iter().map(|l| l.local))
        .collect()
}

/// Start the accept loops of the pool's listeners that are not accepting
/// yet: each socket of a listener on its own data worker.
pub(super) fn start_accepting(run: &mut PoolRun, shared: &listener::Shared, workers: &Workers) {
    for l in &mut run.listens {
        for (i, listener) in l.pending.drain(..).enumerate() {
            let (pool, token, shared2) = (run.pool.clone(), l.token.clone(), shared.clone());
            let local = l.local;
            let task = async move {
                // Registered with the worker's own epoll instance.
                match TcpListener::from_std(listener) {
                    Ok(listener) => listener::accept_loop(listener, pool, token, shared2).await,
                    Err(e) => error!(pool = %pool.name, listen = %local, err = %e, "accept_failed"),
                }
            };
            workers.handle(i).spawn(shared.tracker.track_future(task));
        }
    }
}

/// Bind `addrs` for pool `pc`, `sockets` times each (one per data worker,
/// on the same port), logging `listening` for each address. The listeners
/// are not tied to a pool until [`adopt`]ed.
pub(super) fn bind_all(
    pc: &PoolConfig,
    addrs: &[SocketAddr],
    sockets: usize,
) -> Result<Vec<Listen>, BindError> {
    let name = &pc.name;
    let mut out = Vec::new();
    for addr in addrs {
        let failed = |e| BindError::new(format!("pool {name}"), *addr, e);
        let bind =
            |at: SocketAddr| sockopt::bind_std(at, Some(&pc.keepalive), true).map_err(failed);
        sockopt::check_free(*addr).map_err(failed)?;
        let first = bind(*addr)?;
        // A port-0 address: the rest join the port the first one got.
        let local = first.local_addr().map_err(failed)?;
        let mut pending = vec![first];
        for _ in 1..sockets {
            pending.push(bind(local)?);
        }
        out.push(Listen {
            configured: *addr,
            local,
            token: CancellationToken::new(),
            pending,
        });
    }
    for l in &out {
        info!(pool = %name, listen = %l.local, "listening");
    }
    Ok(out)
}

/// Tie listeners to `pool`: they stop when it stops. Records the
/// addresses when they are all the pool has.
pub(super) fn adopt(pool: &Arc<Pool>, bound: Vec<Listen>) -> Vec<Listen> {
    let listens: Vec<Listen> = bound
        .into_iter()
        .map(|l| Listen {
            token: pool.token.child_token(),
            ..l
        })
        .collect();
    pool.set_listen(listens.iter().map(|l| l.local).collect());
    listens
}

/// Apply a changed pool config: the listeners bound to `removed` stop, new
/// ones join, backends are added and removed, settings apply to new work.
pub(super) fn reconfigure(
    run: &mut PoolRun,
    config: &PoolConfig,
    removed: &[SocketAddr],
    bound: Vec<Listen>,
) {
    run.listens.retain(|l| {
        let keep = !removed.contains(&l.local);
        if !keep {
            info!(pool = %run.pool.name, listen = %l.local, "listener_removed");
            l.token.cancel();
        }
        keep
    });
    run.listens.extend(adopt(&run.pool, bound));
    run.pool
        .set_listen(run.listens.iter().map(|l| l.local).collect());
    run.pool.reconfigure(config.clone());
}
