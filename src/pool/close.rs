//! Why a connection closed, and the [`Closer`] that closes one from outside.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use atomic_waker::AtomicWaker;

use crate::pool::snapshot::ConnState;

/// Why a client connection closed: the `reason` of its `closed` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CloseReason {
    /// The client ended its side first, then the backend did.
    ClientClosed = 1,
    /// The backend ended its side first, then the client did.
    BackendClosed,
    /// An I/O error on the client's socket.
    ClientError,
    /// An I/O error on the backend's socket.
    BackendError,
    /// No byte either way for `idle_timeout`.
    IdleTimeout,
    /// The process is shutting down.
    Shutdown,
    /// Its backend was taken out while another is usable.
    Drained,
    /// Moved off the busiest backend by the rebalancer.
    Rebalanced,
    /// Its backend is gone from the config after a reload.
    BackendRemoved,
    /// Its pool is gone from the config after a reload.
    PoolRemoved,
    /// Every candidate backend failed to connect.
    NoBackend,
    /// This process ran out of descriptors or memory while connecting.
    LocalResources,
    /// Frozen for a live upgrade: handed over, it is not closed and not
    /// logged; one that could not be handed over (`handover_missed`) is
    /// closed with this reason.
    Handover,
    /// An operator closed this one connection (`POST /connections/{conn}/close`).
    Admin,
    /// An operator shed it, among its backend's newest
    /// (`POST .../shed?count=N`).
    Shed,
}

impl CloseReason {
    /// Every reason, in discriminant order (the first is 1).
    pub const ALL: [CloseReason; 15] = [
        CloseReason::ClientClosed,
        CloseReason::BackendClosed,
        CloseReason::ClientError,
        CloseReason::BackendError,
        CloseReason::IdleTimeout,
        CloseReason::Shutdown,
        CloseReason::Drained,
        CloseReason::Rebalanced,
        CloseReason::BackendRemoved,
        CloseReason::PoolRemoved,
        CloseReason::NoBackend,
        CloseReason::LocalResources,
        CloseReason::Handover,
        CloseReason::Admin,
        CloseReason::Shed,
    ];

    /// The name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::ClientClosed => "client_closed",
            CloseReason::BackendClosed => "backend_closed",
            CloseReason::ClientError => "client_error",
            CloseReason::BackendError => "backend_error",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Drained => "drained",
            CloseReason::Rebalanced => "rebalanced",
            CloseReason::BackendRemoved => "backend_removed",
            CloseReason::PoolRemoved => "pool_removed",
            CloseReason::NoBackend => "no_backend",
            CloseReason::LocalResources => "local_resources",
            CloseReason::Handover => "handover",
            CloseReason::Admin => "admin",
            CloseReason::Shed => "shed",
        }
    }

    /// Its position in [`CloseReason::ALL`], for per-reason counters.
    pub fn index(self) -> usize {
        usize::from(self as u8 - 1)
    }

    /// True when the backend ended the connection (cleanly or not).
    pub fn by_backend(self) -> bool {
        matches!(self, CloseReason::BackendClosed | CloseReason::BackendError)
    }

    fn from_u8(n: u8) -> Option<CloseReason> {
        CloseReason::ALL
            .get(usize::from(n).checked_sub(1)?)
            .copied()
    }
}

/// A coarse reading of the system's monotonic clock in tenths of a
/// second, wrapping: what a connection's last activity is stamped with.
/// `CLOCK_MONOTONIC_COARSE` is read without a syscall and costs a few ns;
/// it is the system's clock, not the process's, so a stamp carried over a
/// live upgrade reads the same in the new process. Spans up to 13 years
/// come out right.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tick(u32);

impl Tick {
    /// Now.
    pub fn now() -> Tick {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
        let secs = u64::try_from(t.tv_sec).unwrap_or(0);
        let tenths = u64::try_from(t.tv_nsec).unwrap_or(0) / 100_000_000;
        // Wraps every 13.6 years; differences wrap with it.
        Tick(secs.wrapping_mul(10).wrapping_add(tenths) as u32)
    }

    /// How long after `earlier` this is (to the tenth of a second).
    pub fn since(self, earlier: Tick) -> Duration {
        Duration::from_millis(u64::from(self.0.wrapping_sub(earlier.0)) * 100)
    }

    /// The tick `span` before this one.
    pub fn before(self, span: Duration) -> Tick {
        let tenths = u32::try_from(span.as_millis() / 100).unwrap_or(u32::MAX);
        Tick(self.0.wrapping_sub(tenths))
    }
}

/// Closes one connection from outside, with a reason for its `closed` event,
/// and counts its bytes: the one `Arc` the session and the registry share
/// per connection.
///
/// Small on purpose (one per live connection): a state byte, a reason byte,
/// a flag, the waker of the one task that serves the connection, two byte
/// counters the splice adds to and snapshots read, and the [`Tick`] of its
/// last byte (in the room the bytes left: still 48 bytes).
#[derive(Debug, Default)]
pub struct Closer {
    state: AtomicU8,
    /// A [`CloseReason`] discriminant; 0 while none was given.
    reason: AtomicU8,
    /// The last bytes moved went client → backend: the connection owes
    /// an answer (`health.stall_rule: request`). Set by the splice.
    pub owes: AtomicBool,
    waker: AtomicWaker,
    /// Bytes client → backend on this connection.
    pub bytes_up: AtomicU64,
    /// Bytes backend → client on this connection.
    pub bytes_down: AtomicU64,
    /// The [`Tick`] when it was accepted or last moved a byte.
    active: AtomicU32,
}

const SPLICED: u8 = 1;
const CLOSING: u8 = 2;

impl Closer {
    /// An open closer, active now. Pool shutdown reaches it through the
    /// pool's registry ([`Pool::stop`](crate::pool::registry::Pool::stop)),
    /// not through a token of its own.
    pub fn new() -> Closer {
        let closer = Closer::default();
        closer.touch(Tick::now());
        closer
    }

    /// Bytes moved at `now` (the splice says so once per poll that moved
    /// any, not per byte).
    pub fn touch(&self, now: Tick) {
        self.active.store(now.0, Ordering::Relaxed);
    }

    /// When it was accepted or last moved a byte.
    pub fn last_active(&self) -> Tick {
        Tick(self.active.load(Ordering::Relaxed))
    }

    /// The backend leg is up and bytes flow: from now on drain and
    /// rebalance may close it. A client still connecting is left alone (it
    /// fails over by itself if its backend went bad).
    pub fn set_spliced(&self) {
        self.state.fetch_or(SPLICED, Ordering::AcqRel);
    }

    /// True once spliced, closing or not.
    pub fn is_spliced(&self) -> bool {
        self.state.load(Ordering::Acquire) & SPLICED != 0
    }

    /// True once spliced and not yet asked to close: what drain and
    /// rebalance may act on.
    pub fn is_movable(&self) -> bool {
        self.state.load(Ordering::Acquire) == SPLICED
    }

    /// A closer for a connection handed over by another process, with
    /// the bytes it had moved there and how long it had been idle.
    pub fn handed(bytes_up: u64, bytes_down: u64, idle: Duration) -> Closer {
        let closer = Closer {
            bytes_up: AtomicU64::new(bytes_up),
            bytes_down: AtomicU64::new(bytes_down),
            ..Closer::default()
        };
        closer.touch(Tick::now().before(idle));
        closer
    }

    /// Ask the connection to close; the first reason given wins.
    pub fn close(&self, reason: CloseReason) {
        // A second reason for the same close is not news: keep the first,
        // so a failed exchange is the expected case, not an error.
        let _ = self
            .reason
            .compare_exchange(0, reason as u8, Ordering::AcqRel, Ordering::Acquire);
        self.state.fetch_or(CLOSING, Ordering::AcqRel);
        self.waker.wake();
    }

    /// Ready once the connection must close; otherwise registers the task
    /// to be woken then. Only the connection's own task polls this.
    pub fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_closing() {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        // A close between the check and the registration woke nobody.
        if self.is_closing() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Resolves once the connection must close. Cancel-safe.
    pub async fn closed(&self) {
        std::future::poll_fn(|cx| self.poll_closed(cx)).await
    }

    /// True once asked to close.
    pub fn is_closing(&self) -> bool {
        self.state.load(Ordering::Acquire) & CLOSING != 0
    }

    /// Where the connection stands: connecting, spliced, or asked to close.
    pub fn state(&self) -> ConnState {
        let state = self.state.load(Ordering::Acquire);
        if state & CLOSING != 0 {
            ConnState::Closing
        } else if state & SPLICED != 0 {
            ConnState::Spliced
        } else {
            ConnState::Connecting
        }
    }

    /// Why it was closed: the first reason given, `Shutdown` when none was.
    pub fn reason(&self) -> CloseReason {
        CloseReason::from_u8(self.reason.load(Ordering::Acquire)).unwrap_or(CloseReason::Shutdown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closer_is_movable_only_while_spliced_and_open() {
        let closer = Closer::new();
        assert!(!closer.is_movable(), "still connecting");
        closer.set_spliced();
        assert!(closer.is_movable());
        closer.close(CloseReason::Drained);
        closer.close(CloseReason::Rebalanced);
        assert!(!closer.is_movable());
        assert_eq!(
            closer.reason(),
            CloseReason::Drained,
            "the first reason wins"
        );
    }

    #[test]
    fn no_reason_given_means_shutdown() {
        assert_eq!(Closer::new().reason(), CloseReason::Shutdown);
    }

    #[test]
    fn every_reason_survives_the_byte_it_is_stored_in() {
        for r in CloseReason::ALL {
            assert_eq!(CloseReason::from_u8(r as u8), Some(r));
        }
        assert_eq!(CloseReason::from_u8(0), None);
    }

    #[test]
    fn a_closer_reports_its_connection_state() {
        let closer = Closer::new();
        assert_eq!(closer.state(), ConnState::Connecting);
        closer.set_spliced();
        assert_eq!(closer.state(), ConnState::Spliced);
        closer.close(CloseReason::Drained);
        assert_eq!(closer.state(), ConnState::Closing);
        assert_eq!(Closer::new().state(), ConnState::Connecting);
        let never_spliced = Closer::new();
        never_spliced.close(CloseReason::Shutdown);
        assert_eq!(never_spliced.state(), ConnState::Closing);
    }

    /// One per live connection: the reason takes a byte, not a slot; the
    /// byte counters take two words; the activity stamp fits beside the
    /// bytes of state.
    #[test]
    fn a_closer_stays_small() {
        assert!(std::mem::size_of::<Closer>() <= 48);
    }

    #[test]
    fn ticks_count_tenths_and_wrap() {
        let a = Tick(u32::MAX - 4);
        let b = Tick(5);
        assert_eq!(b.since(a), Duration::from_millis(1000));
        assert_eq!(
            b.before(Duration::from_millis(1050)),
            Tick(u32::MAX - 4),
            "tenths, rounded down"
        );
        let now = Tick::now();
        assert!(Tick::now().since(now) < Duration::from_secs(60));
    }

    #[test]
    fn a_handed_closer_keeps_its_idle_time() {
        let closer = Closer::handed(1, 2, Duration::from_secs(30));
        let idle = Tick::now().since(closer.last_active());
        assert!(idle >= Duration::from_secs(30), "{idle:?}");
        assert!(idle < Duration::from_secs(90), "{idle:?}");
        assert!(Tick::now().since(Closer::new().last_active()) < Duration::from_secs(60));
    }
}
