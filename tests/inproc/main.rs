//! Tests that run a `pin_proxy::Server` in the test's own runtime (through
//! `support::inproc`), one module per subject: `cargo test --test inproc
//! health_inproc::`.

#[path = "../support/mod.rs"]
mod support;

mod bind;
mod health_inproc;
mod snapshot_inproc;
