//! Splice two TCP streams: raw bytes both ways, exactly and in order.
//!
//! Semantics (as `copy_bidirectional`, not a `select!` of two copies): an EOF
//! one way half-closes the other socket's write side and the other direction
//! keeps flowing; the splice ends when both ways have ended, on the first
//! error (the other peer then gets a reset), on the idle timeout, or when the
//! connection's [`Closer`] fires.
//!
//! Memory: a connection owns no buffer while its peers keep up. Each step
//! reads into a per-worker scratch buffer and writes it on at once, without
//! awaiting; only when the receiver is slow is the unwritten rest (at most one
//! 32 KiB chunk per direction) copied out and held until it can be written.
//! An idle connection holds no data buffer at all. Backpressure is the
//! kernel's: nothing more is read until the previous chunk has been written.

use std::cell::RefCell;
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
    /// Only an idle timeout needs the clock read on every chunk.
    track_idle: bool,
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
        if self.track_idle {
            let ms = self.base.elapsed().as_millis() as u64;
            self.last_ms.store(ms, Ordering::Relaxed);
        }
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
        track_idle: idle_timeout.is_some(),
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

/// One non-blocking read-and-forward step.
enum Step {
    /// `n` bytes read and written in full.
    Moved(usize),
    /// `n` bytes read but only partly written: the rest waits for writability.
    Partial(usize, Vec<u8>),
    /// Nothing to read right now.
    Drained,
    /// The reader sent FIN.
    Eof,
}

/// Read-and-forward steps per readiness wake-up before going back to the
/// scheduler, so one busy connection cannot starve the others.
const STEPS_PER_WAKE: usize = 16;

thread_local! {
    /// Per-worker scratch buffer: a step reads into it and writes from it
    /// without awaiting, so no connection owns a buffer unless the other
    /// side is slow (then only the unwritten rest is copied out).
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; CHUNK].into_boxed_slice());
}

/// Read once from `from` and write what came straight to `to`.
fn step(from: &TcpStream, to: &TcpStream) -> Result<Step, (bool, io::Error)> {
    SCRATCH.with_borrow_mut(|buf| {
        let n = loop {
            match from.try_read(buf) {
                Ok(0) => return Ok(Step::Eof),
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Drained),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err((true, e)),
            }
        };
        let mut done = 0;
        while done < n {
            match to.try_write(&buf[done..n]) {
                Ok(0) => return Err((false, io::ErrorKind::WriteZero.into())),
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(Step::Partial(n, buf[done..n].to_vec()));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err((false, e)),
            }
        }
        Ok(Step::Moved(n))
    })
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
    let tag = |(reading, e): (bool, io::Error)| (if reading { from_side } else { to_side }, e);
    loop {
        from.readable().await.map_err(|e| (from_side, e))?;
        for _ in 0..STEPS_PER_WAKE {
            match step(from, to).map_err(tag)? {
                Step::Moved(n) => shared.moved(to_side, n),
                Step::Partial(n, rest) => {
                    write_all(to, &rest).await.map_err(|e| (to_side, e))?;
                    shared.moved(to_side, n);
                }
                Step::Drained => break,
                Step::Eof => {
                    // The first EOF decides whose close it was; later ones lose the race.
                    let _ = shared.first_eof.compare_exchange(
                        0,
                        from_side as u8,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    return sockopt::shutdown_write(to).map_err(|e| (to_side, e));
                }
            }
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
