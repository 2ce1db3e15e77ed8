//! The data path: accept a client, choose its backend through the pool,
//! connect (with fail-over), splice bytes both ways until either side
//! closes, and tell the pool how it ended. Also the PROXY protocol header
//! a trusted balancer sends first, the socket options and the per-core
//! worker runtimes the connections live on.
//!
//! Layer: on `pool` and `config`. Probes and runtime use its `connect`,
//! `sockopt` and `workers`; it never uses them.

pub mod balance;
pub mod closed_log;
pub mod connect;
pub mod handover;
pub mod listener;
pub mod own;
pub mod pipe;
pub mod proxy_header;
pub mod proxy_in;
pub mod ready;
pub mod reject_fold;
pub mod session;
pub mod sockopt;
pub mod source;
pub mod splice;
pub mod workers;
