//! The simulator: a P2P node that answers the version handshake and
//! serves mined regtest headers (`simnode`, `simchain`), and
//! `pin-proxy demo`, which runs the real server against a few of them.
//!
//! Layer: on top of everything; nothing in the proxy uses it. Built with
//! the `sim` cargo feature (on by default).

pub mod demo;
pub mod simchain;
pub mod simnode;
