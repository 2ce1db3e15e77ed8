//! pin-proxy: a TCP pinning connection balancer for long-lived P2P clients.
//!
//! Module map:
//! - [`config`]: config.yaml, parsed and validated once into typed values.
//! - [`listener`]: accept loop, allow-list, `max_connections`.
//! - [`session`]: one client: choose, connect with fail-over, splice, log.
//! - [`select`]: least-used choice (pure).
//! - [`registry`]: per-pool backends, health, live connections, counters.
//! - [`health`]: backend states and their transitions (pure).
//! - [`apply`]: applies connect outcomes, probe reports and manual commands
//!   to a pool; drains.
//! - [`prober`]: probe scheduling, one task per distinct target.
//! - [`rebalance`]: the rebalance tick.
//! - [`connect`], [`splice`], [`sockopt`]: the socket work.
//! - [`status`]: point-in-time views of the pools (`/status`).
//! - [`logging`]: tracing setup (JSON or text, stdout or daily file).
//! - [`probe`]: health probes, one kind per file.
//! - [`simnode`]: a simulated P2P node for the demo and tests.

#![warn(missing_docs)]

pub mod apply;
pub mod config;
pub mod connect;
pub mod control;
pub mod health;
pub mod listener;
pub mod logging;
pub mod probe;
pub mod prober;
pub mod rebalance;
pub mod registry;
pub mod select;
pub mod session;
pub mod simnode;
pub mod sockopt;
pub mod splice;
pub mod status;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use config::Config;
use registry::Pool;

/// How long shutdown waits for connections to finish closing.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A bound but not yet serving instance.
pub struct Server {
    pools: Vec<(Arc<Pool>, Vec<TcpListener>)>,
    root: CancellationToken,
    tracker: TaskTracker,
}

impl Server {
    /// Bind every listen address of every pool and log `listening` for each.
    ///
    /// # Errors
    /// The first address that cannot be bound, with its pool.
    pub fn bind(config: Config) -> anyhow::Result<Server> {
        let root = CancellationToken::new();
        let mut pools = Vec::new();
        for pool_config in config.pools {
            let mut listeners = Vec::new();
            let mut bound = Vec::new();
            for addr in &pool_config.listen {
                let listener = sockopt::bind(*addr)
                    .with_context(|| format!("pool {}: bind {addr}", pool_config.name))?;
                let local = listener.local_addr()?;
                info!(pool = %pool_config.name, listen = %local, "listening");
                listeners.push(listener);
                bound.push(local);
            }
            let pool = Arc::new(Pool::new(pool_config, root.child_token()));
            pool.set_listen(bound);
            pools.push((pool, listeners));
        }
        Ok(Server {
            pools,
            root,
            tracker: TaskTracker::new(),
        })
    }

    /// The pools, in config order.
    pub fn pools(&self) -> Vec<Arc<Pool>> {
        self.pools.iter().map(|(p, _)| p.clone()).collect()
    }

    /// The bound addresses, per pool name.
    pub fn local_addrs(&self) -> Vec<(String, SocketAddr)> {
        self.pools
            .iter()
            .flat_map(|(pool, ls)| {
                ls.iter()
                    .filter_map(|l| l.local_addr().ok())
                    .map(|a| (pool.name.clone(), a))
            })
            .collect()
    }

    /// Serve until `shutdown` resolves, then stop accepting, close every
    /// connection and wait (bounded) for them to finish.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let shared = listener::Shared {
            conn_ids: Arc::new(AtomicU64::new(1)),
            tracker: self.tracker.clone(),
        };
        let prober = prober::Prober::new(self.tracker.clone(), self.root.clone());
        for (pool, listeners) in self.pools {
            prober.watch(&pool);
            self.tracker.spawn(rebalance::run(pool.clone()));
            for l in listeners {
                self.tracker
                    .spawn(listener::accept_loop(l, pool.clone(), shared.clone()));
            }
        }
        info!("ready");
        shutdown.await;
        info!("shutdown");
        self.root.cancel();
        self.tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.tracker.wait())
            .await
            .is_err()
        {
            warn!(tasks = self.tracker.len(), "shutdown_timeout");
        }
    }
}

/// Bind and serve `config` until `shutdown` resolves.
///
/// # Errors
/// When a listener cannot be bound.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    Server::bind(config)?.run(shutdown).await;
    Ok(())
}
