//! The pool: one per `pools:` entry. Its members and their health state,
//! the live connections on each, and the pure rules that decide what
//! happens to them: selection, health transitions, the lag reference,
//! drains, the rebalance plan, and the snapshot everything else reads.
//!
//! Layer: on `config` only. It does no I/O of its own: the data path,
//! probes and runtime call its methods and act on what they return.
//! `Pool` itself starts, reconfigures and stops; each role is a small
//! handle in the file that owns its state (`pool.gate()`, `legs()`,
//! `probing()`, `operator()`, `drains()`, `rebalance()`, `discovery()`,
//! `upgrade()`, `saved()`, `view()`, `connections()`). The backends' state is visible only
//! inside this folder, each part changed by its owner's methods
//! ([`backend`]); readers take a [`snapshot`](snapshot::PoolSnapshot)
//! (`/status` is built from one).
//! The health records leave and return as plain data through [`saved`]
//! (the state file, a live upgrade).

pub mod admission;
pub mod apply;
pub mod backend;
pub mod close;
pub mod connections;
pub mod discovered;
pub mod drain;
pub mod fold;
pub mod handed;
pub mod health;
pub mod lag;
pub mod lag_detail;
pub mod legs;
pub mod members;
pub mod node;
pub mod operator;
pub mod own;
pub mod rebalance;
pub mod refused;
pub mod registry;
pub mod report;
pub mod saved;
pub mod select;
pub mod shed;
pub mod snapshot;
pub mod stall;
pub mod tally;
