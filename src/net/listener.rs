//! The accept loop of one pool listener: accept, check the allow-list and
//! `max_connections`, spawn the session. Nothing here waits on a backend.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::net::SocketFlags;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::config::IpNet;
use crate::net::balance::Loops;
use crate::net::handover::HandoverQueue;
use crate::net::proxy_in;
use crate::net::reject_fold::{RejectLog, Rejected};
use crate::net::session;
use crate::net::sockopt;
use crate::pool::admission::Refusal;
use crate::pool::registry::Pool;

/// A listen address (a pool's or the admin endpoint's) could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("{owner}: bind {addr}")]
pub struct BindError {
    /// `pool NAME` or `admin`.
    pub owner: String,
    /// The address.
    pub addr: SocketAddr,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

impl BindError {
    pub(crate) fn new(
        owner: impl Into<String>,
        addr: SocketAddr,
        source: std::io::Error,
    ) -> BindError {
        BindError {
            owner: owner.into(),
            addr,
            source,
        }
    }

    /// Trying again will not help until the operator acts: the address is
    /// held by another process, or the port needs a privilege. (An address
    /// that is not on this host yet may appear: a VPN, a late interface.)
    pub fn is_lasting(&self) -> bool {
        matches!(
            self.source.kind(),
            std::io::ErrorKind::AddrInUse | std::io::ErrorKind::PermissionDenied
        )
    }
}

/// First pause after a resource error (EMFILE, ENFILE, ENOBUFS, ENOMEM).
const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest pause between accept attempts while resources stay exhausted.
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What the accept loop shares with the rest of the process.
#[derive(Debug, Clone)]
pub struct Shared {
    /// Source of per-process connection ids.
    pub conn_ids: Arc<AtomicU64>,
    /// Every spawned session, so shutdown can wait for them.
    pub tracker: TaskTracker,
    /// Client connections the descriptor limit allows, across all pools.
    pub slots: Arc<Semaphore>,
    /// Folds floods of `rejected` events.
    pub rejects: Arc<RejectLog>,
    /// Where sessions put their connections when a live upgrade takes them.
    pub handovers: HandoverQueue,
    /// The data workers' loops, so a busy one can pass a client on.
    pub loops: Loops,
}

/// A pool's listening socket, registered with one worker's event loop.
/// Clients are accepted from it unregistered: each joins the epoll set of
/// the loop that serves it, once (not this loop's first and then, handed
/// to a less busy loop, leave it and join that one).
pub type Listener = AsyncFd<std::net::TcpListener>;

/// Register `listener` (non-blocking) with the current worker's loop.
pub fn register(listener: std::net::TcpListener) -> io::Result<Listener> {
    // Deprecated because it takes any `AsRawFd`, whose descriptor its owner
    // might close while registered (tokio#8587). Here the `AsyncFd` owns
    // the listener: the descriptor lives exactly as long as the
    // registration, which is the condition the unsafe successor states.
    #[allow(deprecated)]
    AsyncFd::with_interest(listener, Interest::READABLE)
}

/// The next client: non-blocking, close-on-exec, in no epoll set yet.
async fn accept(listener: &Listener) -> io::Result<(std::net::TcpStream, SocketAddr)> {
    loop {
        let mut ready = listener.readable().await?;
        // `WouldBlock` clears the readiness and waits again.
        if let Ok(accepted) = ready.try_io(|l| {
            let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
            let (fd, peer) = rustix::net::acceptfrom_with(l.get_ref(), flags)?;
            let peer = peer
                .and_then(|a| SocketAddr::try_from(a).ok())
                .ok_or_else(|| io::Error::other("accepted a socket without an IP peer"))?;
            Ok((std::net::TcpStream::from(fd), peer))
        }) {
            return accepted;
        }
    }
}

/// An accepted client's socket: fresh from `accept` (in no epoll set), or
/// registered here already (its PROXY header was read on this loop).
enum Accepted {
    Fresh(std::net::TcpStream),
    Registered(TcpStream),
}

impl Accepted {
    /// For this worker's loop.
    fn here(self) -> io::Result<TcpStream> {
        match self {
            Accepted::Fresh(s) => TcpStream::from_std(s),
            Accepted::Registered(s) => Ok(s),
        }
    }

    /// For another worker's loop.
    fn for_elsewhere(self) -> io::Result<std::net::TcpStream> {
        match self {
            Accepted::Fresh(s) => Ok(s),
            Accepted::Registered(s) => s.into_std(),
        }
    }
}

/// Accept clients for `pool` on `listener` until `token` is cancelled (the
/// listener was removed, or the pool stopped). `me` is the worker (in
/// `shared.loops`) this loop runs on.
pub async fn accept_loop(
    listener: Listener,
    pool: Arc<Pool>,
    token: CancellationToken,
    shared: Shared,
    me: usize,
) {
    let local = listener.get_ref().local_addr().ok();
    // The socket options accepted clients inherit, as last set on the
    // listener (at bind, from the config then).
    let mut tuned = pool.config().keepalive;
    let mut backoff: Option<Duration> = None;
    let mut failures: u64 = 0;
    // One wait for the whole loop: each new one would join (and leave) the
    // token's waiter list, under its lock, twice per client.
    let cancelled = token.cancelled();
    tokio::pin!(cancelled);
    loop {
        // Out of descriptor budget: leave clients in the backlog until one
        // leaves, rather than accept and fail them.
        let slot = tokio::select! {
            () = &mut cancelled => return,
            s = shared.slots.clone().acquire_owned() => match s {
                Ok(slot) => slot,
                Err(_closed) => return,
            },
        };
        let accepted = tokio::select! {
            () = &mut cancelled => return,
            r = accept(&listener) => r,
        };
        match accepted {
            Ok((stream, peer)) => {
                if failures > 0 {
                    info!(pool = %pool.name, listen = ?local, failures, "accept_recovered");
                    failures = 0;
                }
                backoff = None;
                let keepalive = pool.config().keepalive;
                if tuned != keepalive {
                    // A reload changed the settings: this client was accepted
                    // with the old ones, so set its own too.
                    for result in [
                        sockopt::tune(listener.get_ref(), &keepalive),
                        sockopt::tune(&stream, &keepalive),
                    ] {
                        if let Err(err) = result {
                            debug!(pool = %pool.name, leg = "client", %err, "sockopt_failed");
                        }
                    }
                    tuned = keepalive;
                }
                let trusted = pool
                    .config()
                    .proxy_protocol
                    .as_ref()
                    .filter(|pp| pp.trusts(peer.ip()))
                    .map(|pp| pp.timeout);
                match trusted {
                    None => {
                        let client = Client::direct(peer);
                        admit(Accepted::Fresh(stream), client, &pool, &shared, slot, me);
                    }
                    // Its header is read in a task of its own: a slow sender
                    // holds up nobody else.
                    Some(timeout) => {
                        let (pool, shared2) = (pool.clone(), shared.clone());
                        let reading = pool.gate().reading_header();
                        shared.tracker.spawn(async move {
                            proxied(stream, peer, timeout, &pool, &shared2, slot, me).await;
                            drop(reading);
                        });
                    }
                }
            }
            // The client gave up before we got to it: nothing to do.
            Err(e) if is_per_connection(&e) => {
                debug!(pool = %pool.name, err = %e, "accept_aborted");
            }
            Err(e) => {
                failures += 1;
                let pause = backoff.map_or(BACKOFF_MIN, |b| (b * 2).min(BACKOFF_MAX));
                if backoff.is_none() {
                    // Once per episode; `accept_recovered` closes it with a count.
                    warn!(pool = %pool.name, listen = ?local, err = e.to_string().as_str(), "accept_failed");
                }
                backoff = Some(pause);
                tokio::select! {
                    () = &mut cancelled => return,
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}

/// Who a connection is from: its peer, or, behind a trusted PROXY header,
/// the client the header names (`via`: the header's sender).
#[derive(Debug, Clone, Copy)]
struct Client {
    addr: SocketAddr,
    via: Option<SocketAddr>,
}

impl Client {
    fn direct(peer: SocketAddr) -> Client {
        Client {
            addr: peer,
            via: None,
        }
    }
}

impl From<Client> for Rejected {
    fn from(c: Client) -> Rejected {
        Rejected {
            client: c.addr,
            via: c.via,
        }
    }
}

/// A connection from a trusted source (`proxy_protocol.from`): its PROXY
/// header names the client, within the pool's `timeout`, or it is closed
/// (`rejected`, `reason: proxy_protocol`).
async fn proxied(
    stream: std::net::TcpStream,
    peer: SocketAddr,
    timeout: Duration,
    pool: &Arc<Pool>,
    shared: &Shared,
    slot: OwnedSemaphorePermit,
    me: usize,
) {
    // Read here, on the loop that accepted it.
    let stream = match TcpStream::from_std(stream) {
        Ok(stream) => stream,
        Err(err) => {
            warn!(pool = %pool.name, client = %peer, err = %err, "handoff_failed");
            return;
        }
    };
    let header = tokio::select! {
        () = pool.token.cancelled() => return,
        h = proxy_in::read(&stream, timeout) => h,
    };
    match header {
        Ok(named) => {
            let client = Client {
                addr: named.unwrap_or(peer),
                via: Some(peer),
            };
            admit(Accepted::Registered(stream), client, pool, shared, slot, me);
        }
        Err(err) => {
            let conn = shared.conn_ids.fetch_add(1, Ordering::Relaxed);
            debug!(pool = %pool.name, conn, client = %peer, err = %err, "proxy_header_failed");
            let reason = Refusal::ProxyProtocol;
            pool.gate().count_rejected(reason);
            let (tracker, token) = (&shared.tracker, &pool.token);
            shared.rejects.rejected(
                &pool.name,
                reason,
                conn,
                Client::direct(peer).into(),
                tracker,
                token,
            );
        }
    }
}

fn admit(
    stream: Accepted,
    client: Client,
    pool: &Arc<Pool>,
    shared: &Shared,
    slot: OwnedSemaphorePermit,
    me: usize,
) {
    let peer = client.addr;
    let conn = shared.conn_ids.fetch_add(1, Ordering::Relaxed);
    let config = pool.config();
    let reject = |reason: Refusal| {
        pool.gate().count_rejected(reason);
        let (tracker, token) = (&shared.tracker, &pool.token);
        shared
            .rejects
            .rejected(&pool.name, reason, conn, client.into(), tracker, token);
    };
    if !allowed(&config.allow, peer) {
        reject(Refusal::AllowList);
        return;
    }
    let admission = match pool.gate().admit_from(peer.ip()) {
        Ok(admission) => admission,
        Err(refusal) => return reject(refusal),
    };
    debug!(
        pool = %pool.name, conn, client = %peer, via = client.via.map(tracing::field::display),
        "accepted"
    );
    let via = client.via.map(Box::new);
    if let Some(other) = shared.loops.elsewhere(me) {
        // This loop is clearly busier: the client is served on `other`.
        match stream.for_elsewhere() {
            Ok(client) => {
                let moved = session::serve_moved(
                    pool.clone(),
                    client,
                    peer,
                    via,
                    conn,
                    (admission, slot),
                    shared.handovers.clone(),
                );
                shared.tracker.spawn_on(moved, other);
            }
            Err(err) => {
                warn!(pool = %pool.name, conn, client = %peer, err = %err, "handoff_failed");
            }
        }
        return;
    }
    let stream = match stream.here() {
        Ok(stream) => stream,
        Err(err) => {
            warn!(pool = %pool.name, conn, client = %peer, err = %err, "handoff_failed");
            return;
        }
    };
    // Spawned directly: a wrapping future would enlarge every connection's task.
    shared.tracker.spawn(session::serve(
        pool.clone(),
        stream,
        peer,
        via,
        conn,
        (admission, slot),
        shared.handovers.clone(),
    ));
}

/// An empty allow-list admits everyone; IPv4-mapped IPv6 clients are matched
/// as the IPv4 address they are.
pub fn allowed(allow: &[IpNet], peer: SocketAddr) -> bool {
    let ip = peer.ip().to_canonical();
    allow.is_empty() || allow.iter().any(|net| net.contains(&ip))
}

fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_matches_v4_v6_and_mapped() {
        let allow: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap(), "::1/128".parse().unwrap()];
        let ok = |s: &str| allowed(&allow, s.parse().unwrap());
        assert!(ok("127.0.0.1:5"));
        assert!(ok("[::1]:5"));
        assert!(ok("[::ffff:127.0.0.1]:5"));
        assert!(!ok("127.0.0.2:5"));
        assert!(!ok("[::ffff:127.0.0.2]:5"));
        assert!(!ok("[::2]:5"));
        assert!(allowed(&[], "10.1.2.3:4".parse().unwrap()));
    }
}
