//! A pool's listeners: binding them (one socket per data worker), tying
//! them to their pool, starting their accept loops, and a reload's changes
//! to them.

use std::net::SocketAddr;
use std::sync::Arc;

use std::os::fd::OwnedFd;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::BindError;
use crate::config::PoolConfig;
use crate::net::listener;
use crate::net::sockopt;
use crate::net::workers::Workers;
use crate::pool::registry::Pool;
use crate::runtime::handover::protocol::{HandedListener, Owner};
use crate::runtime::reload::Bound;

/// One bound listen address of a pool.
pub(super) struct Listen {
    /// As configured (`127.0.0.1:0` stays `:0`), to diff reloads against.
    configured: SocketAddr,
    pub(super) local: SocketAddr,
    token: CancellationToken,
    /// Bound (one socket per data worker, `SO_REUSEPORT`) but not yet
    /// accepting.
    pending: Vec<std::net::TcpListener>,
    /// A second descriptor of each accepting socket, outside the event
    /// loops: what a live upgrade hands over, and what accepting starts
    /// again from when an upgrade fails.
    pub(super) kept: Vec<std::net::TcpListener>,
    /// The accept loops on it.
    loops: Vec<JoinHandle<()>>,
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
            match listener.try_clone() {
                Ok(kept) => l.kept.push(kept),
                // Only a live upgrade needs it, and it checks.
                Err(e) => {
                    error!(pool = %run.pool.name, listen = %l.local, err = %e, "listener_dup_failed")
                }
            }
            let (pool, token, shared2) = (run.pool.clone(), l.token.clone(), shared.clone());
            let local = l.local;
            let me = i % workers.count();
            let task = async move {
                // Registered with the worker's own epoll instance.
                match listener::register(listener) {
                    Ok(listener) => listener::accept_loop(listener, pool, token, shared2, me).await,
                    Err(e) => error!(pool = %pool.name, listen = %local, err = %e, "accept_failed"),
                }
            };
            l.loops
                .push(workers.handle(i).spawn(shared.tracker.track_future(task)));
        }
    }
}

/// Stop the pool's accept loops and wait until they are gone. The sockets
/// stay open (in `kept`, and in the new process of an upgrade): clients
/// keep queueing on them and nobody is refused.
pub(super) async fn stop_accepting(run: &mut PoolRun) {
    for l in &mut run.listens {
        l.token.cancel();
        for task in l.loops.drain(..) {
            // A loop that panicked is gone too; nothing to do about it here.
            let _ = task.await;
        }
    }
}

/// Accept again on the kept sockets (an upgrade failed after accepting
/// had stopped).
pub(super) fn resume_accepting(run: &mut PoolRun, shared: &listener::Shared, workers: &Workers) {
    for l in &mut run.listens {
        l.token = run.pool.token.child_token();
        for kept in std::mem::take(&mut l.kept) {
            l.pending.push(kept);
        }
    }
    start_accepting(run, shared, workers);
}

/// Listening sockets taken over from the process before a live upgrade,
/// by owner and configured address, until a pool claims them.
#[derive(Default)]
pub(super) struct TakenListeners {
    listeners: Vec<(HandedListener, Vec<std::net::TcpListener>)>,
}

impl TakenListeners {
    /// The sockets of `handed`, taken from `fds` in order.
    pub(super) fn new(
        handed: Vec<HandedListener>,
        fds: Vec<OwnedFd>,
    ) -> Result<TakenListeners, String> {
        let mut fds = fds.into_iter();
        let mut listeners = Vec::new();
        for c in handed {
            let sockets: Vec<std::net::TcpListener> =
                fds.by_ref().take(c.sockets).map(Into::into).collect();
            if sockets.len() != c.sockets || sockets.is_empty() {
                return Err(format!("listener {} came without its sockets", c.local));
            }
            listeners.push((c, sockets));
        }
        Ok(TakenListeners { listeners })
    }

    /// The sockets of `owner`'s listener configured as `configured`, with
    /// the address they are bound to.
    pub(super) fn take(
        &mut self,
        owner: &Owner,
        configured: SocketAddr,
    ) -> Option<(SocketAddr, Vec<std::net::TcpListener>)> {
        let i = self
            .listeners
            .iter()
            .position(|(c, _)| &c.owner == owner && c.configured == configured)?;
        let (c, sockets) = self.listeners.swap_remove(i);
        Some((c.local, sockets))
    }

    /// How many were taken over in all (claimed or not).
    pub(super) fn count(&self) -> usize {
        self.listeners.len()
    }
}

/// Bind `addrs` for pool `pc`, `sockets` times each (one per data worker,
/// on the same port), logging `listening` for each address. The listeners
/// are not tied to a pool until [`adopt`]ed.
/// An address taken over from an upgrade's old process comes with its
/// sockets (more are bound beside them when this process has more workers).
///
/// `own` are the addresses this process listens on already (a reload that
/// renames a pool, or moves an address to another pool): the new sockets
/// join the old ones' `SO_REUSEPORT` group and take over when those close,
/// instead of being refused as taken.
pub(super) fn bind_all(
    pc: &PoolConfig,
    addrs: &[SocketAddr],
    sockets: usize,
    taken_listeners: &mut TakenListeners,
    own: &[SocketAddr],
) -> Result<Vec<Listen>, BindError> {
    let name = &pc.name;
    let mut out = Vec::new();
    for addr in addrs {
        let failed = |e| BindError::new(format!("pool {name}"), *addr, e);
        let bind =
            |at: SocketAddr| sockopt::bind_std(at, Some(&pc.keepalive), true).map_err(failed);
        let (local, mut pending) = match taken_listeners.take(&Owner::Pool(name.clone()), *addr) {
            Some(taken) => taken,
            None => {
                if !own.contains(addr) {
                    sockopt::check_free(*addr).map_err(failed)?;
                }
                let first = bind(*addr)?;
                // A port-0 address: the rest join the port the first one got.
                (first.local_addr().map_err(failed)?, vec![first])
            }
        };
        while pending.len() < sockets {
            pending.push(bind(local)?);
        }
        out.push(Listen {
            configured: *addr,
            local,
            token: CancellationToken::new(),
            pending,
            kept: Vec::new(),
            loops: Vec::new(),
        });
    }
    for l in &out {
        info!(pool = %name, listen = %l.local, "listening");
    }
    Ok(out)
}

/// What a live upgrade hands over of `runs`' listeners: their description
/// and, in the same order, their kept sockets.
pub(super) fn handed(runs: &[PoolRun]) -> (Vec<HandedListener>, Vec<&std::net::TcpListener>) {
    let mut handed = Vec::new();
    let mut sockets = Vec::new();
    for run in runs {
        for l in &run.listens {
            handed.push(HandedListener {
                owner: Owner::Pool(run.pool.name.clone()),
                configured: l.configured,
                local: l.local,
                sockets: l.kept.len(),
            });
            sockets.extend(&l.kept);
        }
    }
    (handed, sockets)
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
