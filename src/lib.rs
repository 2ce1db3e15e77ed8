//! pin-proxy: a TCP pinning connection balancer for long-lived P2P clients.
//!
//! Module map:
//! - [`server`]: binds, starts each pool's tasks, serves, reloads, shuts down.
//! - [`reload`]: what a reload changes, worked out from the old and new
//!   config (pure).
//! - [`control`], [`admin`], [`notify`]: the operator's side: status, manual
//!   quarantine, reload, the admin HTTP endpoint, systemd notifications.
//! - [`config`]: config.yaml, parsed and validated once into typed values.
//! - [`listener`]: accept loop, allow-list, `max_connections`.
//! - [`reject_fold`]: folds floods of `rejected` events.
//! - [`session`]: one client: choose, connect with fail-over, splice, log.
//! - [`select`]: least-used choice (pure).
//! - [`self_loop`]: a backend that is the proxy itself.
//! - [`registry`]: per-pool backends, health, live connections, counters.
//! - [`close`]: why a connection closed, and closing one from outside.
//! - [`health`]: backend states, probe outcomes, quarantine reasons and the
//!   transitions between states (pure).
//! - [`lag`]: which heights count as the reference, who trails it (pure).
//! - [`apply`]: applies connect outcomes, probe reports and manual commands
//!   to a pool; drains.
//! - [`prober`]: probe scheduling, one task per distinct probe.
//! - [`rebalance`]: the rebalance tick.
//! - [`connect`], [`splice`], [`sockopt`]: the socket work.
//! - [`status`]: point-in-time views of the pools (`/status`).
//! - [`metrics`]: Prometheus text for `/metrics`.
//! - [`admin_cli`]: the `status`, `quarantine` and `release` commands.
//! - [`demo`]: `pin-proxy demo`.
//! - [`limits`]: the open-file limit at start-up.
//! - [`logging`]: tracing setup (JSON or text, stdout or daily file).
//! - [`probe`]: health probes, one kind per file.
//! - [`simnode`], [`simchain`]: a simulated P2P node for the demo and tests,
//!   and the regtest headers it proves its height with.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// No panic reachable from the network or the config: no unwrap/expect outside tests.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod admin;
pub mod admin_cli;
pub mod apply;
pub mod close;
pub mod config;
pub mod connect;
pub mod control;
pub mod demo;
pub mod health;
pub mod lag;
pub mod limits;
pub mod listener;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod probe;
pub mod prober;
pub mod rebalance;
pub mod registry;
pub mod reject_fold;
pub mod reload;
pub mod select;
pub mod self_loop;
pub mod server;
pub mod session;
pub mod simchain;
pub mod simnode;
pub mod sockopt;
pub mod splice;
pub mod status;
pub mod workers;

use std::future::Future;

pub use server::{BindError, Server};

/// Bind and serve `config` until `shutdown` resolves.
///
/// # Errors
/// When a listener cannot be bound.
pub async fn run(config: config::Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    Server::bind(config)?.run(shutdown).await;
    Ok(())
}
