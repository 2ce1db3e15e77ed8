//! Tests against the built `pin-proxy` binary and its CLI, one module per
//! subject: `cargo test --test e2e splice::`.

#[path = "../support/faults.rs"]
mod faults_support;
#[path = "../support/mod.rs"]
mod support;

mod admin;
mod balance;
mod check;
mod check_files;
mod closed_fold;
mod completions;
mod deb;
mod demo;
mod deploy;
mod discovery;
mod docs;
mod faults;
mod faults_soak;
mod fuzz_corpus;
mod harness_imports;
mod health;
mod lifecycle;
mod man_page;
mod monitoring;
mod rejected_fold;
mod reload;
mod reload_changes;
mod secrets;
mod self_loop;
mod source;
mod splice;
mod spread;
mod stall;
mod stall_rule;
mod state;
mod trace;
mod upgrade;
