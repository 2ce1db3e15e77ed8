//! The socket and name work behind "is this backend ourselves?": whether an
//! IP is one of the host's own (a test bind, `config::local`), and what a
//! backend's name resolves to. The pool keeps the listen addresses and the
//! cached answers (`pool::own`).

use std::net::SocketAddr;

use crate::config::local::is_local_ip;
use crate::pool::own::OwnListeners;

/// The listener of ours that a connect to `to` would reach, if any.
pub fn reached_by(own: &OwnListeners, to: SocketAddr) -> Option<SocketAddr> {
    own.reached_by(to, is_local_ip)
}

/// The listener of ours that `addr` (`host:port`) resolves to, if any.
/// Resolves only when the port is one of ours, so probes of remote nodes
/// cost nothing more.
pub async fn reached_by_name(own: &OwnListeners, addr: &str) -> Option<SocketAddr> {
    let port: u16 = addr.rsplit_once(':')?.1.parse().ok()?;
    if !own.holds_port(port) {
        return None;
    }
    let resolved = tokio::net::lookup_host(addr).await.ok()?;
    resolved.into_iter().find_map(|sa| reached_by(own, sa))
}
