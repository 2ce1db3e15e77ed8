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

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

use crate::net::sockopt;
use crate::pool::close::{CloseReason, Closer, Tick};
use crate::pool::registry::BackendStats;

mod dir;
mod step;
mod timers;

use dir::{Dir, Totals};
use timers::Idle;
pub use timers::KeepAliveLater;

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
        (idle_timeout, Duration::ZERO),
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
/// bytes are written first, and a direction that had ended stays ended. Its
/// idle timeout counts from its last byte, `silent` ago, not from now: a
/// live upgrade does not give a silent connection a new `idle_timeout`.
pub fn resume<'a>(
    client: &'a TcpStream,
    backend: &'a TcpStream,
    stats: &'a BackendStats,
    (idle_timeout, silent): (Option<Duration>, Duration),
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
        idle: idle_timeout.map(|timeout| Box::new(Idle::since(timeout, silent))),
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
            && later.as_mut().poll_due(cx).is_ready()
        {
            later.apply(self.backend);
            self.later = None;
        }
        if let Some(idle) = &mut self.idle {
            if moved {
                idle.moved();
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

#[cfg(test)]
#[path = "splice_tests.rs"]
mod tests;
