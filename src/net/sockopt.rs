//! Socket options for both legs of a splice, and listener setup.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::net::TcpStream;

use crate::config::KeepaliveConfig;

/// Accept backlog for pool listeners.
const BACKLOG: i32 = 1024;

/// TCP_NODELAY, SO_KEEPALIVE with the configured timers and a matching
/// TCP_USER_TIMEOUT, so a dead peer is noticed whether the link is idle
/// (keepalive) or has unacknowledged data (user timeout).
///
/// On a listening socket these are inherited by every accepted socket
/// (Linux copies them at accept), so a client socket needs no setsockopt.
pub fn tune(socket: &impl AsFd, keepalive: &KeepaliveConfig) -> io::Result<()> {
    nodelay(socket)?;
    keep_alive(socket, keepalive)
}

/// TCP_NODELAY alone: what a backend leg gets at connect. The rest of
/// [`tune`] follows once the connection has lived [`keep_alive_after`]
/// (a connection that ends sooner never needed it).
pub fn nodelay(socket: &impl AsFd) -> io::Result<()> {
    SockRef::from(socket).set_tcp_nodelay(true)
}

/// `TCP_QUICKACK` off on a socket about to connect: the kernel holds the
/// handshake's last ACK so that it leaves with the first bytes written
/// (Linux keeps it at most 200 ms): one segment less to the node.
pub fn hold_handshake_ack(socket: &impl AsFd) -> io::Result<()> {
    SockRef::from(socket).set_tcp_quickack(false)
}

/// `TCP_QUICKACK` off on a pool listener: every client it accepts starts
/// with its ACKs delayed (Linux copies the listener's delayed-ACK mode at
/// accept), so the ACK of a client's first bytes leaves with the node's
/// answer instead of on its own: one segment less to the client. The
/// kernel would delay ACKs anyway once the connection has answered once;
/// this starts there. An answer that takes longer than the delayed-ACK
/// timer (40 ms) finds the ACK sent already, as without it.
pub fn hold_request_ack(listener: &impl AsFd) -> io::Result<()> {
    SockRef::from(listener).set_tcp_quickack(false)
}

/// `TCP_QUICKACK` on: an ACK the kernel holds leaves now. What a backend
/// leg connected with [`hold_handshake_ack`] gets when its client has
/// sent nothing yet, so a node that speaks first sees the connection at
/// once.
pub fn ack_now(socket: &impl AsFd) -> io::Result<()> {
    SockRef::from(socket).set_tcp_quickack(true)
}

/// SO_KEEPALIVE with the configured timers, and TCP_USER_TIMEOUT.
///
/// Set late, they still count from the connection's last activity: the
/// kernel re-arms the keepalive timer when TCP_KEEPIDLE is set (after
/// SO_KEEPALIVE, as here) for `idle` after the last segment received, and
/// the user timeout runs from the first unacknowledged retransmission.
/// So a connection tuned within `idle` of its start is probed, and given
/// up, exactly when one tuned at connect would be.
pub fn keep_alive(socket: &impl AsFd, keepalive: &KeepaliveConfig) -> io::Result<()> {
    let sock = SockRef::from(socket);
    let params = TcpKeepalive::new()
        .with_time(keepalive.idle)
        .with_interval(keepalive.interval)
        .with_retries(keepalive.count);
    sock.set_tcp_keepalive(&params)?;
    sock.set_tcp_user_timeout(Some(keepalive.user_timeout()))
}

/// The longest a backend leg waits for [`keep_alive`].
pub const KEEP_ALIVE_AFTER: Duration = Duration::from_secs(1);

/// How long after connecting a backend leg gets [`keep_alive`]: a
/// second, or half of `idle` or of the pool's `idle_timeout` when either
/// is shorter, so it is always set well before the first probe would be
/// due, and on every connection that can sit idle at all.
pub fn keep_alive_after(keepalive: &KeepaliveConfig, idle_timeout: Option<Duration>) -> Duration {
    let after = KEEP_ALIVE_AFTER.min(keepalive.idle / 2);
    idle_timeout.map_or(after, |t| after.min(t / 2))
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

/// Fail with `AddrInUse` if something already listens on `addr`, even a
/// group of `SO_REUSEPORT` sockets (another pin-proxy): those would let a
/// second group join silently and share the clients. Binds without
/// listening, so no client can land here, then lets go.
pub fn check_free(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into())
}

/// Bind a listener, not yet registered with any runtime: SO_REUSEADDR,
/// IPV6_V6ONLY on IPv6 so `[::]` and `0.0.0.0` can be bound side by side,
/// non-blocking. With `keepalive` (a pool's listener), [`tune`]d before
/// it listens and set to [`hold_request_ack`] once it does, so every
/// client it accepts starts so. With `reuse_port`, one of a group of
/// sockets on the same address (`SO_REUSEPORT`: the kernel spreads clients
/// across them).
pub fn bind_std(
    addr: SocketAddr,
    keepalive: Option<&KeepaliveConfig>,
    reuse_port: bool,
) -> io::Result<std::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_reuse_address(true)?;
    if reuse_port {
        sock.set_reuse_port(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    if let Some(keepalive) = keepalive {
        tune(&sock, keepalive)?;
    }
    sock.listen(BACKLOG)?;
    if keepalive.is_some() {
        // After `listen`, which resets the delayed-ACK state.
        hold_request_ack(&sock)?;
    }
    Ok(sock.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(
        addr: SocketAddr,
        keepalive: Option<&KeepaliveConfig>,
    ) -> io::Result<tokio::net::TcpListener> {
        tokio::net::TcpListener::from_std(bind_std(addr, keepalive, false)?)
    }

    /// The client leg is never tuned on its own: this is what makes that
    /// safe. Every option `tune` sets must reach an accepted socket.
    #[tokio::test]
    async fn accepted_sockets_inherit_the_listeners_options() {
        let keepalive = KeepaliveConfig {
            idle: Duration::from_secs(37),
            interval: Duration::from_secs(7),
            count: 3,
        };
        let listener = bind("127.0.0.1:0".parse().unwrap(), Some(&keepalive)).unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let sock = SockRef::from(&accepted);
        assert!(sock.tcp_nodelay().unwrap(), "TCP_NODELAY");
        assert!(sock.keepalive().unwrap(), "SO_KEEPALIVE");
        assert_eq!(sock.tcp_keepalive_time().unwrap(), keepalive.idle);
        assert_eq!(sock.tcp_keepalive_interval().unwrap(), keepalive.interval);
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), keepalive.count);
        assert_eq!(
            sock.tcp_user_timeout().unwrap(),
            Some(keepalive.user_timeout())
        );
        // And a listener bound without settings passes on none of them.
        let plain = bind("127.0.0.1:0".parse().unwrap(), None).unwrap();
        let _client = TcpStream::connect(plain.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = plain.accept().await.unwrap();
        let sock = SockRef::from(&accepted);
        assert!(!sock.tcp_nodelay().unwrap());
        assert!(!sock.keepalive().unwrap());
    }

    /// A pool listener's clients start with their ACKs delayed, so the
    /// ACK of a client's first bytes can leave with the answer; the kernel
    /// reports that mode as `TCP_QUICKACK` off. Other listeners (the admin
    /// endpoint's) keep the kernel's default.
    #[tokio::test]
    async fn pool_listeners_pass_delayed_acks_on_to_their_clients() {
        let keepalive = KeepaliveConfig {
            idle: Duration::from_secs(30),
            interval: Duration::from_secs(10),
            count: 3,
        };
        for (settings, delayed) in [(Some(&keepalive), true), (None, false)] {
            let listener = bind("127.0.0.1:0".parse().unwrap(), settings).unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (accepted, _) = listener.accept().await.unwrap();
            assert_eq!(
                SockRef::from(&accepted).tcp_quickack().unwrap(),
                !delayed,
                "pool listener: {}",
                settings.is_some()
            );
            // And the bytes still flow both ways.
            tokio::io::AsyncWriteExt::write_all(&mut client, b"ask")
                .await
                .unwrap();
            accepted.readable().await.unwrap();
            let mut got = [0u8; 8];
            assert_eq!(accepted.try_read(&mut got).unwrap(), 3);
        }
    }

    /// A second instance must not join the first one's `SO_REUSEPORT`
    /// group and share its clients: the check refuses the address.
    #[tokio::test]
    async fn a_reuse_port_group_is_not_joined_by_a_second_one() {
        let first = bind_std("127.0.0.1:0".parse().unwrap(), None, true).unwrap();
        let taken = first.local_addr().unwrap();
        let err = check_free(taken).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
        // Without the check the kernel would have let it in.
        assert!(bind_std(taken, None, true).is_ok());
        drop(first);
        let free = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap()
        };
        check_free(free).unwrap();
    }
}
