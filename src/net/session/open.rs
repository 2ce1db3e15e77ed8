//! The connect phase of a client connection: candidates in selection
//! order, each tried once, until one connects; a node that refuses the
//! client's own address judged for that client alone, a self-loop, a
//! local shortage and a fall-back of the source address each told apart.
//! Runs boxed, so none of it stays in an idle connection's task.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::leg_source;
use crate::config::KeepaliveConfig;
use crate::net::closed_log::{self, Closed};
use crate::net::connect::{self, ConnectError, Connected, HandshakeAck};
use crate::net::ready;
use crate::net::sockopt;
use crate::net::source::Origin;
use crate::pool::close::{CloseReason, Closer};
use crate::pool::registry::{BackendId, ConnEntry, ConnId, Lease, Pool, Target};

/// A connected backend leg, ready to splice.
pub(super) struct Leg {
    pub(super) lease: Lease,
    pub(super) target: Target,
    pub(super) backend: Arc<TcpStream>,
    pub(super) idle_timeout: Option<Duration>,
    /// Set on the backend leg once it has lived a little (TCP_NODELAY is
    /// set at connect).
    pub(super) keepalive: KeepaliveConfig,
}

/// Connect the backend leg, or log the client's `closed` event and give up.
pub(super) async fn open(
    pool: &Arc<Pool>,
    client: &TcpStream,
    conn: ConnId,
    (peer, via): (SocketAddr, Option<SocketAddr>),
    closer: &Arc<Closer>,
    started: Instant,
) -> Option<Leg> {
    let config = pool.config();
    let entry = ConnEntry::new(peer, closer.clone()).via(via);
    let (lease, target, backend) = match connect_some(
        pool,
        client,
        conn,
        (peer, via),
        &entry,
        config.connect_timeout,
    )
    .await
    {
        Ok(leg) => leg,
        Err(reason) => {
            pool.legs().count_closed(None, reason);
            let closed = Closed {
                backend: None,
                conn,
                client: peer,
                via,
                bytes_up: 0,
                bytes_down: 0,
                duration: started.elapsed(),
                reason,
                err: None,
            };
            closed_log::closed(pool, closed);
            return None;
        }
    };
    if let Err(err) = sockopt::nodelay(&backend) {
        debug!(pool = %pool.name, conn, backend = %target.config.name, leg = "backend", %err, "sockopt_failed");
    }
    Some(Leg {
        lease,
        target,
        backend,
        idle_timeout: config.idle_timeout,
        keepalive: config.keepalive,
    })
}

/// Try candidates in selection order until one connects. Each backend is
/// tried at most once for this client. Fails, with the `closed` reason,
/// once every one failed (`no_backend`), when this process is out of
/// descriptors or memory (`local_resources`: not the backend's fault, not
/// counted against it), or when the connection was closed meanwhile.
async fn connect_some(
    pool: &Arc<Pool>,
    client: &TcpStream,
    conn: ConnId,
    (peer, via): (SocketAddr, Option<SocketAddr>),
    entry: &ConnEntry,
    timeout: Duration,
) -> Result<(Lease, Target, Arc<TcpStream>), CloseReason> {
    let mut tried: Vec<BackendId> = Vec::new();
    let origin = Origin::of(pool.config().source, peer.ip());
    // A client behind a PROXY header was read from before: what the loop
    // holds for it says nothing of bytes after the header.
    let ack = match via {
        None => HandshakeAck::WithFirstBytes,
        Some(_) => HandshakeAck::Now,
    };
    loop {
        let (lease, target) = pool
            .legs()
            .reserve(conn, entry.clone(), &tried)
            .ok_or(CloseReason::NoBackend)?;
        tried.push(target.id);
        let attempt = Instant::now();
        let result = tokio::select! {
            r = connect::connect_from(
                &target.config.addr, timeout, pool.own(), (origin, ack),
            ) => r,
            () = entry.closer.closed() => return Err(entry.closer.reason()),
        };
        match result {
            Ok(Connected { stream, fell_back }) => {
                if ack == HandshakeAck::WithFirstBytes {
                    release_ack_unless_spoken(pool, client, &stream, conn);
                }
                if fell_back {
                    source_fallback(pool, &target, conn, peer);
                }
                // Shared with the registry, which asks it for its local
                // address only when `/connections` shows it.
                let stream = Arc::new(stream);
                let leg = Some((conn, leg_source(&stream)));
                if pool
                    .legs()
                    .splice_if_wanted(target.id, target.usable, &entry.closer, leg)
                {
                    pool.legs().record_connect(target.id, attempt, true);
                    debug!(
                        pool = %pool.name, backend = %target.config.name, conn, client = %peer,
                        via = via.map(tracing::field::display), "connected"
                    );
                    return Ok((lease, target, stream));
                }
                // The backend went bad while we connected and a good one
                // exists: go there instead of landing on a drained node.
                debug!(pool = %pool.name, backend = %target.config.name, conn, "connect_superseded");
            }
            Err(ConnectError::SelfLoop { to, .. }) => {
                drop(lease);
                pool.legs().record_self_loop(target.id, to);
            }
            Err(err) if err.is_local() => {
                log_failure(pool, &target, conn, (peer, via), &err);
                return Err(CloseReason::LocalResources);
            }
            Err(err) => {
                drop(lease);
                match err.refused_client() {
                    // From the client's own address: the node may refuse
                    // that client alone, judged per client.
                    Some(client) => pool
                        .legs()
                        .record_closed_at_once(target.id, conn, attempt, client),
                    None => pool.legs().record_connect(target.id, attempt, false),
                }
                log_failure(pool, &target, conn, (peer, via), &err);
            }
        }
    }
}

/// The handshake's last ACK was held for the client's first bytes. A
/// client whose bytes (or FIN) the loop has already seen has them
/// forwarded at once, and they carry it; for any other the ACK leaves
/// now, so a node that speaks first is not kept waiting for the kernel's
/// 200 ms. (The loop has polled since the client was registered: the
/// connect waited for its event.)
fn release_ack_unless_spoken(pool: &Pool, client: &TcpStream, backend: &TcpStream, conn: ConnId) {
    let spoken = ready::seen(client, Interest::READABLE)
        .is_some_and(|r| r.is_readable() || r.is_read_closed());
    if !spoken && let Err(err) = sockopt::ack_now(backend) {
        debug!(pool = %pool.name, conn, leg = "backend", %err, "sockopt_failed");
    }
}

fn log_failure(
    pool: &Pool,
    target: &Target,
    conn: ConnId,
    (peer, via): (SocketAddr, Option<SocketAddr>),
    err: &ConnectError,
) {
    warn!(
        pool = %pool.name, backend = %target.config.name, conn, client = %peer,
        via = via.map(tracing::field::display),
        reason = err.kind().as_str(), err = err.to_string().as_str(), "connect_failed"
    );
}

/// The client and the backend are of different address families, so the
/// connection was made from the proxy's own address: counted, and logged
/// at each of the backend's first 16 such connections, then the 32nd,
/// 64th ... ([`fold::nth_logged`](crate::pool::fold::nth_logged)).
fn source_fallback(pool: &Pool, target: &Target, conn: ConnId, peer: SocketAddr) {
    let count = target
        .stats
        .source_fallbacks
        .fetch_add(1, Ordering::Relaxed)
        + 1;
    if crate::pool::fold::nth_logged(count) {
        info!(
            pool = %pool.name, backend = %target.config.name, conn, client = %peer,
            source = %pool.config().source, count, "source_fallback"
        );
    }
}
