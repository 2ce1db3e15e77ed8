//! The operator's commands on one backend: a manual quarantine for a
//! maintenance window, and its release.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::pool::backend::Backend;
use crate::pool::health::{Effect, QuarantineReason};
use crate::pool::registry::Pool;
use crate::pool::saved::kept;

/// A manual command named a backend the pool does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pool {pool} has no backend {backend}; it has {}", names(.known))]
pub struct UnknownBackend {
    /// The pool.
    pub pool: String,
    /// The name asked for.
    pub backend: String,
    /// The names it has, in config order.
    pub known: Vec<String>,
}

/// Names listed in an [`UnknownBackend`] error, at most this many.
const NAMES_SHOWN: usize = 20;

/// `a, b, c`, or the first [`NAMES_SHOWN`] and how many more.
fn names(known: &[String]) -> String {
    match known.len() {
        0 => "none".to_owned(),
        n if n <= NAMES_SHOWN => known.join(", "),
        n => format!(
            "{} and {} more",
            known[..NAMES_SHOWN].join(", "),
            n - NAMES_SHOWN
        ),
    }
}

/// The operator's commands on a pool's backends.
#[derive(Clone, Copy)]
pub struct Operator<'a> {
    pool: &'a Pool,
}

impl Pool {
    /// The operator's commands on this pool's backends.
    pub fn operator(&self) -> Operator<'_> {
        Operator { pool: self }
    }

    /// The backend named `name` of `backends`.
    pub(in crate::pool) fn by_name<'a>(
        &self,
        backends: &'a mut [Backend],
        name: &str,
    ) -> Result<&'a mut Backend, UnknownBackend> {
        let Some(i) = backends.iter().position(|b| b.config().name == name) else {
            return Err(UnknownBackend {
                pool: self.name.clone(),
                backend: name.to_owned(),
                known: backends.iter().map(|b| b.config().name.clone()).collect(),
            });
        };
        Ok(&mut backends[i])
    }
}

impl Operator<'_> {
    /// Put the backend named `name` into maintenance for exactly `window`.
    /// Returns how many of its connections the last-leg rule keeps: when
    /// no other backend of the pool is usable they stay (logged as
    /// `last_leg_kept`) and are drained once one is; 0 when they drain now
    /// (or it has none).
    ///
    /// # Errors
    /// When the pool has no such backend.
    pub fn quarantine(&self, name: &str, window: Duration) -> Result<usize, UnknownBackend> {
        let config = self.pool.config();
        let mut backends = self.pool.backends();
        let b = self.pool.by_name(&mut backends.active, name)?;
        let before = kept(b.health());
        b.health_mut().quarantine_manual(window, Instant::now());
        self.pool.note(before, b.health());
        self.pool.report(
            b,
            Effect::Quarantined {
                reason: QuarantineReason::Manual,
                window,
            },
        );
        self.pool.drain(&mut backends, &config);
        let kept = backends.last_leg_kept(&config, name);
        if kept > 0 {
            warn!(
                pool = %self.pool.name, backend = name, connections = kept,
                "last_leg_kept"
            );
        }
        Ok(kept)
    }

    /// End the backend's quarantine window now; it returns once `rise`
    /// probes pass. `Ok(false)` when it was not quarantined (nothing changes).
    ///
    /// # Errors
    /// When the pool has no such backend.
    pub fn release(&self, name: &str) -> Result<bool, UnknownBackend> {
        let mut backends = self.pool.backends();
        let b = self.pool.by_name(&mut backends.active, name)?;
        let before = kept(b.health());
        let ended = b.health_mut().release(Instant::now());
        self.pool.note(before, b.health());
        if ended {
            info!(pool = %self.pool.name, backend = %b.config().name, "release_requested");
        }
        Ok(ended)
    }
}
