//! Operations: what an operator sees and does. The admin HTTP endpoint
//! (the status page at `/`, `/status`, `/metrics`, `/healthz`, manual
//! quarantine and release, reload, `/connections` with close and shed), the
//! Prometheus text, the control handle the endpoint and the signals share,
//! and the `status`/`quarantine`/`release`/`connections`/`close`/`shed`
//! commands of the CLI (`admin_cli`).
//!
//! Layer: reads pools through their snapshots and changes them only
//! through `Pool` methods; may use the data path's address checks. Reload
//! itself is carried out by the runtime, reached through `control`.

pub mod admin;
pub mod admin_cli;
pub mod connections;
pub mod control;
pub mod metrics;
/// The `/status` document, built from the pools' snapshots.
pub mod status;
