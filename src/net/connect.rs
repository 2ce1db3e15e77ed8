//! Connect to a backend: resolve its name afresh, try each address, all
//! within one `connect_timeout` budget.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rustix::io::Errno;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::net::sockopt;
use crate::net::source::Origin;
use crate::pool::own::OwnListeners;

/// Why a backend connect failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The name did not resolve (or resolved to nothing).
    #[error("resolve {addr}: {source}")]
    Resolve {
        /// The backend address.
        addr: String,
        /// The resolver's error.
        source: io::Error,
    },
    /// Every resolved address refused or failed.
    #[error("connect to {addr}: {source}")]
    Connect {
        /// The backend address.
        addr: String,
        /// The last address's error.
        source: io::Error,
        /// The last attempt was made from this client's own address
        /// (`source: client`): the node may have refused that client only.
        client: Option<IpAddr>,
    },
    /// The name resolves to one of this process's own listeners.
    #[error(
        "connect to {addr}: {to} is a listener of this proxy (a backend must not be the proxy itself)"
    )]
    SelfLoop {
        /// The backend address.
        addr: String,
        /// Our listener it would reach.
        to: SocketAddr,
    },
    /// The local end could not be set up as `source` asks (the
    /// capability, the address): this host's matter, not the backend's.
    #[error("connect to {addr} from {from}: {source}")]
    Source {
        /// The backend address.
        addr: String,
        /// The address it would have been made from.
        from: std::net::IpAddr,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The budget ran out.
    #[error("connect to {addr}: timed out after {timeout:?}")]
    Timeout {
        /// The backend address.
        addr: String,
        /// The budget.
        timeout: Duration,
        /// The attempt that ran out was made from this client's own
        /// address (`source: client`).
        client: Option<IpAddr>,
    },
}

/// Why a connect failed, as logs (`connect_failed`'s `reason`) and the
/// connect probe's detail name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    /// The name did not resolve.
    Resolve,
    /// The node refused the connection.
    Refused,
    /// This process ran out of descriptors, memory or local ports.
    LocalResources,
    /// The local end `source` asks for could not be set up.
    Source,
    /// Another error of the connect.
    Error,
    /// No answer within the connect timeout.
    Timeout,
    /// The address is one of this proxy's own listeners.
    SelfLoop,
}

impl FailKind {
    /// The name in logs and probe details.
    pub fn as_str(self) -> &'static str {
        match self {
            FailKind::Resolve => "resolve",
            FailKind::Refused => "refused",
            FailKind::LocalResources => "local_resources",
            FailKind::Source => "source",
            FailKind::Error => "error",
            FailKind::Timeout => "timeout",
            FailKind::SelfLoop => "self_loop",
        }
    }
}

impl ConnectError {
    /// Why it failed.
    pub fn kind(&self) -> FailKind {
        match self {
            ConnectError::Resolve { .. } => FailKind::Resolve,
            ConnectError::Connect { source, .. }
                if source.kind() == io::ErrorKind::ConnectionRefused =>
            {
                FailKind::Refused
            }
            ConnectError::Connect { .. } if self.is_local() => FailKind::LocalResources,
            ConnectError::Connect { .. } => FailKind::Error,
            ConnectError::Timeout { .. } => FailKind::Timeout,
            ConnectError::Source { .. } => FailKind::Source,
            ConnectError::SelfLoop { .. } => FailKind::SelfLoop,
        }
    }
}

impl ConnectError {
    /// The client whose own address a refused or unanswered connect was
    /// made from (`source: client`): the node's refusal may be of that
    /// client alone, so it is judged per client, as a close at once is.
    pub fn refused_client(&self) -> Option<IpAddr> {
        match self {
            ConnectError::Connect { client, .. } if self.kind() == FailKind::Refused => *client,
            ConnectError::Timeout { client, .. } => *client,
            _ => None,
        }
    }

    /// This process ran out of descriptors or memory, or cannot connect
    /// from its `source`: says nothing about the backend.
    pub fn is_local(&self) -> bool {
        let source = match self {
            ConnectError::Connect { source, .. } => source,
            ConnectError::Source { .. } => return true,
            _ => return false,
        };
        // ADDRNOTAVAIL: out of ephemeral ports, another local resource.
        let local = [
            Errno::MFILE,
            Errno::NFILE,
            Errno::NOBUFS,
            Errno::NOMEM,
            Errno::ADDRNOTAVAIL,
        ];
        source
            .raw_os_error()
            .is_some_and(|code| local.iter().any(|e| e.raw_os_error() == code))
    }
}

/// Resolve `addr` (`host:port`) now, so a node that changed address is
/// followed, and connect to the first address that answers.
///
/// The budget is a deadline, and its timer is armed only when a step has
/// to wait: a literal address resolves at once, and a backend on loopback
/// or a LAN has finished the handshake after one turn of the event loop.
/// (A timer armed per connection costs a wake-up of the loop's own poll
/// to take the new deadline into account.)
///
/// # Errors
/// A [`ConnectError`] saying which step failed.
pub async fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, ConnectError> {
    dial(addr, timeout, None, (Origin::Proxy, HandshakeAck::Now))
        .await
        .map(|c| c.stream)
}

/// When the last ACK of the handshake leaves for the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeAck {
    /// At once, as the kernel sends it by default.
    Now,
    /// With the first bytes sent to the node (`TCP_QUICKACK` off before
    /// connecting, as HAProxy's `option tcp-smart-connect`): the node
    /// gets the client's first bytes in the segment that completes its
    /// handshake, and a short exchange takes two segments fewer (the
    /// handshake's ACK, and the ACK of the node's answer, which then rides
    /// with what follows). Whoever connects this
    /// way must send at once, or release the ACK with
    /// [`sockopt::ack_now`](crate::net::sockopt::ack_now): held, the
    /// kernel sends it only after 200 ms, and a node that speaks first
    /// would wait that long to see the connection.
    WithFirstBytes,
}

/// A backend connection made for a client.
#[derive(Debug)]
pub struct Connected {
    /// The connected socket.
    pub stream: TcpStream,
    /// It was made from the proxy's own address, not the origin asked
    /// for: the client and the backend are of different address families.
    pub fell_back: bool,
}

/// As [`connect`], from `origin`, never dialling one of `own` listeners:
/// an address that would reach one is skipped, and when no other address
/// connects the error is [`ConnectError::SelfLoop`].
///
/// # Errors
/// A [`ConnectError`] saying which step failed.
pub async fn connect_from(
    addr: &str,
    timeout: Duration,
    own: &OwnListeners,
    (origin, ack): (Origin, HandshakeAck),
) -> Result<Connected, ConnectError> {
    dial(addr, timeout, Some(own), (origin, ack)).await
}

async fn dial(
    addr: &str,
    timeout: Duration,
    own: Option<&OwnListeners>,
    (origin, ack): (Origin, HandshakeAck),
) -> Result<Connected, ConnectError> {
    let deadline = Instant::now() + timeout;
    let timed_out = |client| ConnectError::Timeout {
        addr: addr.to_owned(),
        timeout,
        client,
    };
    let resolve_err = |source| ConnectError::Resolve {
        addr: addr.to_owned(),
        source,
    };
    let addrs = tokio::time::timeout_at(deadline, tokio::net::lookup_host(addr))
        .await
        .map_err(|_elapsed| timed_out(None))?
        .map_err(resolve_err)?;
    let mut last = None;
    let mut ours = None;
    let mut client = None;
    for sa in addrs {
        if let Some(to) = own.and_then(|o| crate::net::own::reached_by(o, sa)) {
            ours = Some(to);
            continue;
        }
        client = origin.transparent_for(sa);
        match connect_addr(sa, deadline, (origin, ack)).await {
            Ok(connected) => return Ok(connected),
            Err(AddrFailure::Source(source)) => {
                return Err(ConnectError::Source {
                    addr: addr.to_owned(),
                    from: origin.bind_for(sa).ok().flatten().unwrap_or(sa.ip()),
                    source,
                });
            }
            Err(AddrFailure::Failed(e)) => last = Some(e),
            Err(AddrFailure::TimedOut) => return Err(timed_out(client)),
        }
    }
    if let Some(to) = ours {
        return Err(ConnectError::SelfLoop {
            addr: addr.to_owned(),
            to,
        });
    }
    Err(match last {
        Some(source) => ConnectError::Connect {
            addr: addr.to_owned(),
            source,
            client,
        },
        None => resolve_err(io::Error::new(
            io::ErrorKind::NotFound,
            "no addresses found",
        )),
    })
}

/// How connecting to one address ended, short of success.
enum AddrFailure {
    Failed(io::Error),
    /// Setting up the local end failed.
    Source(io::Error),
    TimedOut,
}

impl From<io::Error> for AddrFailure {
    fn from(e: io::Error) -> AddrFailure {
        AddrFailure::Failed(e)
    }
}

/// A non-blocking connect to `sa`, done by `deadline`.
///
/// Success is read from the readiness the event loop reports (writable,
/// neither error nor hang-up), as HAProxy does; `SO_ERROR` is fetched only
/// when the event says the connect failed. That saves a syscall per
/// backend leg.
async fn connect_addr(
    sa: SocketAddr,
    deadline: Instant,
    (origin, ack): (Origin, HandshakeAck),
) -> Result<Connected, AddrFailure> {
    let socket = Socket::new(
        Domain::for_address(sa),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    let fell_back = !origin.prepare(&socket, sa).map_err(AddrFailure::Source)?;
    if ack == HandshakeAck::WithFirstBytes {
        // Best effort: where it fails the ACK simply leaves at once.
        let _ = sockopt::hold_handshake_ack(&socket);
    }
    match socket.connect(&sa.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(Errno::INPROGRESS.raw_os_error()) => {}
        Err(e) => return Err(AddrFailure::Failed(e)),
    }
    let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
    // Let the loop poll once before any timer is armed: see `connect`.
    tokio::task::yield_now().await;
    let ready = tokio::time::timeout_at(deadline, stream.ready(Interest::WRITABLE))
        .await
        .map_err(|_elapsed| AddrFailure::TimedOut)??;
    if (ready.is_write_closed() || ready.is_error())
        && let Some(e) = stream.take_error()?
    {
        return Err(AddrFailure::Failed(e));
    }
    Ok(Connected { stream, fell_back })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connects_and_reports_refusal_from_the_event_alone() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stream = connect(&addr.to_string(), Duration::from_secs(5))
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert_eq!(stream.local_addr().unwrap(), accepted.peer_addr().unwrap());

        drop(listener);
        let err = connect(&addr.to_string(), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), FailKind::Refused, "{err}");
    }

    #[tokio::test]
    async fn connects_by_name() {
        // The resolver's path (a literal address never waits on it), under
        // the same deadline.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stream = connect(&format!("localhost:{port}"), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(stream.peer_addr().unwrap().ip().is_loopback());
    }

    /// Held for the first bytes, the handshake is not complete at the
    /// node (nothing to accept) until they are sent, and then they arrive
    /// with it.
    #[tokio::test]
    async fn a_held_ack_leaves_with_the_first_bytes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let own = OwnListeners::default();
        let held = (Origin::Proxy, HandshakeAck::WithFirstBytes);
        let c = connect_from(&addr, Duration::from_secs(5), &own, held)
            .await
            .unwrap();
        // Still SYN_RECV at the node: the kernel's own timer would send
        // the ACK only after 200 ms.
        let err = listener.accept().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        c.stream.try_write(b"first").unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        accepted.readable().await.unwrap();
        let mut got = [0u8; 8];
        assert_eq!(accepted.try_read(&mut got).unwrap(), 5);
    }
}
