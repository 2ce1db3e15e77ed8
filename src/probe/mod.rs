//! Probes: one kind per file, each producing a [`Report`], and the
//! scheduler (`prober`) that runs them and hands reports to the pool.
//!
//! Layer: on the pool (reports, the questions it asks such as
//! `Pool::needs_proof`) and the data path's `connect`; never on operations
//! or runtime.

pub mod agreed;
pub mod chain;
pub mod electrum;
pub mod electrum_headers;
pub mod headers;
pub mod http;
pub mod p2p;
pub mod pow;
pub mod prober;
pub mod tls;
pub mod wire;
pub mod work;

/// Why a probe failed after its connect: what the node or server did.
#[derive(Debug)]
pub enum Failure {
    /// It closed or reset the connection before answering: it refuses us.
    Closed(String),
    /// It answered something we do not understand, an error, or nothing
    /// in time.
    Garbled(String),
}
