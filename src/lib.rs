//! pin-proxy: a TCP pinning connection balancer for long-lived P2P clients.
//!
//! Layers, each a folder whose `mod.rs` says what it owns and may use.
//! Uses point down this list only:
//! - [`sim`]: the simulated node and `pin-proxy demo` (cargo feature `sim`).
//! - [`runtime`]: the process: bind, start, reload by plan, shut down;
//!   logging, limits, systemd.
//! - [`ops`]: the admin endpoint, metrics, control, the admin CLI commands.
//! - [`probe`]: health probes and their scheduler.
//! - [`net`]: the data path: accept, connect, splice, socket options,
//!   per-core workers.
//! - [`pool`]: membership, health state, live connections, selection, the
//!   rebalance plan, status snapshots (state and pure rules, no I/O).
//! - [`config`]: config.yaml, parsed and validated once into typed values.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// No panic reachable from the network or the config: no unwrap/expect outside tests.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod config;
#[cfg(feature = "sim")]
pub mod sim;

// The layers between are the crate's own. The `internals` feature opens
// them to bench/loadgen's micro-benchmarks; it is not an API. Each is
// declared twice, not by a macro, so that rustfmt follows every module.
#[cfg(feature = "internals")]
pub mod net;
#[cfg(not(feature = "internals"))]
mod net;
#[cfg(feature = "internals")]
pub mod ops;
#[cfg(not(feature = "internals"))]
mod ops;
#[cfg(feature = "internals")]
pub mod pool;
#[cfg(not(feature = "internals"))]
mod pool;
#[cfg(feature = "internals")]
pub mod probe;
#[cfg(not(feature = "internals"))]
mod probe;
#[cfg(feature = "internals")]
pub mod runtime;
#[cfg(not(feature = "internals"))]
mod runtime;

pub mod inspect;
#[cfg(test)]
mod layers_tests;
pub use ops::admin_cli;
pub use ops::control::{Control, ReloadError, UpgradeError, Upgraded};
pub use runtime::{limits, logging};

use std::future::Future;

pub use net::listener::BindError;
pub use net::source::SourceError;
pub use runtime::server::{Server, Takeover};

/// Bind and serve `config` until `shutdown` resolves.
///
/// # Errors
/// When a listener cannot be bound.
pub async fn run(config: config::Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    Server::bind(config)?.run(shutdown).await;
    Ok(())
}
