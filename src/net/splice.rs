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
//! 32 KiB chunk per direction) copied out and held until it can be written,
//! then freed. An idle connection holds no data buffer at all. Backpressure
//! is the kernel's: nothing more is read until the previous chunk has been
//! written.
//!
//! The splice is one hand-written poll function over both directions, not
//! a combination of futures: its whole state is a few words per direction,
//! held by every idle connection, and it waits on the sockets' own
//! reader/writer wake slots.
//!
//! Syscalls: a read shorter than the buffer emptied the socket's receive
//! queue, so it also clears the socket's readiness (as a `WouldBlock`
//! would) instead of reading again only to be told so. That is safe with
//! edge-triggered epoll: bytes that arrive after the read raise a new event,
//! readiness is only cleared if no newer event came in meanwhile, and an
//! EOF (`READ_CLOSED`) is never cleared.
//!
//! Packets: bytes read from a peer that has already closed (the loop saw
//! its FIN with them, as from a node that answers and closes) are sent on
//! with `MSG_MORE` once a second read confirms the EOF, so the half-close's
//! FIN leaves in the same segment (`step`).

use std::cell::RefCell;
use std::future::Future;
use std::io::{self, Read};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use rustix::net::SendFlags;
use serde::{Deserialize, Serialize};
use socket2::SockRef;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::config::KeepaliveConfig;
use crate::net::pipe::{self, Pipe};
use crate::net::sockopt;
use crate::pool::close::{CloseReason, Closer, Tick};
use crate::pool::registry::{BackendStats, ConnId};

/// Bytes moved per read/write while a direction is busy.
pub const CHUNK: usize = 32 * 1024;

/// Read-and-forward steps per direction per poll before going back to the
/// scheduler, so one busy connection cannot starve the others.
const STEPS_PER_WAKE: usize = 16;

/// How a splice ended, for the `closed` event.
#[derive(Debug)]
pub struct Outcome {
    /// Bytes client → backend.
    pub bytes_up: u64,
    /// Bytes backend → client.
    pub bytes_down: u64,
    /// How the splice itself ended (a side closed or failed, or the idle
    /// timeout), or the reason given to the connection's closer.
    pub reason: CloseReason,
    /// The I/O error, when there was one.
    pub error: Option<io::Error>,
}

/// Splice `client` and `backend` until the connection ends; see the module
/// docs for when that is. Bytes are counted in the backend's `stats` and in
/// the connection's `closer`. The future is the whole per-connection state.
pub fn splice<'a>(
    client: &'a TcpStream,
    backend: &'a TcpStream,
    stats: &'a BackendStats,
    idle_timeout: Option<Duration>,
    closer: &'a Closer,
) -> Splice<'a> {
    resume(
        client,
        backend,
        stats,
        idle_timeout,
        closer,
        SpliceState::default(),
    )
}

impl<'a> Splice<'a> {
    /// Set the backend leg's keepalive once it has lived long enough to
    /// need it (see [`KeepAliveLater`]).
    pub fn keep_alive_later(mut self, later: KeepAliveLater<'a>) -> Self {
        self.later = Some(Box::pin(later));
        self
    }
}

/// Splice from where `state` says an earlier splice of the same two
/// sockets stood (see [`Splice::hand_over`]): its counts go on, its unwritten
/// bytes are written first, and a direction that had ended stays ended.
pub fn resume<'a>(
    client: &'a TcpStream,
    backend: &'a TcpStream,
    stats: &'a BackendStats,
    idle_timeout: Option<Duration>,
    closer: &'a Closer,
    state: SpliceState,
) -> Splice<'a> {
    Splice {
        client,
        backend,
        stats,
        closer,
        up: Dir::from(state.up),
        down: Dir::from(state.down),
        first_eof: state.first_eof,
        later: None,
        idle: idle_timeout.map(|timeout| {
            let last = Instant::now();
            Box::new(Idle {
                timeout,
                last,
                sleep: Box::pin(tokio::time::sleep_until(last + timeout)),
            })
        }),
    }
}

/// Where a splice stood when it stopped for a handover: enough for another
/// process to go on with the same two sockets, not a byte lost or
/// repeated. Between polls nothing else is in flight: what was read is
/// either written or held here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpliceState {
    /// Client → backend.
    pub up: DirState,
    /// Backend → client.
    pub down: DirState,
    /// The side whose EOF came first, if one did.
    pub first_eof: Option<Side>,
}

/// One direction of a [`SpliceState`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirState {
    /// Bytes written to the receiver so far.
    pub moved: u64,
    /// Bytes read from the sender and not yet written to the receiver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<u8>,
    /// The sender's EOF was read and passed on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
}

impl From<DirState> for Dir {
    fn from(s: DirState) -> Dir {
        Dir {
            moved: s.moved,
            held: (!s.held.is_empty()).then(|| {
                Box::new(Unwritten {
                    data: s.held,
                    sent: 0,
                })
            }),
            done: s.done,
            bulk: false,
            pipe: None,
        }
    }
}

impl Dir {
    fn hand_over(&mut self) -> DirState {
        let mut held = self
            .held
            .take()
            .map(|h| h.data[h.sent..].to_vec())
            .unwrap_or_default();
        if let Some(mut pipe) = self.pipe.take() {
            // Bytes in a pipe are in this process only: carried as data.
            // A pipe holding bytes can always be read, so this is whole.
            match pipe.take_bytes() {
                Ok(bytes) => held.extend_from_slice(&bytes),
                Err(e) => tracing::error!(err = %e, "pipe_read_failed"),
            }
            pipe::give(*pipe);
        }
        DirState {
            moved: self.moved,
            held,
            done: self.done,
        }
    }
}

impl Splice<'_> {
    /// The state to resume from, once this splice has ended for a
    /// [`CloseReason::Handover`] (it stops before touching either socket
    /// in that poll, so the state is exact).
    pub fn hand_over(mut self) -> SpliceState {
        // The next process resumes without a timer of its own: settle it.
        if let Some(later) = self.later.take() {
            later.apply(self.backend);
        }
        SpliceState {
            up: self.up.hand_over(),
            down: self.down.hand_over(),
            first_eof: self.first_eof,
        }
    }
}

impl Future for Splice<'_> {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let this = self.get_mut();
        let (reason, error) = ready!(this.poll_both(cx));
        Poll::Ready(Outcome {
            bytes_up: this.up.moved,
            bytes_down: this.down.moved,
            reason,
            error,
        })
    }
}

/// One of a connection's two peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The accepted client.
    Client,
    /// The backend node.
    Backend,
}

/// Both directions of one connection: the future [`splice`] returns.
pub struct Splice<'a> {
    client: &'a TcpStream,
    backend: &'a TcpStream,
    stats: &'a BackendStats,
    closer: &'a Closer,
    /// Client → backend.
    up: Dir,
    /// Backend → client.
    down: Dir,
    /// The side whose EOF came first.
    first_eof: Option<Side>,
    /// The backend leg's keepalive and user timeout, until they are set
    /// (boxed: gone a second into the connection's life).
    later: Option<Pin<Box<KeepAliveLater<'a>>>>,
    /// Only with an idle timeout (boxed: most connections have none).
    idle: Option<Box<Idle>>,
}

pin_project! {
    /// What a young backend leg still owes itself: [`sockopt::keep_alive`],
    /// set after [`sockopt::keep_alive_after`]. A churned connection ends
    /// before that and never makes those system calls; one that lives is
    /// found half-open within the same budget (see `keep_alive`).
    pub struct KeepAliveLater<'a> {
        #[pin]
        due: Sleep,
        keepalive: KeepaliveConfig,
        // Who to name if the kernel refuses (`sockopt_failed`).
        pool: &'a str,
        backend: &'a str,
        conn: ConnId,
    }
}

impl<'a> KeepAliveLater<'a> {
    /// `keepalive` for the backend leg of `conn` (on `backend` of `pool`,
    /// whose `idle_timeout` is given), connected now.
    pub fn new(
        (keepalive, idle_timeout): (KeepaliveConfig, Option<Duration>),
        pool: &'a str,
        backend: &'a str,
        conn: ConnId,
    ) -> Self {
        let after = sockopt::keep_alive_after(&keepalive, idle_timeout);
        KeepAliveLater {
            due: tokio::time::sleep(after),
            keepalive,
            pool,
            backend,
            conn,
        }
    }

    /// Set them on `socket` now.
    fn apply(&self, socket: &TcpStream) {
        if let Err(err) = sockopt::keep_alive(socket, &self.keepalive) {
            tracing::debug!(
                pool = %self.pool, conn = self.conn, backend = %self.backend, leg = "backend",
                %err, "sockopt_failed"
            );
        }
    }
}

struct Idle {
    timeout: Duration,
    /// When a byte last moved either way (read once per poll that moved any).
    last: Instant,
    sleep: Pin<Box<Sleep>>,
}

/// The shared counters one direction adds its bytes to: the backend's
/// and the connection's own (read by pool snapshots), and whether the
/// connection owes an answer once it moved bytes (up: it does; down: no).
#[derive(Clone, Copy)]
struct Totals<'a> {
    backend: &'a AtomicU64,
    conn: &'a AtomicU64,
    owes: (&'a AtomicBool, bool),
}

/// One direction's state.
#[derive(Default)]
struct Dir {
    /// Bytes written to the receiver so far.
    moved: u64,
    /// Bytes read but not yet written while the receiver is slow; none
    /// (and no allocation) otherwise.
    held: Option<Box<Unwritten>>,
    /// EOF read and everything before it written.
    done: bool,
    /// Its last busy spell moved whole buffers: the next one starts
    /// through a pipe at once, without a copied buffer to find out.
    bulk: bool,
    /// Lent while the direction moves whole buffers: bytes then go
    /// socket → pipe → socket in the kernel (`splice(2)`). Given back
    /// when it goes quiet with the pipe empty.
    pipe: Option<Box<Pipe>>,
}

impl Drop for Dir {
    fn drop(&mut self) {
        if let Some(pipe) = self.pipe.take() {
            pipe::give(*pipe);
        }
    }
}

/// The unwritten rest of one chunk.
struct Unwritten {
    data: Vec<u8>,
    /// How much of `data` has been written.
    sent: usize,
}

/// An I/O error and whether it came from the reading socket (else the
/// writing one).
type Fault = (bool, io::Error);

type Ended = (CloseReason, Option<io::Error>);

impl Splice<'_> {
    fn poll_both(&mut self, cx: &mut Context<'_>) -> Poll<Ended> {
        if self.closer.poll_closed(cx).is_ready() {
            return Poll::Ready((self.closer.reason(), None));
        }
        let before = self.up.moved + self.down.moved;
        for side in [Side::Client, Side::Backend] {
            let (from, to, dir, totals) = match side {
                Side::Client => (
                    self.client,
                    self.backend,
                    &mut self.up,
                    Totals {
                        backend: &self.stats.bytes_up,
                        conn: &self.closer.bytes_up,
                        owes: (&self.closer.owes, true),
                    },
                ),
                Side::Backend => (
                    self.backend,
                    self.client,
                    &mut self.down,
                    Totals {
                        backend: &self.stats.bytes_down,
                        conn: &self.closer.bytes_down,
                        owes: (&self.closer.owes, false),
                    },
                ),
            };
            if dir.done {
                continue;
            }
            match dir.pump(cx, from, to, totals) {
                Poll::Pending => {}
                Poll::Ready(Ok(())) => {
                    dir.done = true;
                    self.first_eof.get_or_insert(side);
                    // After the last direction ends both sockets close, which
                    // sends the FIN anyway: half-close only the first.
                    let other_done = match side {
                        Side::Client => self.down.done,
                        Side::Backend => self.up.done,
                    };
                    if !other_done && let Err(e) = sockopt::shutdown_write(to) {
                        return Poll::Ready(self.fail(side.other(), e));
                    }
                }
                Poll::Ready(Err((reading, e))) => {
                    let failed = if reading { side } else { side.other() };
                    return Poll::Ready(self.fail(failed, e));
                }
            }
        }
        if self.up.done && self.down.done {
            let reason = match self.first_eof {
                Some(Side::Backend) => CloseReason::BackendClosed,
                _ => CloseReason::ClientClosed,
            };
            return Poll::Ready((reason, None));
        }
        let moved = self.up.moved + self.down.moved != before;
        if moved {
            // Once per poll that moved bytes, not per read: a coarse clock
            // read without a syscall, for `/connections`' idle time.
            self.closer.touch(Tick::now());
        }
        if let Some(later) = &mut self.later
            && later.as_mut().project().due.poll(cx).is_ready()
        {
            later.apply(self.backend);
            self.later = None;
        }
        if let Some(idle) = &mut self.idle {
            if moved {
                idle.last = Instant::now();
            }
            if idle.poll_expired(cx).is_ready() {
                return Poll::Ready((CloseReason::IdleTimeout, None));
            }
        }
        Poll::Pending
    }

    /// End on an error of `side`'s socket; the other peer gets a reset, so
    /// it learns it was an error and not a clean end.
    fn fail(&self, side: Side, e: io::Error) -> Ended {
        let (other, reason) = match side {
            Side::Client => (self.backend, CloseReason::ClientError),
            Side::Backend => (self.client, CloseReason::BackendError),
        };
        sockopt::reset_on_close(other);
        (reason, Some(e))
    }
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::Client => Side::Backend,
            Side::Backend => Side::Client,
        }
    }
}

impl Idle {
    /// Ready once no byte has moved for the timeout.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            ready!(self.sleep.as_mut().poll(cx));
            let deadline = self.last + self.timeout;
            if Instant::now() >= deadline {
                return Poll::Ready(());
            }
            // Bytes moved since the timer was set: wait from the last one.
            self.sleep.as_mut().reset(deadline);
        }
    }
}

impl Dir {
    /// Move bytes `from` → `to` until `from` would block (Pending, with the
    /// task registered on whichever socket it waits for), EOF with nothing
    /// left to write (Ready(Ok)), or an error.
    fn pump(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
        totals: Totals<'_>,
    ) -> Poll<Result<(), Fault>> {
        if self.bulk && self.held.is_none() && self.pipe.is_none() {
            self.pipe = pipe::take().map(Box::new);
        }
        if self.pipe.is_some() {
            return self.pump_piped(cx, from, to, totals);
        }
        for _ in 0..STEPS_PER_WAKE {
            // Whatever the receiver did not take last time goes first.
            if let Some(held) = &mut self.held {
                while held.sent < held.data.len() {
                    ready!(to.poll_write_ready(cx)).map_err(|e| (false, e))?;
                    match to.try_write(&held.data[held.sent..]) {
                        Ok(0) => return Poll::Ready(Err((false, io::ErrorKind::WriteZero.into()))),
                        Ok(n) => {
                            held.sent += n;
                            Dir::add(&mut self.moved, n, totals);
                        }
                        // Readiness is cleared: the next round waits for it.
                        Err(e) if is_transient(&e) => {}
                        Err(e) => return Poll::Ready(Err((false, e))),
                    }
                }
                // Give the buffer back: an idle connection holds none.
                self.held = None;
            }
            ready!(from.poll_read_ready(cx)).map_err(|e| (true, e))?;
            match step(from, to)? {
                Forwarded::Moved(n, last) => {
                    Dir::add(&mut self.moved, n, totals);
                    match last {
                        Then::More => {}
                        Then::Eof => return Poll::Ready(Ok(())),
                        Then::Failed(e) => return Poll::Ready(Err((true, e))),
                    }
                    // A whole buffer: a bulk transfer; go on in the kernel.
                    if n == CHUNK
                        && let Some(pipe) = pipe::take()
                    {
                        self.pipe = Some(Box::new(pipe));
                        self.bulk = true;
                        return self.pump_piped(cx, from, to, totals);
                    }
                }
                Forwarded::Partial {
                    written,
                    rest,
                    then,
                } => {
                    Dir::add(&mut self.moved, written, totals);
                    if let Then::Failed(e) = then {
                        return Poll::Ready(Err((true, e)));
                    }
                    self.held = Some(Box::new(Unwritten {
                        data: rest,
                        sent: 0,
                    }));
                }
                Forwarded::Nothing => {}
                Forwarded::Eof => return Poll::Ready(Ok(())),
            }
        }
        // Busy: let the other tasks run, then carry on.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// [`Dir::pump`] through the lent pipe: empty it into `to`, fill it
    /// from `from`, again. Gives the pipe back whenever `from` has
    /// nothing and the pipe is empty, so a connection between bursts
    /// holds none; when this wake moved less than one buffer the transfer
    /// is over, and the direction copies again.
    fn pump_piped(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
        totals: Totals<'_>,
    ) -> Poll<Result<(), Fault>> {
        let Some(pipe) = self.pipe.as_mut() else {
            return Poll::Pending;
        };
        let mut woke_with = 0;
        for _ in 0..STEPS_PER_WAKE {
            while pipe.held() > 0 {
                ready!(to.poll_write_ready(cx)).map_err(|e| (false, e))?;
                match pipe.drain(to) {
                    Ok(0) => return Poll::Ready(Err((false, io::ErrorKind::WriteZero.into()))),
                    Ok(n) => {
                        woke_with += n;
                        Dir::add(&mut self.moved, n, totals);
                    }
                    Err(e) if is_transient(&e) => {}
                    Err(e) => return Poll::Ready(Err((false, e))),
                }
            }
            match from.poll_read_ready(cx) {
                Poll::Pending => {
                    self.bulk = woke_with >= CHUNK;
                    if let Some(pipe) = self.pipe.take() {
                        pipe::give(*pipe);
                    }
                    return Poll::Pending;
                }
                Poll::Ready(ready) => ready.map_err(|e| (true, e))?,
            }
            match pipe.fill(from) {
                Ok(0) => {
                    if let Some(pipe) = self.pipe.take() {
                        pipe::give(*pipe);
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(_) => {}
                Err(e) if is_transient(&e) => {}
                Err(e) => return Poll::Ready(Err((true, e))),
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Count `n` forwarded bytes: in `moved` (this direction's own) and
    /// in both shared totals.
    fn add(moved: &mut u64, n: usize, totals: Totals<'_>) {
        *moved += n as u64;
        totals.backend.fetch_add(n as u64, Ordering::Relaxed);
        totals.conn.fetch_add(n as u64, Ordering::Relaxed);
        // Written only when it flips: a bulk transfer one way stores nothing.
        let (owes, now) = totals.owes;
        if owes.load(Ordering::Relaxed) != now {
            owes.store(now, Ordering::Relaxed);
        }
    }
}

/// One non-blocking read-and-forward step.
enum Forwarded {
    /// `n` bytes read and written in full, and what the reader said after
    /// them (known only when it had already closed).
    Moved(usize, Then),
    /// Bytes read but only `written` of them written: `rest` waits for the
    /// receiver. An EOF after them is read again once `rest` is written;
    /// an error (which a read reports once) ends the direction now, as it
    /// would have on the next read.
    Partial {
        written: usize,
        rest: Vec<u8>,
        then: Then,
    },
    /// Nothing read (no data after all, or interrupted); readiness is
    /// cleared where it was stale.
    Nothing,
    /// The reader sent FIN.
    Eof,
}

thread_local! {
    /// Per-worker scratch buffer: a step reads into it and writes from it
    /// without awaiting, so no connection owns a buffer unless the other
    /// side is slow (then only the unwritten rest is copied out).
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; CHUNK].into_boxed_slice());
}

/// What follows the bytes of a [`Forwarded::Moved`].
enum Then {
    /// More may come (or nothing is known yet).
    More,
    /// The reader's FIN: the direction is over.
    Eof,
    /// The reader's error (a reset) right after those bytes.
    Failed(io::Error),
}

/// Whether `from`'s peer has already closed its side (a FIN or a reset
/// seen by the event loop), read from the readiness the loop holds: no
/// syscall. Called only while `from` is readable (its readiness not yet
/// cleared), so the readiness future is ready at once and never waits;
/// dropping it takes the registration's waiter lock once, uncontended,
/// which is why a step asks only after a short read.
fn read_closed(from: &TcpStream) -> bool {
    let ready = std::pin::pin!(from.ready(Interest::READABLE));
    match ready.poll(&mut Context::from_waker(std::task::Waker::noop())) {
        Poll::Ready(Ok(ready)) => ready.is_read_closed(),
        _ => false,
    }
}

/// Read once from `from` and write what came straight to `to`.
///
/// When `from` has already closed, a short read is followed by one
/// more read, which tells whether the bytes were the last: then they are
/// sent with `MSG_MORE`, so the FIN of the half-close that follows rides
/// in the same segment (one packet less to `to`'s peer, and one ACK less
/// back), as a peer that writes and closes at once sends them. Without a
/// close pending nothing changes: one read, one write.
fn step(from: &TcpStream, to: &TcpStream) -> Result<Forwarded, Fault> {
    SCRATCH.with_borrow_mut(|buf| {
        let (mut short, mut closed) = (0, false);
        // A short read drained the socket: report it as `WouldBlock` so
        // `try_io` clears the readiness now (see the module docs).
        let read = from.try_io(Interest::READABLE, || {
            let n = (&*SockRef::from(from)).read(buf)?;
            if n > 0 && n < buf.len() {
                short = n;
                // Asked before `try_io` clears the readiness below.
                closed = read_closed(from);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let mut n = match read {
            Ok(0) => return Ok(Forwarded::Eof),
            Ok(n) => n,
            Err(_) if short > 0 => short,
            Err(e) if is_transient(&e) => return Ok(Forwarded::Nothing),
            Err(e) => return Err((true, e)),
        };
        let mut then = Then::More;
        if closed {
            match (&*SockRef::from(from)).read(&mut buf[n..]) {
                Ok(0) => then = Then::Eof,
                Ok(more) => n += more,
                Err(e) if is_transient(&e) => {}
                Err(e) => then = Then::Failed(e),
            }
        }
        let flags = if matches!(then, Then::Eof) {
            SendFlags::MORE
        } else {
            SendFlags::empty()
        };
        let mut done = 0;
        while done < n {
            let sent = to.try_io(Interest::WRITABLE, || {
                Ok(rustix::net::send(to, &buf[done..n], flags)?)
            });
            match sent {
                Ok(0) => return Err((false, io::ErrorKind::WriteZero.into())),
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let rest = buf[done..n].to_vec();
                    return Ok(Forwarded::Partial {
                        written: done,
                        rest,
                        then,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err((false, e)),
            }
        }
        Ok(Forwarded::Moved(n, then))
    })
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
#[path = "splice_tests.rs"]
mod tests;
