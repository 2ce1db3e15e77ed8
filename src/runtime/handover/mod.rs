//! Live upgrade: hand every listener, every spliced connection and the
//! health state to a new process over a Unix socket, so no client notices.
//! `old_side` is the running process's side, `new_side` the new one's,
//! `protocol` what they say to each other, `wire` how.

pub mod new_side;
pub mod old_side;
pub mod protocol;
pub mod wire;

/// The environment variable that tells a new process where to find the
/// running one: the name of its rendezvous socket.
pub const ENV: &str = "PIN_PROXY_UPGRADE";

/// The new process's connection ids start this far above the old one's
/// next id: the old one still accepts (and numbers) clients until the new
/// one serves, and ids must stay unique and growing.
pub const CONN_ID_GAP: u64 = 1_000_000;
