//! Socket options for both legs of a splice, and listener setup.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::net::{TcpListener, TcpStream};

use crate::config::Keepalive;

/// Accept backlog for pool listeners.
const BACKLOG: i32 = 1024;

/// TCP_NODELAY, SO_KEEPALIVE with the configured timers and a matching
/// TCP_USER_TIMEOUT, so a dead peer is noticed whether the link is idle
/// (keepalive) or has unacknowledged data (user timeout).
pub fn tune(stream: &TcpStream, keepalive: &Keepalive) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let sock = SockRef::from(stream);
    let params = TcpKeepalive::new()
        .with_time(keepalive.idle)
        .with_interval(keepalive.interval)
        .with_retries(keepalive.count);
    sock.set_tcp_keepalive(&params)?;
    sock.set_tcp_user_timeout(Some(keepalive.user_timeout()))
}

/// Make the next close send a reset instead of a FIN, so an error on one
/// leg reaches the other peer as an error rather than a clean end.
pub fn reset_on_close(stream: &TcpStream) {
    // Best effort: the socket may already be gone, and then so is the peer.
    let _ = SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// Send FIN on `stream` while leaving its read side open (half-close).
pub fn shutdown_write(stream: &TcpStream) -> io::Result<()> {
    match SockRef::from(stream).shutdown(std::net::Shutdown::Write) {
        // The peer already went away; nothing is left to tell it.
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
        other => other,
    }
}

/// Bind a listener: SO_REUSEADDR, IPV6_V6ONLY on IPv6 so `[::]` and
/// `0.0.0.0` can be bound side by side, non-blocking.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_reuse_address(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(BACKLOG)?;
    TcpListener::from_std(sock.into())
}
