//! The running instance: binds, starts every pool's tasks, serves until
//! shutdown, and applies reloads (the only place pools are added, changed or
//! removed). With a `state_file`, health is restored from it before any
//! client is accepted and saved to it on every change.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::pool::close::CloseReason;
use crate::config::{Config, IpNet};
use crate::ops::control::{Control, ReloadError, ReloadRequest};
use crate::probe::prober::Prober;
use crate::pool::registry::Pool;
use crate::runtime::reload::{self, ReloadPlan};
use crate::pool::own::OwnListeners;
use crate::pool::saved::HealthChanges;
use crate::runtime::state_file;
use crate::net::workers::Workers;
use crate::ops::admin;
use crate::runtime::limits;
use crate::net::listener::{self, BindError};
use crate::runtime::notify;
use crate::runtime::rebalance;
use crate::net::sockopt;

mod listen;

use listen::{Listen, PoolRun, adopt, bind_all, bound_addrs, reconfigure, start_accepting};

/// How long shutdown waits for connections to finish closing.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A bound instance.
pub struct Server {
    config: Config,
    path: Option<PathBuf>,
    pools: Vec<PoolRun>,
    admin: Option<(TcpListener, Vec<IpNet>)>,
    root: CancellationToken,
    tracker: TaskTracker,
    shared: listener::Shared,
    control: Control,
    reloads: mpsc::Receiver<ReloadRequest>,
    /// Every bound pool listener, which backend legs never dial.
    own: Arc<OwnListeners>,
    /// Told by every pool when a backend's saved health changes.
    changes: Arc<HealthChanges>,
    /// Last: dropped (stopped) after everything that runs on them.
    workers: Workers,
}

impl Server {
    /// Bind every listen address of every pool (and the admin endpoint) and
    /// log `listening` for each. Without a config path, reloads are refused.
    ///
    /// # Errors
    /// The first address that cannot be bound.
    pub fn bind(config: Config) -> anyhow::Result<Server> {
        Server::bind_file(config, None)
    }

    /// As [`Server::bind`], remembering `path` for reloads.
    ///
    /// # Errors
    /// The first address that cannot be bound.
    pub fn bind_file(config: Config, path: Option<PathBuf>) -> anyhow::Result<Server> {
        let root = CancellationToken::new();
        let workers = Workers::per_core().context("start the data workers")?;
        let own = OwnListeners::new();
        let changes = Arc::new(HealthChanges::default());
        let pools = config
            .pools
            .iter()
            .map(|pc| {
                let listens = bind_all(pc, &pc.listen, workers.count())?;
                let pool = Pool::new(pc.clone(), root.child_token())
                    .with_own(own.clone())
                    .with_changes(changes.clone());
                let pool = Arc::new(pool);
                let listens = adopt(&pool, listens);
                Ok(PoolRun { pool, listens })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        own.set(bound_addrs(&pools));
        if let Some(path) = &config.state_file {
            // Bound, not yet accepting: no client reaches a backend whose
            // saved window is still running.
            let all: Vec<Arc<Pool>> = pools.iter().map(|p| p.pool.clone()).collect();
            state_file::restore_at_start(path, &all);
        }
        let admin = match &config.admin {
            Some(a) => {
                let l = sockopt::bind(a.listen, None)
                    .map_err(|e| BindError::new("admin", a.listen, e))?;
                info!(listen = %l.local_addr()?, "admin_listening");
                Some((l, a.allow.clone()))
            }
            None => None,
        };
        let budget = limits::connection_budget();
        info!(connections = budget, "connection_budget");
        let (reload_tx, reloads) = mpsc::channel(4);
        let control = Control::new(pools.iter().map(|p| p.pool.clone()).collect(), reload_tx);
        let tracker = TaskTracker::new();
        Ok(Server {
            config,
            path,
            pools,
            admin,
            shared: listener::Shared {
                conn_ids: Arc::new(AtomicU64::new(1)),
                tracker: tracker.clone(),
                slots: Arc::new(Semaphore::new(budget)),
                rejects: Arc::default(),
            },
            root,
            tracker,
            control,
            reloads,
            own,
            changes,
            workers,
        })
    }

    /// The pools, in config order.
    pub fn pools(&self) -> Vec<Arc<Pool>> {
        self.pools.iter().map(|p| p.pool.clone()).collect()
    }

    /// The handle for status, manual quarantine and reload.
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// The bound addresses, per pool name.
    pub fn local_addrs(&self) -> Vec<(String, SocketAddr)> {
        self.pools
            .iter()
            .flat_map(|p| p.listens.iter().map(|l| (p.pool.name.clone(), l.local)))
            .collect()
    }

    /// Serve until `shutdown` resolves, then stop accepting, close every
    /// connection and wait (bounded) for them to finish.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let prober = Prober::new(self.tracker.clone(), self.root.clone());
        for i in 0..self.pools.len() {
            self.start_pool(i, &prober);
        }
        if let Some((l, allow)) = self.admin.take() {
            let (control, token) = (self.control.clone(), self.root.clone());
            self.tracker.spawn(admin::serve(l, allow, control, token));
        }
        self.tracker.spawn(notify::watchdog(self.root.clone()));
        if let Some(path) = self.config.state_file.clone() {
            let writer = state_file::write_on_change(
                path,
                self.control.clone(),
                &self.changes,
                self.root.clone(),
            );
            self.tracker.spawn(writer);
        }
        notify::ready();
        info!("ready");
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(reply) = self.reloads.recv() => {
                    let result = self.reload(&prober);
                    // The requester may have gone away; the outcome is logged either way.
                    let _ = reply.send(result);
                }
            }
        }
        notify::stopping();
        info!("shutdown");
        for run in &self.pools {
            run.pool.stop(CloseReason::Shutdown);
        }
        self.root.cancel();
        self.tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.tracker.wait())
            .await
            .is_err()
        {
            warn!(tasks = self.tracker.len(), "shutdown_timeout");
        }
    }

    fn start_pool(&mut self, i: usize, prober: &Prober) {
        let run = &mut self.pools[i];
        prober.watch(&run.pool);
        self.tracker.spawn(rebalance::run(run.pool.clone()));
        start_accepting(run, &self.shared, &self.workers);
    }

    /// Re-read the config file and apply it. Everything that can fail
    /// (parsing, binding new addresses) happens before anything changes.
    fn reload(&mut self, prober: &Prober) -> Result<(), ReloadError> {
        notify::reloading();
        let result = self.try_reload(prober);
        match &result {
            Ok(()) => info!(pools = self.pools.len(), "reloaded"),
            Err(err) => error!(err = err.to_string().as_str(), "reload_failed"),
        }
        notify::ready();
        result
    }

    fn try_reload(&mut self, prober: &Prober) -> Result<(), ReloadError> {
        let path = self.path.clone().ok_or(ReloadError::NoConfigFile)?;
        let new = Config::load(&path)?;
        let (old, wanted) = reload::in_bound_terms(&self.config, &new, |name| {
            let run = self.pools.iter().find(|p| p.pool.name == name)?;
            Some(run.listens.iter().map(Listen::bound).collect())
        });
        let plan = reload::plan(&old, &wanted);
        self.apply(&plan, &new, prober)?;
        self.config = new;
        Ok(())
    }

    /// Apply `plan`, which turns the running config into `new`. Binding
    /// comes first; on any error nothing has changed.
    fn apply(
        &mut self,
        plan: &ReloadPlan<'_>,
        new: &Config,
        prober: &Prober,
    ) -> Result<(), ReloadError> {
        // Bind what is new first; on any error drop it all and keep running as before.
        let mut fresh: HashMap<&str, Vec<Listen>> = HashMap::new();
        for pc in &new.pools {
            let wanted = if plan.bind.contains(&pc.name.as_str()) {
                &pc.listen[..]
            } else {
                plan.kept(&pc.name).map_or(&[][..], |k| &k.listen_added)
            };
            let listens = bind_all(pc, wanted, self.workers.count()).map_err(ReloadError::Bind)?;
            fresh.insert(&pc.name, listens);
        }
        let mut next = Vec::new();
        for pc in &new.pools {
            let bound = fresh.remove(pc.name.as_str()).unwrap_or_default();
            let run = match self.pools.iter().position(|p| p.pool.name == pc.name) {
                Some(i) => {
                    let mut run = self.pools.remove(i);
                    let gone = plan.kept(&pc.name).map_or(&[][..], |k| &k.listen_removed);
                    reconfigure(&mut run, pc, gone, bound);
                    prober.rewatch(&run.pool);
                    run
                }
                None => {
                    let pool = Pool::new(pc.clone(), self.root.child_token())
                        .with_own(self.own.clone())
                        .with_changes(self.changes.clone());
                    let pool = Arc::new(pool);
                    let listens = adopt(&pool, bound);
                    info!(pool = %pc.name, "pool_added");
                    prober.watch(&pool);
                    self.tracker.spawn(rebalance::run(pool.clone()));
                    PoolRun { pool, listens }
                }
            };
            next.push(run);
        }
        // What is left are the pools the plan stops, in the old order.
        for gone in self.pools.drain(..) {
            debug_assert!(plan.stop.contains(&gone.pool.name.as_str()));
            info!(pool = %gone.pool.name, "pool_removed");
            gone.pool.stop(CloseReason::PoolRemoved);
        }
        self.pools = next;
        self.own.set(bound_addrs(&self.pools));
        for run in &mut self.pools {
            start_accepting(run, &self.shared, &self.workers);
        }
        self.control.set_pools(self.pools());
        // Pools came or went: the state file follows the pools now.
        self.changes.bump();
        if !plan.restart_only.is_empty() {
            warn!(
                keys = ?plan.restart_only,
                "reload_partial: admin, log and state_file settings apply at the next restart"
            );
        }
        Ok(())
    }
}
