//! The running instance: binds, starts every pool's tasks (accept loops,
//! probes, rebalance and drain clocks), serves until shutdown, applies
//! reloads (the only place pools are added, changed or removed) and live
//! upgrades. With a `state_file`, health is restored from it before any
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
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::config::{AdminConfig, Config};
use crate::net::balance::Loops;
use crate::net::closed_log;
use crate::net::handover::HandoverQueue;
use crate::net::listener::{self, BindError};
use crate::net::sockopt;
use crate::net::source;
use crate::net::workers::Workers;
use crate::ops::admin;
use crate::ops::control::{Budget, Control, ReloadError, ReloadRequest, Reloaded, UpgradeRequest};
use crate::pool::close::CloseReason;
use crate::pool::own::OwnListeners;
use crate::pool::registry::Pool;
use crate::pool::saved::HealthChanges;
use crate::probe::prober::Prober;
use crate::runtime::discover;
use crate::runtime::drain;
use crate::runtime::handover::protocol::Owner;
use crate::runtime::limits;
use crate::runtime::log_lists::List;
use crate::runtime::notify;
use crate::runtime::pid_file;
use crate::runtime::rebalance;
use crate::runtime::reload::{self, ReloadPlan};
use crate::runtime::state_file;

mod listen;
mod take_over;
mod upgrade;

use listen::{
    Listen, PoolRun, TakenListeners, adopt, bind_all, bound_addrs, reconfigure, start_accepting,
};
pub use take_over::Takeover;

/// How long shutdown waits for connections to finish closing.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// How long a cold start waits for the first lookups of discover entries
/// before it accepts clients.
const FIRST_LOOKUP_WAIT: Duration = Duration::from_secs(5);

/// Wait for every receiver (a sender dropped counts as done).
async fn all_done(all: Vec<oneshot::Receiver<()>>) {
    for first in all {
        // A dropped sender (the task ended) is done too.
        let _ = first.await;
    }
}

/// A bound instance.
pub struct Server {
    config: Config,
    path: Option<PathBuf>,
    pools: Vec<PoolRun>,
    admin: Option<(TcpListener, AdminConfig)>,
    root: CancellationToken,
    tracker: TaskTracker,
    shared: listener::Shared,
    control: Control,
    reloads: mpsc::Receiver<ReloadRequest>,
    upgrades: mpsc::Receiver<UpgradeRequest>,
    /// Live upgrades since the cold start.
    generation: u64,
    /// The binary and arguments this process was started with: what an
    /// upgrade starts.
    exec: (PathBuf, Vec<std::ffi::OsString>),
    /// The admin socket's configured address and a second descriptor of
    /// it, for an upgrade.
    admin_kept: Option<(SocketAddr, std::net::TcpListener)>,
    /// Whether the admin endpoint accepts: not while an upgrade's new
    /// process serves beside this one, so no admin client is accepted by a
    /// process about to exit.
    admin_accepting: watch::Sender<bool>,
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
        let server = Server::start(config, path, TakenListeners::default(), 0, 1)?;
        // Before ready: a supervisor that waits for the file finds it.
        if let Some(file) = &server.config.pid_file {
            pid_file::write(file, std::process::id())
                .with_context(|| format!("write pid_file {}", file.display()))?;
        }
        Ok(server)
    }

    /// Bind what `taken_listeners` does not bring, for a process of `generation`
    /// whose connection ids start at `next_conn`.
    fn start(
        config: Config,
        path: Option<PathBuf>,
        mut taken_listeners: TakenListeners,
        generation: u64,
        next_conn: u64,
    ) -> anyhow::Result<Server> {
        source::check(&config)?;
        let root = CancellationToken::new();
        let workers = Workers::per_core().context("start the data workers")?;
        let own = OwnListeners::new();
        let changes = Arc::new(HealthChanges::default());
        let pools = config
            .pools
            .iter()
            .map(|pc| {
                let listens = bind_all(pc, &pc.listen, workers.count(), &mut taken_listeners, &[])?;
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
        let (admin, admin_kept) = match &config.admin {
            Some(a) => {
                let failed = |e| BindError::new("admin", a.listen, e);
                let std = match taken_listeners.take(&Owner::Admin, a.listen) {
                    Some((_, mut sockets)) if !sockets.is_empty() => sockets.swap_remove(0),
                    _ => sockopt::bind_std(a.listen, None, false).map_err(failed)?,
                };
                let kept = std.try_clone().map_err(failed)?;
                let l = TcpListener::from_std(std).map_err(failed)?;
                info!(listen = %l.local_addr()?, "admin_listening");
                (Some((l, a.clone())), Some((a.listen, kept)))
            }
            None => (None, None),
        };
        let budget = limits::connection_budget();
        info!(connections = budget, "connection_budget");
        let (reload_tx, reloads) = mpsc::channel(4);
        let (upgrade_tx, upgrades) = mpsc::channel(1);
        let pool_list = pools.iter().map(|p| p.pool.clone()).collect();
        let slots = Arc::new(Semaphore::new(budget));
        let control = Control::new(pool_list, reload_tx, upgrade_tx, generation)
            .with_budget(Budget::new(slots.clone(), budget));
        let tracker = TaskTracker::new();
        let exec = (
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe")),
            std::env::args_os().skip(1).collect(),
        );
        Ok(Server {
            config,
            path,
            pools,
            admin,
            shared: listener::Shared {
                conn_ids: Arc::new(AtomicU64::new(next_conn)),
                tracker: tracker.clone(),
                slots,
                rejects: Arc::default(),
                handovers: HandoverQueue::default(),
                loops: Loops::new(workers.handles()),
            },
            root,
            tracker,
            control,
            reloads,
            upgrades,
            generation,
            exec,
            admin_kept,
            admin_accepting: watch::Sender::new(true),
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
    /// connection and wait (bounded) for them to finish. Returns early,
    /// closing nothing, once a live upgrade has handed everything over.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        self.serve(shutdown, None).await;
    }

    /// [`Server::run`], for the new process of an upgrade: `takeover` brings
    /// the connections once this one serves.
    async fn serve(mut self, shutdown: impl Future<Output = ()>, takeover: Option<Takeover>) {
        let prober = Prober::new(self.tracker.clone(), self.root.clone());
        let firsts: Vec<_> = (0..self.pools.len())
            .filter_map(|i| self.start_tasks(i, &prober))
            .collect();
        if takeover.is_none() && !firsts.is_empty() {
            // Discovered members before the first client, within a bound:
            // a DNS outage at start-up delays serving, never stops it.
            let all = all_done(firsts);
            if tokio::time::timeout(FIRST_LOOKUP_WAIT, all).await.is_err() {
                warn!(
                    waited_ms = FIRST_LOOKUP_WAIT.as_millis() as u64,
                    "discovery_slow"
                );
            }
        }
        for i in 0..self.pools.len() {
            start_accepting(&mut self.pools[i], &self.shared, &self.workers);
        }
        if let Some((l, admin)) = self.admin.take() {
            let (control, token) = (self.control.clone(), self.root.clone());
            let accepting = self.admin_accepting.subscribe();
            self.tracker
                .spawn(admin::serve(l, admin, control, accepting, token));
        }
        self.tracker.spawn(notify::watchdog(self.root.clone()));
        let writer = self.config.state_file.clone().map(|path| {
            let writer = state_file::write_on_change(
                path,
                self.control.clone(),
                &self.changes,
                self.root.clone(),
            );
            self.tracker.spawn(writer)
        });
        match takeover {
            Some(takeover) => {
                self.take_connections(takeover).await;
                self.rewrite_pid_file();
            }
            None => notify::ready(),
        }
        info!(generation = self.generation, "ready");
        tokio::pin!(shutdown);
        let handed_over = loop {
            tokio::select! {
                () = &mut shutdown => break None,
                Some(reply) = self.reloads.recv() => {
                    let result = self.reload(&prober);
                    // The requester may have gone away; the outcome is logged either way.
                    let _ = reply.send(result);
                }
                Some(request) = self.upgrades.recv() => {
                    let result = self.upgrade().await;
                    let next = result.as_ref().ok().map(|done| done.pid);
                    // The outcome is logged either way; the next upgrade
                    // may start once `request` (its mark) is dropped here.
                    let _ = request.reply.send(result);
                    if next.is_some() {
                        break next;
                    }
                }
            }
        };
        if handed_over.is_some() {
            // The state file is the new process's now: no last write of
            // this one's may land after its first.
            if let Some(writer) = &writer {
                writer.abort();
            }
        } else {
            notify::stopping();
            info!("shutdown");
            if let Some(file) = &self.config.pid_file
                && let Err(err) = pid_file::remove_if_ours(file, std::process::id())
            {
                warn!(path = %file.display(), err = %err, "pid_file_failed");
            }
        }
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
        if let Some(next) = handed_over {
            upgrade::pass_stop_on(shutdown, next);
        }
    }

    /// The new process of an upgrade serves now: the pid file names it.
    /// Too late to refuse the upgrade, so a failure is only logged.
    fn rewrite_pid_file(&self) {
        if let Some(file) = &self.config.pid_file
            && let Err(err) = pid_file::write(file, std::process::id())
        {
            error!(path = %file.display(), err = %err, "pid_file_failed");
        }
    }

    /// Start pool `i`'s probes, clocks and discovery (not its accept
    /// loops); the receiver is told when its first lookups are done.
    /// Start pool `i`'s tasks; `Some` tells when its first lookups are
    /// done, for a pool with discover entries (one without has none to
    /// wait for, whatever its size).
    fn start_tasks(&mut self, i: usize, prober: &Prober) -> Option<oneshot::Receiver<()>> {
        let pool = self.pools[i].pool.clone();
        let first = self.spawn_pool_tasks(&pool, prober);
        (!pool.config().discover.is_empty()).then_some(first)
    }

    fn spawn_pool_tasks(&self, pool: &Arc<Pool>, prober: &Prober) -> oneshot::Receiver<()> {
        prober.watch(pool);
        self.tracker.spawn(rebalance::run(pool.clone()));
        self.tracker.spawn(drain::run(pool.clone()));
        self.tracker.spawn(closed_log::report_folded(pool.clone()));
        let (tell, first) = oneshot::channel();
        self.tracker
            .spawn(discover::run(pool.clone(), prober.clone(), tell));
        first
    }

    /// Re-read the config file and apply it. Everything that can fail
    /// (parsing, binding new addresses) happens before anything changes.
    fn reload(&mut self, prober: &Prober) -> Result<Reloaded, ReloadError> {
        notify::reloading();
        let result = self.try_reload(prober);
        match &result {
            Ok(c) => info!(
                pools = self.pools.len(),
                pools_added = %List(&c.pools_added),
                pools_removed = %List(&c.pools_removed),
                pools_changed = %List(&c.pools_changed),
                backends_added = %List(&c.backends_added),
                backends_removed = %List(&c.backends_removed),
                backends_changed = %List(&c.backends_changed),
                "reloaded"
            ),
            Err(err) => error!(err = err.to_string().as_str(), "reload_failed"),
        }
        notify::ready();
        result
    }

    fn try_reload(&mut self, prober: &Prober) -> Result<Reloaded, ReloadError> {
        let path = self.path.clone().ok_or(ReloadError::NoConfigFile)?;
        let new = Config::load(&path)?;
        source::check(&new).map_err(ReloadError::Source)?;
        let (old, wanted) = reload::in_bound_terms(&self.config, &new, |name| {
            let run = self.pools.iter().find(|p| p.pool.name == name)?;
            Some(run.listens.iter().map(Listen::bound).collect())
        });
        let plan = reload::plan(&old, &wanted);
        self.apply(&plan, &new, prober)?;
        let changes = plan.changes();
        self.config = new;
        Ok(changes)
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
        let own = bound_addrs(&self.pools);
        for pc in &new.pools {
            let wanted = if plan.bind.contains(&pc.name.as_str()) {
                &pc.listen[..]
            } else {
                plan.kept(&pc.name).map_or(&[][..], |k| &k.listen_added)
            };
            let listens = bind_all(
                pc,
                wanted,
                self.workers.count(),
                &mut TakenListeners::default(),
                &own,
            )
            .map_err(ReloadError::Bind)?;
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
                    // Its first clients may come before its first lookup.
                    drop(self.spawn_pool_tasks(&pool, prober));
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
                keys = %List(&plan.restart_only),
                note = "admin, log and state_file settings apply at the next restart",
                "reload_partial"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cold start waits for the first lookups of pools that discover,
    /// and of no other: a big static pool never reads as slow DNS.
    #[tokio::test]
    async fn only_pools_that_discover_hold_up_the_start() {
        let yaml = "pools:\n  - name: fixed\n    listen: 127.0.0.1:0\n    \
                    backends: [127.0.0.1:1]\n  - name: found\n    listen: 127.0.0.1:0\n    \
                    discovery: { resolver: \"127.0.0.1:1\" }\n    \
                    backends: [{ name: n, discover: \"nodes.invalid:1\" }]\n";
        let config = Config::parse(yaml, "t.yaml".as_ref()).expect("valid");
        let mut server = Server::bind(config).expect("bound");
        let prober = Prober::new(server.tracker.clone(), server.root.clone());
        assert!(
            server.start_tasks(0, &prober).is_none(),
            "nothing to look up"
        );
        assert!(
            server.start_tasks(1, &prober).is_some(),
            "its first lookups"
        );
        server.root.cancel();
    }
}
