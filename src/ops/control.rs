//! The handle operators' tools act through (admin endpoint, signals): the
//! current pools, status, manual quarantine and reload requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use crate::config::ConfigError;
use crate::net::listener::BindError;
use crate::net::source::SourceError;
use crate::ops::status::Status;
use crate::pool::registry::Pool;

/// A reload request: the answer is what changed, or an error when the
/// reload was refused (the old config keeps running).
pub type ReloadRequest = oneshot::Sender<Result<Reloaded, ReloadError>>;

/// What a reload changed: the fields of `reloaded` and of the answer to
/// `POST /reload`. Backends are `pool/backend`; a new pool's backends come
/// with it and a changed `addr` is a backend removed and one added.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// Pools the new config adds.
    pub pools_added: Vec<String>,
    /// Pools it removes.
    pub pools_removed: Vec<String>,
    /// Pools both have whose listen addresses, backends or settings change.
    pub pools_changed: Vec<String>,
    /// Backends added to kept pools.
    pub backends_added: Vec<String>,
    /// Backends removed from kept pools.
    pub backends_removed: Vec<String>,
    /// Kept backends whose other keys (`backup`, `probe_url`) change.
    pub backends_changed: Vec<String>,
}

impl Reloaded {
    /// One line for a person: `pools added: a; backends removed: p/x`, or
    /// `nothing changed`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = [
            ("pools added", &self.pools_added),
            ("pools removed", &self.pools_removed),
            ("pools changed", &self.pools_changed),
            ("backends added", &self.backends_added),
            ("backends removed", &self.backends_removed),
            ("backends changed", &self.backends_changed),
        ]
        .into_iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(what, names)| format!("{what}: {}", names.join(", ")))
        .collect();
        if parts.is_empty() {
            "nothing changed".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

/// Why a reload was refused; the old config keeps running. `Display` is
/// the one line `reload_failed` logs and `POST /reload` answers with.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The server was started without a config file: nothing to re-read.
    #[error("no config file to reload")]
    NoConfigFile,
    /// The new config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listen address new in the config could not be bound. The line
    /// ends with the OS error, so it is shown here, not chained as a source.
    #[error("{0}: {io}", io = .0.source)]
    Bind(BindError),
    /// A pool's `source` cannot be used by this process (the capability
    /// `source: client` needs, an address not on the host).
    #[error(transparent)]
    Source(SourceError),
    /// The server is stopping and applies no more reloads.
    #[error("server is shutting down")]
    ShuttingDown,
}

/// An upgrade request: the answer says how it went. While one is queued
/// or running, its [`Running`] mark refuses others; the server drops it
/// with the request once the upgrade is over, whether or not the
/// requester stayed for the answer.
#[derive(Debug)]
pub struct UpgradeRequest {
    /// Where the outcome goes.
    pub reply: oneshot::Sender<Result<Upgraded, UpgradeError>>,
    /// Set while this request lives.
    pub running: Running,
}

/// Marks an upgrade queued or running; cleared when dropped.
#[derive(Debug)]
pub struct Running(Arc<AtomicBool>);

impl Running {
    /// The mark, unless `flag` is set already (another upgrade runs).
    fn take(flag: &Arc<AtomicBool>) -> Option<Running> {
        (!flag.swap(true, Ordering::AcqRel)).then(|| Running(flag.clone()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A live upgrade that completed: the answer of `POST /upgrade`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upgraded {
    /// The new process.
    pub pid: u32,
    /// Its generation.
    pub generation: u64,
    /// The connections it took over.
    pub connections: usize,
}

/// Why a live upgrade failed or was refused; the running process keeps
/// serving everything. `Display` is the `reason` of `upgrade_failed`.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// Another upgrade is under way.
    #[error("an upgrade is already running")]
    Busy,
    /// The new binary could not be started.
    #[error("start {path}: {err}")]
    Spawn {
        /// The binary.
        path: String,
        /// Why.
        err: std::io::Error,
    },
    /// The new process exited before the handover completed.
    #[error("the new process exited before it was ready ({0})")]
    Exited(String),
    /// The new process did not get as far in time.
    #[error("the new process was not {0} within {t}", t = crate::config::span(*.1))]
    Timeout(&'static str, std::time::Duration),
    /// The new process refused (a handover format it cannot read, a
    /// listen address it could not bind, ...).
    #[error("the new process refused: {0}")]
    Refused(String),
    /// The handover channel failed.
    #[error("handover: {0}")]
    Channel(std::io::Error),
    /// The server is stopping.
    #[error("server is shutting down")]
    ShuttingDown,
    /// This process is PID 1 (a container's init): when it exits, the
    /// kernel ends every process of the container, the new one too.
    #[error(
        "running as PID 1: when PID 1 exits, the container ends with every process and \
         connection in it, the new one too; restart the container to upgrade, or run \
         pin-proxy under an init (docker run --init, tini) for live upgrades"
    )]
    Pid1,
}

/// The process's own figures on `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    /// Crate version.
    pub version: &'static str,
    /// Live upgrades since the cold start.
    pub generation: u64,
    /// The connection budget and the slots in use; `None` without one.
    pub budget: Option<(usize, usize)>,
}

/// Shared, cheap to clone.
#[derive(Clone)]
pub struct Control {
    pools: Arc<ArcSwap<Vec<Arc<Pool>>>>,
    reload: mpsc::Sender<ReloadRequest>,
    upgrade: mpsc::Sender<UpgradeRequest>,
    upgrading: Arc<AtomicBool>,
    generation: u64,
    started: Instant,
    budget: Option<Budget>,
}

/// The process's connection budget (`connection_budget` at start): how many
/// client connections its open-file limit lets it hold, and the slots taken.
#[derive(Clone)]
pub struct Budget {
    slots: Arc<Semaphore>,
    total: usize,
}

impl Budget {
    /// `total` slots, handed out by `slots`.
    pub fn new(slots: Arc<Semaphore>, total: usize) -> Budget {
        Budget { slots, total }
    }

    /// The budget and how much of it is in use now.
    pub fn figures(&self) -> (usize, usize) {
        let free = self.slots.available_permits();
        (self.total, self.total.saturating_sub(free))
    }
}

impl Control {
    /// A handle over `pools` of a process of `generation`; reload and
    /// upgrade requests go to their channels.
    pub fn new(
        pools: Vec<Arc<Pool>>,
        reload: mpsc::Sender<ReloadRequest>,
        upgrade: mpsc::Sender<UpgradeRequest>,
        generation: u64,
    ) -> Control {
        Control {
            pools: Arc::new(ArcSwap::from_pointee(pools)),
            reload,
            upgrade,
            upgrading: Arc::default(),
            generation,
            started: Instant::now(),
            budget: None,
        }
    }

    /// The handle, reporting `budget` on `/metrics`.
    pub fn with_budget(self, budget: Budget) -> Control {
        Control {
            budget: Some(budget),
            ..self
        }
    }

    /// What `/metrics` reports of the process itself.
    pub fn process(&self) -> Process {
        Process {
            version: env!("CARGO_PKG_VERSION"),
            generation: self.generation,
            budget: self.budget.as_ref().map(Budget::figures),
        }
    }

    /// The pools now, in config order.
    pub fn pools(&self) -> Arc<Vec<Arc<Pool>>> {
        self.pools.load_full()
    }

    /// Replace the pool list (after a reload).
    pub fn set_pools(&self, pools: Vec<Arc<Pool>>) {
        self.pools.store(Arc::new(pools));
    }

    /// The pool named `name`.
    pub fn pool(&self, name: &str) -> Option<Arc<Pool>> {
        self.pools().iter().find(|p| p.name == name).cloned()
    }

    /// The `/status` document.
    pub fn status(&self) -> Status {
        Status {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: std::process::id(),
            generation: self.generation,
            uptime_s: self.started.elapsed().as_secs(),
            pools: self
                .pools()
                .iter()
                .map(|p| crate::ops::status::of_pool(p))
                .collect(),
        }
    }

    /// Re-read the config file and apply it; waits for the outcome: what
    /// changed.
    ///
    /// # Errors
    /// Why the new config was refused, or that the server is stopping.
    pub async fn reload(&self) -> Result<Reloaded, ReloadError> {
        let (tx, rx) = oneshot::channel();
        self.reload
            .send(tx)
            .await
            .map_err(|_| ReloadError::ShuttingDown)?;
        rx.await.map_err(|_| ReloadError::ShuttingDown)?
    }

    /// True while an upgrade is queued or running.
    pub fn upgrading(&self) -> bool {
        self.upgrading.load(Ordering::Acquire)
    }

    /// Hand everything to a new process of the binary this one was started
    /// from; waits for the outcome. A second request while one runs is
    /// refused at once. A requester that stops waiting (a client gone, a
    /// timeout) leaves the upgrade to finish; the next may start after it.
    ///
    /// # Errors
    /// Why the upgrade failed; this process then serves on as before.
    pub async fn upgrade(&self) -> Result<Upgraded, UpgradeError> {
        let running = Running::take(&self.upgrading).ok_or(UpgradeError::Busy)?;
        let (reply, rx) = oneshot::channel();
        self.upgrade
            .send(UpgradeRequest { reply, running })
            .await
            .map_err(|_| UpgradeError::ShuttingDown)?;
        rx.await.map_err(|_| UpgradeError::ShuttingDown)?
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::io;

    use super::*;

    /// The bind failure reads as one line ending with the OS error, as the
    /// `reload_failed` event and `POST /reload` have always shown it.
    #[test]
    fn a_bind_failure_is_one_line_with_the_os_error() {
        let err = ReloadError::Bind(BindError {
            owner: "pool p".to_owned(),
            addr: "127.0.0.1:9333".parse().expect("address"),
            source: io::Error::from(io::ErrorKind::AddrInUse),
        });
        assert_eq!(
            err.to_string(),
            "pool p: bind 127.0.0.1:9333: address in use"
        );
        assert!(err.source().is_none(), "not repeated as a source");
        assert_eq!(
            ReloadError::NoConfigFile.to_string(),
            "no config file to reload"
        );
    }

    /// A requester that stops waiting (its client gone, a timeout) leaves
    /// the upgrade running: others are refused until it is over, and the
    /// next may start after it, not never.
    #[tokio::test]
    async fn an_upgrade_whose_requester_left_still_ends_the_refusals() {
        let (reload, _reloads) = mpsc::channel(1);
        let (upgrade, mut upgrades) = mpsc::channel(1);
        let control = Control::new(Vec::new(), reload, upgrade, 0);
        let first = control.clone();
        let left = tokio::spawn(async move { first.upgrade().await });
        // The server took it up; its requester goes away meanwhile.
        let running: UpgradeRequest = upgrades.recv().await.expect("a request");
        left.abort();
        assert!(left.await.unwrap_err().is_cancelled());
        assert!(matches!(control.upgrade().await, Err(UpgradeError::Busy)));
        assert!(control.upgrading());
        // It ends (failed, say): the answer has nobody to go to.
        let failed = Err(UpgradeError::Refused("no new process".to_owned()));
        let UpgradeRequest { reply, running } = running;
        assert!(reply.send(failed).is_err());
        assert!(control.upgrading(), "until the server lets it go");
        drop(running);
        assert!(!control.upgrading());
        let next = control.clone();
        let asked = tokio::spawn(async move { next.upgrade().await });
        let request = upgrades
            .recv()
            .await
            .expect("the next one reaches the server");
        let done = Upgraded {
            pid: 7,
            generation: 1,
            connections: 0,
        };
        request.reply.send(Ok(done)).unwrap();
        assert_eq!(asked.await.unwrap().unwrap(), done);
    }
}
