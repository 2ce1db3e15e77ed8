//! One client connection's life: pick a backend, connect (failing over within
//! the same client connection: `session/open.rs`), splice, and log one
//! `closed` event, or hand the connection to a live upgrade.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::warn;

use crate::net::closed_log::{self, Closed};
use crate::net::handover::{ConnMeta, HandedConn, HandoverQueue, Held};
use crate::net::splice;
use crate::net::splice::{KeepAliveLater, SpliceState};
use crate::pool::admission::Admission;
use crate::pool::close::{CloseReason, Closer, Tick};
use crate::pool::registry::{ConnEntry, ConnId, LegSocket, LegSource, Pool, Target};

mod open;

use open::open;

/// Serve one accepted client until it closes, or until a live upgrade
/// takes it (then its sockets go to `handovers`, open).
///
/// The client socket arrives tuned (the listener's options are inherited).
/// This is the connection's task, so what it holds across the splice is what
/// every idle connection costs: the connect phase runs boxed and is gone by
/// then.
pub fn serve(
    pool: Arc<Pool>,
    client: TcpStream,
    peer: SocketAddr,
    via: Via,
    conn: ConnId,
    // Held for the connection's life: its place under `max_connections` and
    // in the process's descriptor budget.
    admission: (Admission, OwnedSemaphorePermit),
    handovers: HandoverQueue,
) -> impl Future<Output = ()> + Send + 'static {
    let started = Instant::now();
    let closer = Arc::new(Closer::new());
    // An `async move` block, not an `async fn`: the fn's larger future
    // would tip every connection's task into a larger allocation.
    async move {
        // Taken apart inside the statement, so no whole `Leg` stays in the
        // frame across the splice.
        let (lease, target, backend, idle_timeout, keepalive) = match Box::pin(open(
            &pool,
            &client,
            conn,
            (peer, via.as_deref().copied()),
            &closer,
            started,
        ))
        .await
        {
            Some(leg) => (
                leg.lease,
                leg.target,
                leg.backend,
                leg.idle_timeout,
                leg.keepalive,
            ),
            None => return,
        };
        let timers = (keepalive, idle_timeout);
        let later = KeepAliveLater::new(timers, &pool.name, &target.config.name, conn);
        let mut spliced = splice::splice(&client, &backend, &target.stats, idle_timeout, &closer)
            .keep_alive_later(later);
        let out = (&mut spliced).await;
        let handed = (out.reason == CloseReason::Handover).then(|| spliced.hand_over());
        let ends = Ends {
            pool: &pool,
            target: &target,
            conn,
            peer,
            via: via.as_deref().copied(),
            started,
            closer: &closer,
        };
        ends.finish(
            out,
            handed,
            (client, backend),
            &handovers,
            (lease, admission),
        );
    }
}

/// The PROXY header's sender a client came through: boxed, so a direct
/// client's task (most are) carries one pointer, never an address.
pub type Via = Option<Box<SocketAddr>>;

/// As [`serve`], for a client another worker accepted and passed on (its
/// loop was the busier, `net::balance`): registered with this worker's
/// loop first. Only such clients pay for the larger task.
pub async fn serve_moved(
    pool: Arc<Pool>,
    client: std::net::TcpStream,
    peer: SocketAddr,
    via: Via,
    conn: ConnId,
    admission: (Admission, OwnedSemaphorePermit),
    handovers: HandoverQueue,
) {
    match TcpStream::from_std(client) {
        Ok(client) => serve(pool, client, peer, via, conn, admission, handovers).await,
        Err(err) => {
            warn!(pool = %pool.name, conn, client = %peer, err = %err, "handoff_failed");
        }
    }
}

/// Go on with a connection handed over by a live upgrade (in this process or
/// the one before it), where its splice stood. It is registered on its
/// backend at once (so drains and `/status` see it before it runs); the
/// future splices it on once `held` lets go (a new process's connections
/// wait until the running one has given them up). One whose backend is
/// gone from the pool splices on until the drain of that backend closes
/// it, as after a reload.
pub fn resume(
    pool: Arc<Pool>,
    handed: HandedConn,
    slot: OwnedSemaphorePermit,
    handovers: HandoverQueue,
    held: Held,
) -> impl Future<Output = ()> + Send + 'static {
    let HandedConn {
        meta,
        client,
        backend_socket,
    } = handed;
    let ConnMeta {
        conn,
        backend: name,
        addr,
        peer,
        via,
        started: wall,
        splice: state,
        idle_ms,
        owes,
        ..
    } = meta;
    let age = SystemTime::now().duration_since(wall).unwrap_or_default();
    let started = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
    let idle = Duration::from_millis(idle_ms);
    let closer = Closer::handed(state.up.moved, state.down.moved, idle);
    closer.owes.store(owes, Ordering::Relaxed);
    let closer = Arc::new(closer);
    let entry = ConnEntry {
        started: wall,
        ..ConnEntry::new(peer, closer.clone()).via(via)
    };
    let admission = (pool.upgrade().admit(peer.ip()), slot);
    let (lease, target) = pool.upgrade().take_conn(conn, entry, &name, &addr);
    // Listed with its source from now on, as in the process before, though
    // its task may not have run yet.
    let listed = Arc::new(backend_socket);
    pool.legs().set_source(target.id, conn, leg_source(&listed));
    async move {
        // Registered with this worker's own event loop; the listed socket
        // goes once the registered one stands in for it.
        let registered = listed.try_clone().and_then(TcpStream::from_std);
        let (client, backend) = match (TcpStream::from_std(client), registered) {
            (Ok(c), Ok(b)) => (c, Arc::new(b)),
            (Err(err), _) | (_, Err(err)) => {
                warn!(pool = %pool.name, conn, client = %peer, err = %err, "adopt_failed");
                return;
            }
        };
        pool.legs()
            .set_source(target.id, conn, leg_source(&backend));
        drop(listed);
        if !held.let_go().await {
            // Never let go: the sockets are not ours to move bytes on.
            let err = "the running process did not let go of it";
            warn!(pool = %pool.name, conn, client = %peer, err, "adopt_failed");
            return;
        }
        let idle_timeout = pool.config().idle_timeout;
        let mut spliced = splice::resume(
            &client,
            &backend,
            &target.stats,
            (idle_timeout, idle),
            &closer,
            state,
        );
        let out = (&mut spliced).await;
        let handed = (out.reason == CloseReason::Handover).then(|| spliced.hand_over());
        let ends = Ends {
            pool: &pool,
            target: &target,
            conn,
            peer,
            via,
            started,
            closer: &closer,
        };
        ends.finish(
            out,
            handed,
            (client, backend),
            &handovers,
            (lease, admission),
        );
    }
}

/// What the end of a splice needs to know about its connection.
struct Ends<'a> {
    pool: &'a Arc<Pool>,
    target: &'a Target,
    conn: ConnId,
    peer: SocketAddr,
    via: Option<SocketAddr>,
    started: Instant,
    closer: &'a Closer,
}

impl Ends<'_> {
    /// After the splice: hand the connection to the upgrade when it was
    /// handed over for one, else judge and log its end. `held` (its lease and
    /// admission) is let go after the handover, or before the `closed`
    /// event, so whoever reads that event sees the registry without it.
    fn finish(
        &self,
        out: splice::Outcome,
        handed: Option<SpliceState>,
        sockets: (TcpStream, Arc<TcpStream>),
        handovers: &HandoverQueue,
        held: impl Sized,
    ) {
        let Ends {
            pool,
            target,
            conn,
            peer,
            via,
            started,
            ..
        } = *self;
        if let Some(state) = handed {
            match self.hand_over(state, sockets, handovers) {
                Ok(()) => return drop(held),
                Err(err) => {
                    warn!(
                        pool = %pool.name, conn, client = %peer,
                        via = via.map(tracing::field::display), err = err.as_str(), "handover_missed"
                    );
                }
            }
            judge_ending(pool, target, &out, (conn, started), peer);
            drop(held);
        } else {
            judge_ending(pool, target, &out, (conn, started), peer);
            drop(held);
            drop(sockets);
        }
        pool.legs().count_closed(Some(&target.stats), out.reason);
        let closed = Closed {
            backend: Some(&target.config.name),
            conn,
            client: peer,
            via,
            bytes_up: out.bytes_up,
            bytes_down: out.bytes_down,
            duration: started.elapsed(),
            reason: out.reason,
            err: out.error.as_ref().map(|e| e.to_string()),
        };
        closed_log::closed(pool, closed);
    }

    /// Take both sockets out of this event loop and give them to the
    /// upgrade; on failure they are closed (dropped) by the caller's return.
    fn hand_over(
        &self,
        splice: SpliceState,
        (client, backend): (TcpStream, Arc<TcpStream>),
        handovers: &HandoverQueue,
    ) -> Result<(), String> {
        let age = self.started.elapsed();
        let handed = HandedConn {
            meta: ConnMeta {
                conn: self.conn,
                pool: self.pool.name.clone(),
                backend: self.target.config.name.clone(),
                addr: self.target.config.addr.clone(),
                peer: self.peer,
                via: self.via,
                started: SystemTime::now()
                    .checked_sub(age)
                    .unwrap_or(SystemTime::UNIX_EPOCH),
                splice,
                idle_ms: u64::try_from(Tick::now().since(self.closer.last_active()).as_millis())
                    .unwrap_or(u64::MAX),
                owes: self.closer.owes.load(Ordering::Relaxed),
            },
            client: client.into_std().map_err(|e| e.to_string())?,
            backend_socket: out_of_loop(backend).map_err(|e| e.to_string())?,
        };
        handovers
            .take(handed)
            .map_err(|_| "the upgrade no longer collects connections".to_owned())
    }
}

/// The registry's view of a backend leg's socket: asked for its local
/// address only when a listing shows it.
impl LegSocket for TcpStream {
    fn local(&self) -> Option<SocketAddr> {
        self.local_addr().ok()
    }
}

impl LegSocket for std::net::TcpStream {
    fn local(&self) -> Option<SocketAddr> {
        self.local_addr().ok()
    }
}

fn leg_source<S: LegSocket + 'static>(backend: &Arc<S>) -> LegSource {
    // Unsized to the trait object the registry holds.
    let weak: Weak<S> = Arc::downgrade(backend);
    weak
}

/// The backend leg's socket out of this event loop, for a handover. A
/// listing that holds it this instant gets it closed when done, and the
/// handover a duplicate of the descriptor.
fn out_of_loop(backend: Arc<TcpStream>) -> std::io::Result<std::net::TcpStream> {
    match Arc::try_unwrap(backend) {
        Ok(stream) => stream.into_std(),
        Err(shared) => Ok(shared.as_fd().try_clone_to_owned()?.into()),
    }
}

/// A backend that closes a client this soon after the connect, before
/// sending it a byte, refused the client.
const CLOSED_AT_ONCE: Duration = Duration::from_secs(2);

/// Tell the pool when the backend refused this client (closed it at once
/// with nothing sent), or served one after refusing others.
fn judge_ending(
    pool: &Arc<Pool>,
    target: &Target,
    out: &splice::Outcome,
    (conn, started): (ConnId, Instant),
    peer: SocketAddr,
) {
    let by_backend = out.reason.by_backend();
    if by_backend && out.bytes_down == 0 && started.elapsed() < CLOSED_AT_ONCE {
        pool.legs()
            .record_closed_at_once(target.id, conn, started, peer.ip());
    } else if out.bytes_down > 0 && target.stats.closing_at_once.load(Ordering::Relaxed) {
        pool.legs().record_served(target.id);
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A connected pair on loopback: the tokio end and its peer.
    async fn pair() -> (TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (peer, _) = listener.accept().unwrap();
        (stream, peer)
    }

    /// Sends `b"x"` through `handed` and reads it at `peer`.
    fn carries(handed: &mut std::net::TcpStream, peer: &mut std::net::TcpStream) {
        handed.write_all(b"x").unwrap();
        let mut byte = [0u8; 1];
        peer.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"x");
    }

    /// The source `/connections` shows for connection `conn` of `pool`.
    fn listed_source(pool: &Pool, conn: ConnId) -> Option<SocketAddr> {
        let filter = crate::pool::connections::ConnFilter::default();
        let listed = pool.connections().list(&filter, 10, None).unwrap();
        let info = listed.conns.iter().find(|c| c.conn == conn).unwrap();
        info.source()
    }

    /// A connection a live upgrade hands over is listed with its backend
    /// leg's source from the moment it is registered: before its task
    /// runs, and while it is held (the process before it listed one too).
    #[tokio::test]
    async fn a_handed_connection_is_listed_with_its_source_while_held() {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                    backends: [{ name: a, addr: \"127.0.0.1:9\" }]\n";
        let config = crate::config::Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
        let token = tokio_util::sync::CancellationToken::new();
        let pool = Arc::new(Pool::new(config.pools[0].clone(), token));
        let (client, _client_peer) = pair().await;
        let (backend, _node) = pair().await;
        let source = backend.local_addr().unwrap();
        let meta = ConnMeta {
            conn: 7,
            pool: "p".into(),
            backend: "a".into(),
            addr: "127.0.0.1:9".into(),
            peer: client.local_addr().unwrap(),
            via: None,
            started: SystemTime::now(),
            splice: SpliceState::default(),
            idle_ms: 0,
            owes: false,
        };
        let handed = HandedConn {
            meta,
            client: client.into_std().unwrap(),
            backend_socket: backend.into_std().unwrap(),
        };
        let slots = Arc::new(tokio::sync::Semaphore::new(1));
        let slot = slots.try_acquire_owned().unwrap();
        let hold = crate::net::handover::Hold::new();
        let task = resume(
            pool.clone(),
            handed,
            slot,
            HandoverQueue::default(),
            hold.held(),
        );
        assert_eq!(listed_source(&pool, 7), Some(source), "before its task ran");

        let task = tokio::spawn(task);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!task.is_finished());
        assert_eq!(listed_source(&pool, 7), Some(source), "while held");
        task.abort();
    }

    /// A backend leg leaves the loop for a handover whole, or, while a
    /// listing holds it, as a duplicate of its descriptor: either way the
    /// connection goes on, and the registry's view of it ends with it.
    #[tokio::test]
    async fn a_backend_leg_leaves_the_loop_even_while_a_listing_holds_it() {
        let (stream, mut peer) = pair().await;
        let leg = Arc::new(stream);
        let view = leg_source(&leg);
        let local = leg.local_addr().unwrap();
        assert_eq!(view.upgrade().and_then(|s| s.local()), Some(local));
        let mut handed = out_of_loop(leg).unwrap();
        assert_eq!(handed.local_addr().unwrap(), local);
        carries(&mut handed, &mut peer);
        assert!(view.upgrade().is_none(), "gone from the registry's view");

        let (stream, mut peer) = pair().await;
        let leg = Arc::new(stream);
        let view = leg_source(&leg);
        let listing = view.upgrade().unwrap();
        let mut handed = out_of_loop(leg).unwrap();
        assert_eq!(handed.local_addr().unwrap(), listing.local().unwrap());
        drop(listing);
        // The listing's reference closed its descriptor; the duplicate
        // still carries the connection.
        assert!(view.upgrade().is_none());
        carries(&mut handed, &mut peer);
    }
}
