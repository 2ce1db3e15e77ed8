//! Splice two TCP streams: raw bytes both ways, exactly and in order.
//!
//! Semantics (as `copy_bidirectional`, not a `select!` of two copies): an EOF
//! one way half-closes the other socket's write side and the other direction
//! keeps flowing; the splice ends when both ways have ended, on the first
//! error (the other peer then gets a reset), on the idle timeout, or when the
//! connection's [`Closer`] fires.
//!
//! Memory: a direction holds a buffer only while bytes are in flight. It waits
//! for readability without one, allocates a buffer, moves data until the
//! socket would block, and frees the buffer again, so an idle connection
//! costs no buffer at all. Backpressure is the kernel's: nothing is read
//! until the previous chunk has been written.

use std::io;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::registry::{BackendStats, Closer};
use crate::sockopt;

/// Bytes moved per read/write while a direction is busy.
const CHUNK: usize = 32 * 1024;

/// How a splice ended, for the `closed` event.
#[derive(Debug)]
pub struct Outcome {
    /// Bytes client → backend.
    pub bytes_up: u64,
    /// Bytes backend → client.
    pub bytes_down: u64,
    /// `client_closed`, `backend_closed`, `client_error`, `backend_error`,
    /// `idle_timeout`, or the reason given to the connection's closer.
    pub reason: &'static str,
    /// The I/O error, when there was one.
    pub error: Option<io::Error>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client = 1,
    Backend = 2,
}

/// Per-splice shared state: both directions run in one task.
struct Shared<'a> {
    stats: &'a BackendStats,
    up: AtomicU64,
    down: AtomicU64,
    /// Milliseconds after `base` of the last byte moved either way.
    last_ms: AtomicU64,
    base: Instant,
    /// The side whose EOF came first (0 while none).
    first_eof: AtomicU8,
}

impl Shared<'_> {
    fn moved(&self, toward: Side, n: usize) {
        let n = n as u64;
        let (mine, total) = match toward {
            Side::Backend => (&self.up, &self.stats.bytes_up),
            Side::Client => (&self.down, &self.stats.bytes_down),
        };
        mine.fetch_add(n, Ordering::Relaxed);
        total.fetch_add(n, Ordering::Relaxed);
        let ms = self.base.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }
}

/// Splice `client` and `backend` until the connection ends; see the module
/// docs for when that is.
pub async fn splice(
    client: &TcpStream,
    backend: &TcpStream,
    stats: &BackendStats,
    idle_timeout: Option<Duration>,
    closer: &Closer,
) -> Outcome {
    let shared = Shared {
        stats,
        up: AtomicU64::new(0),
        down: AtomicU64::new(0),
        last_ms: AtomicU64::new(0),
        base: Instant::now(),
        first_eof: AtomicU8::new(0),
    };
    let both = async {
        tokio::try_join!(
            pump(client, backend, Side::Client, &shared),
            pump(backend, client, Side::Backend, &shared)
        )
    };
    let (reason, error) = tokio::select! {
        r = both => match r {
            Ok(_) if shared.first_eof.load(Ordering::Relaxed) == Side::Backend as u8 => {
                ("backend_closed", None)
            }
            Ok(_) => ("client_closed", None),
            Err((side, e)) => {
                // Tell the other peer it was an error, not a clean end.
                let other = if side == Side::Client { backend } else { client };
                sockopt::reset_on_close(other);
                let reason = if side == Side::Client { "client_error" } else { "backend_error" };
                (reason, Some(e))
            }
        },
        () = closer.closed() => (closer.reason(), None),
        () = idle(&shared, idle_timeout) => ("idle_timeout", None),
    };
    Outcome {
        bytes_up: shared.up.load(Ordering::Relaxed),
        bytes_down: shared.down.load(Ordering::Relaxed),
        reason,
        error,
    }
}

/// Move bytes `from` → `to` until EOF (then half-close `to`) or an error,
/// which comes back tagged with the side whose socket failed.
async fn pump(
    from: &TcpStream,
    to: &TcpStream,
    from_side: Side,
    shared: &Shared<'_>,
) -> Result<(), (Side, io::Error)> {
    let to_side = match from_side {
        Side::Client => Side::Backend,
        Side::Backend => Side::Client,
    };
    loop {
        from.readable().await.map_err(|e| (from_side, e))?;
        // Allocated only now that bytes are waiting; freed when they stop.
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match from.try_read(&mut buf) {
                Ok(0) => {
                    // The first EOF decides whose close it was; later ones lose the race.
                    let _ = shared.first_eof.compare_exchange(
                        0,
                        from_side as u8,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    return sockopt::shutdown_write(to).map_err(|e| (to_side, e));
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err((from_side, e)),
            };
            write_all(to, &buf[..n]).await.map_err(|e| (to_side, e))?;
            shared.moved(to_side, n);
        }
    }
}

async fn write_all(to: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match to.try_write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => to.writable().await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Resolves once no byte has moved for `timeout`; never without one.
async fn idle(shared: &Shared<'_>, timeout: Option<Duration>) {
    let Some(timeout) = timeout else {
        return std::future::pending().await;
    };
    loop {
        let last = shared.base + Duration::from_millis(shared.last_ms.load(Ordering::Relaxed));
        let deadline = last + timeout;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}
