//! The pool: one per `pools:` entry. Its members and their health state,
//! the live connections on each, and the pure rules that decide what
//! happens to them: selection, health transitions, the lag reference,
//! drains, the rebalance plan, and the status snapshot everything else
//! reads.
//!
//! Layer: on `config` only. It does no I/O of its own: the data path,
//! probes and runtime call its methods and act on what they return.
//! Mutations go through `Pool` methods (`registry`, `apply`, `rebalance`);
//! readers take a snapshot (`status`).

pub mod apply;
pub mod close;
pub mod health;
pub mod lag;
pub mod own;
pub mod rebalance;
pub mod registry;
pub mod report;
pub mod select;
pub mod status;
