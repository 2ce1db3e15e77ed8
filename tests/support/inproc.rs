//! A pin-proxy server in the test's own runtime: start it from YAML, reach
//! its pools, wait for a backend state, read status snapshots, stop it
//! gracefully. Reads of pool snapshots (`pool.view().snapshot()`) stay here, as
//! named helpers, so a change of the snapshot touches this file only.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pin_proxy::Control;
use pin_proxy::Server;
use pin_proxy::config::Config;
use pin_proxy::inspect::BackendStatus;
use pin_proxy::inspect::Pool;
use pin_proxy::inspect::{BackendSnapshot, ConnState};
use pin_proxy::inspect::{ProbeOutcome, State};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{wait_until, within};

/// Bound on every wait of the harness, stopping included.
pub const T: Duration = Duration::from_secs(20);

/// Parse `yaml` as an inline config.
pub fn config(yaml: &str) -> Config {
    Config::parse(yaml, Path::new("inline.yaml")).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// A server running in this runtime. [`Running::stop`] stops it gracefully;
/// dropping it (a failed test) only signals the stop and aborts the task.
pub struct Running {
    pools: Vec<Arc<Pool>>,
    control: Control,
    addrs: Vec<(String, SocketAddr)>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Running {
    /// Bind and run `yaml`; panics if it cannot bind.
    pub fn start(yaml: &str) -> Running {
        Running::try_start(yaml).unwrap_or_else(|e| panic!("start: {e:#}"))
    }

    /// Bind and run `yaml`.
    ///
    /// # Errors
    /// The bind error.
    pub fn try_start(yaml: &str) -> anyhow::Result<Running> {
        Ok(Running::serve(Server::bind(config(yaml))?))
    }

    /// Bind and run the config file at `path`, which reloads re-read.
    pub fn start_file(path: &Path) -> Running {
        let config = Config::load(path).unwrap_or_else(|e| panic!("{e}"));
        let server = Server::bind_file(config, Some(path.to_owned()))
            .unwrap_or_else(|e| panic!("start {}: {e:#}", path.display()));
        Running::serve(server)
    }

    fn serve(server: Server) -> Running {
        let (pools, control, addrs) = (server.pools(), server.control(), server.local_addrs());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            // A dropped sender stops the server as well.
            let _ = stopped.await;
        }));
        Running {
            pools,
            control,
            addrs,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Signal the shutdown and wait (bounded) for the server to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            // An error means the server already stopped: awaited just below.
            let _ = stop.send(());
        }
        let task = self.task.take().expect("running");
        within("server stops", T, task)
            .await
            .expect("server task ended cleanly");
    }

    /// The handle for status, manual quarantine and reload.
    pub fn control(&self) -> &Control {
        &self.control
    }

    /// The pools, in config order.
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    /// The first pool (most tests have one).
    pub fn pool(&self) -> &Pool {
        &self.pools[0]
    }

    /// The first bound address of the first pool.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0].1
    }

    /// The status of backend `name` of the first pool.
    pub fn backend(&self, name: &str) -> BackendStatus {
        pin_proxy::inspect::status(self.pool())
            .backends
            .into_iter()
            .find(|b| b.name == name)
            .unwrap_or_else(|| panic!("no backend {name}"))
    }

    /// The state of backend `name` of the first pool.
    pub fn state(&self, name: &str) -> State {
        self.backend(name).state
    }

    /// Wait until backend `name` of the first pool is in `state`.
    pub async fn wait_state(&self, name: &str, state: State) {
        let what = format!("{name} {state}");
        wait_until(&what, T, || self.state(name) == state).await;
    }

    /// Wait until the backends of the first pool hold these connections.
    pub async fn wait_connections(&self, per_backend: &[(&str, usize)]) {
        let what = format!("connections {per_backend:?}");
        wait_until(&what, T, || {
            per_backend
                .iter()
                .all(|(name, n)| self.backend(name).connections == *n)
        })
        .await;
    }

    /// A client through the first pool, once its backend leg is up. Placed
    /// is not enough: a client still connecting is not drained, and if its
    /// backend is taken out meanwhile it goes to another one.
    pub async fn client(&self) -> TcpStream {
        let before = self.spliced();
        let stream = TcpStream::connect(self.addr()).await.unwrap();
        wait_until("client spliced", T, || self.spliced() > before).await;
        stream
    }

    /// Client connections of the first pool spliced to a backend and not
    /// closing.
    pub fn spliced(&self) -> usize {
        self.pool()
            .view()
            .snapshot()
            .backends
            .iter()
            .flat_map(|b| &b.conns)
            .filter(|c| c.state == ConnState::Spliced)
            .count()
    }

    /// The snapshot of backend `name` of the first pool.
    pub fn backend_snapshot(&self, name: &str) -> BackendSnapshot {
        self.pool()
            .view()
            .snapshot()
            .backends
            .into_iter()
            .find(|b| b.name == name)
            .unwrap_or_else(|| panic!("no backend {name}"))
    }

    /// Whether every connection on backend `name` of the first pool is still
    /// open (not asked to close); read under the pool lock, so it reflects
    /// every drain decision taken before the call.
    pub fn none_closing(&self, name: &str) -> bool {
        self.backend_snapshot(name)
            .conns
            .iter()
            .all(|c| c.state != ConnState::Closing)
    }

    /// Probe results of `outcome` applied to backend `name` of the first
    /// pool so far.
    pub fn probes(&self, name: &str, outcome: ProbeOutcome) -> u64 {
        self.backend_snapshot(name).counters.probe_count(outcome)
    }

    /// Probe results of any outcome applied to the first backend of pool
    /// number `pool` so far.
    pub fn probes_applied(&self, pool: usize) -> u64 {
        self.pools[pool].view().snapshot().backends[0]
            .counters
            .probes
            .values()
            .sum()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Reached with the task still set only when a test failed before
        // `stop`: no runtime left to await it in, so abort.
        if let Some(stop) = self.stop.take() {
            // The server may have stopped already; nothing else to do.
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
