//! Runtime: the process. Binds every pool's listeners, starts the tasks
//! (accept loops, probes, rebalance ticks, the admin endpoint), reloads by
//! plan, shuts down gracefully; logging, the open-file limit and systemd
//! notifications; the state file that keeps health across restarts.
//!
//! Layer: on everything below it (config, pool, data path, probes,
//! operations); nothing below uses it.

pub mod discover;
pub mod drain;
pub mod handover;
pub mod limits;
mod log_lists;
mod log_text;
mod logfile;
pub mod logging;
pub mod notify;
mod pid_file;
pub mod rebalance;
pub mod reload;
pub mod server;
pub mod state_file;
