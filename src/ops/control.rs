//! The handle operators' tools act through (admin endpoint, signals): the
//! current pools, status, manual quarantine and reload requests.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::net::listener::BindError;
use crate::config::ConfigError;
use crate::pool::registry::Pool;
use crate::pool::status::Status;

/// A reload request: the answer is an error when the reload was refused
/// (the old config keeps running).
pub type ReloadRequest = oneshot::Sender<Result<(), ReloadError>>;

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
    /// The server is stopping and applies no more reloads.
    #[error("server is shutting down")]
    ShuttingDown,
}

/// Shared, cheap to clone.
#[derive(Clone)]
pub struct Control {
    pools: Arc<ArcSwap<Vec<Arc<Pool>>>>,
    reload: mpsc::Sender<ReloadRequest>,
    started: Instant,
}

impl Control {
    /// A handle over `pools`; reload requests go to `reload`.
    pub fn new(pools: Vec<Arc<Pool>>, reload: mpsc::Sender<ReloadRequest>) -> Control {
        Control {
            pools: Arc::new(ArcSwap::from_pointee(pools)),
            reload,
            started: Instant::now(),
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
            uptime_s: self.started.elapsed().as_secs(),
            pools: self.pools().iter().map(|p| p.status()).collect(),
        }
    }

    /// Re-read the config file and apply it; waits for the outcome.
    ///
    /// # Errors
    /// Why the new config was refused, or that the server is stopping.
    pub async fn reload(&self) -> Result<(), ReloadError> {
        let (tx, rx) = oneshot::channel();
        self.reload
            .send(tx)
            .await
            .map_err(|_| ReloadError::ShuttingDown)?;
        rx.await.map_err(|_| ReloadError::ShuttingDown)?
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
}
