//! The handle operators' tools act through (admin endpoint, signals): the
//! current pools, status, manual quarantine and reload requests.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::registry::Pool;
use crate::status::Status;

/// A reload request: the answer is `Err(message)` when the new config was
/// rejected (the old one keeps running).
pub type ReloadRequest = oneshot::Sender<Result<(), String>>;

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
    /// The reason the new config was rejected, or that the server is stopping.
    pub async fn reload(&self) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.reload
            .send(tx)
            .await
            .map_err(|_| "server is shutting down".to_owned())?;
        rx.await.map_err(|_| "server is shutting down".to_owned())?
    }
}
