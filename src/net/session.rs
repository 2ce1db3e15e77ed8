//! One client connection's life: pick a backend, connect (failing over within
//! the same client connection), splice, and log one `closed` event.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::pool::close::{CloseReason, Closer};
use crate::net::connect::{self, ConnectError};
use crate::pool::registry::{Admission, BackendId, ConnEntry, ConnId, Lease, Pool, Target};
use crate::net::sockopt;
use crate::net::splice;

/// Serve one accepted client until it closes.
///
/// The client socket arrives tuned (the listener's options are inherited).
/// This is the connection's task, so what it holds across the splice is what
/// every idle connection costs: the connect phase runs boxed and is gone by
/// then.
pub fn serve(
    pool: Arc<Pool>,
    client: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    // Held for the connection's life: its place under `max_connections` and
    // in the process's descriptor budget.
    admission: (Admission, OwnedSemaphorePermit),
) -> impl Future<Output = ()> + Send + 'static {
    let started = Instant::now();
    let closer = Arc::new(Closer::new());
    // An `async move` block, not an `async fn`: the fn's larger future
    // would tip every connection's task into a larger allocation.
    async move {
        // Taken apart inside the statement, so no whole `Leg` stays in the
        // frame across the splice.
        let (lease, target, backend, idle_timeout) =
            match Box::pin(open(&pool, conn, peer, &closer, started)).await {
                Some(leg) => (leg.lease, leg.target, leg.backend, leg.idle_timeout),
                None => return,
            };
        let out = splice::splice(&client, &backend, &target.stats, idle_timeout, &closer).await;
        judge_ending(&pool, &target, &out, started);
        drop(lease);
        drop(admission);
        drop((backend, client));
        let err = out.error.as_ref().map(|e| e.to_string());
        info!(
            pool = %pool.name, backend = %target.config.name, conn, client = %peer,
            bytes_up = out.bytes_up, bytes_down = out.bytes_down,
            duration_ms = started.elapsed().as_millis() as u64,
            reason = out.reason.as_str(), err, "closed"
        );
    }
}

/// A backend that closes a client this soon after the connect, before
/// sending it a byte, refused the client.
const CLOSED_AT_ONCE: Duration = Duration::from_secs(2);

/// Tell the pool when the backend refused this client (closed it at once
/// with nothing sent), or served one after refusing others.
fn judge_ending(pool: &Pool, target: &Target, out: &splice::Outcome, started: Instant) {
    let by_backend = out.reason.by_backend();
    if by_backend && out.bytes_down == 0 && started.elapsed() < CLOSED_AT_ONCE {
        pool.record_closed_at_once(target.id, started);
    } else if out.bytes_down > 0 && target.stats.closing_at_once.load(Ordering::Relaxed) {
        pool.record_served(target.id);
    }
}

/// A connected backend leg, ready to splice.
struct Leg {
    lease: Lease,
    target: Target,
    backend: TcpStream,
    idle_timeout: Option<Duration>,
}

/// Connect the backend leg, or log the client's `closed` event and give up.
async fn open(
    pool: &Arc<Pool>,
    conn: ConnId,
    peer: SocketAddr,
    closer: &Arc<Closer>,
    started: Instant,
) -> Option<Leg> {
    let config = pool.config();
    let entry = ConnEntry {
        client: peer,
        started: SystemTime::now(),
        closer: closer.clone(),
    };
    let (lease, target, backend) =
        match connect_some(pool, conn, peer, &entry, config.connect_timeout).await {
            Ok(leg) => leg,
            Err(reason) => {
                info!(
                    pool = %pool.name, conn, client = %peer,
                    bytes_up = 0u64, bytes_down = 0u64,
                    duration_ms = started.elapsed().as_millis() as u64,
                    reason = reason.as_str(), "closed"
                );
                return None;
            }
        };
    if let Err(err) = sockopt::tune(&backend, &config.keepalive) {
        debug!(pool = %pool.name, conn, backend = %target.config.name, %err, "socket options on backend failed");
    }
    Some(Leg {
        lease,
        target,
        backend,
        idle_timeout: config.idle_timeout,
    })
}

/// Try candidates in selection order until one connects. Each backend is
/// tried at most once for this client. Fails, with the `closed` reason,
/// once every one failed (`no_backend`), when this process is out of
/// descriptors or memory (`local_resources`: not the backend's fault, not
/// counted against it), or when the connection was closed meanwhile.
async fn connect_some(
    pool: &Arc<Pool>,
    conn: ConnId,
    peer: SocketAddr,
    entry: &ConnEntry,
    timeout: Duration,
) -> Result<(Lease, Target, TcpStream), CloseReason> {
    let mut tried: Vec<BackendId> = Vec::new();
    loop {
        let (lease, target) = pool
            .reserve(conn, entry.clone(), &tried)
            .ok_or(CloseReason::NoBackend)?;
        tried.push(target.id);
        let attempt = Instant::now();
        let result = tokio::select! {
            r = connect::connect_avoiding(&target.config.addr, timeout, pool.own()) => r,
            () = entry.closer.closed() => return Err(entry.closer.reason()),
        };
        match result {
            Ok(stream) => {
                if pool.splice_if_wanted(target.id, target.usable, &entry.closer) {
                    pool.record_connect(target.id, attempt, true);
                    debug!(pool = %pool.name, backend = %target.config.name, conn, client = %peer, "connected");
                    return Ok((lease, target, stream));
                }
                // The backend went bad while we connected and a good one
                // exists: go there instead of landing on a drained node.
                debug!(pool = %pool.name, backend = %target.config.name, conn, "connect_superseded");
            }
            Err(ConnectError::SelfLoop { to, .. }) => {
                drop(lease);
                pool.record_self_loop(target.id, to);
            }
            Err(err) if err.is_local() => {
                log_failure(pool, &target, conn, peer, &err);
                return Err(CloseReason::LocalResources);
            }
            Err(err) => {
                drop(lease);
                pool.record_connect(target.id, attempt, false);
                log_failure(pool, &target, conn, peer, &err);
            }
        }
    }
}

fn log_failure(pool: &Pool, target: &Target, conn: ConnId, peer: SocketAddr, err: &ConnectError) {
    warn!(
        pool = %pool.name, backend = %target.config.name, conn, client = %peer,
        reason = err.kind(), err = err.to_string().as_str(), "connect_failed"
    );
}
