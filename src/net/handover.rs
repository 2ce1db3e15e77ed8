//! Connections stopped for a live upgrade: each session that is told to
//! hand over (`CloseReason::Handover`) stops its splice between two polls
//! and gives its two sockets and splice state to the [`HandoverQueue`], which the
//! upgrade drains. Nothing is closed: the sockets go on in the new process
//! (or here again, when the upgrade fails).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc, watch};

use crate::net::splice::SpliceState;
use crate::pool::registry::ConnId;

/// One connection, stopped and out of the event loop.
#[derive(Debug)]
pub struct HandedConn {
    /// What it is and where its splice stood.
    pub meta: ConnMeta,
    /// The client socket (non-blocking, not registered anywhere).
    pub client: std::net::TcpStream,
    /// The backend socket (likewise).
    pub backend_socket: std::net::TcpStream,
}

impl HandedConn {
    /// Order `conns` as they should travel: the most recently active first,
    /// so the connections in use are the first the next process resumes
    /// (the new process takes them in batches, each as it arrives).
    pub fn busiest_first(conns: &mut [HandedConn]) {
        conns.sort_by_key(|c| c.meta.idle_ms);
    }
}

/// A handed over connection apart from its sockets: what a handover sends
/// beside them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnMeta {
    /// Its id, as logged in `conn` (kept, so one client's lines join up).
    pub conn: ConnId,
    /// Its pool.
    pub pool: String,
    /// Its backend's name.
    pub backend: String,
    /// Its backend's address as configured.
    pub addr: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// The PROXY header's sender it came through, if any.
    #[serde(default)]
    pub via: Option<SocketAddr>,
    /// When the client was accepted (wall clock).
    pub started: SystemTime,
    /// Where the splice stood.
    pub splice: SpliceState,
    /// How long since it last moved a byte, in ms (0 from a process
    /// that did not say).
    #[serde(default)]
    pub idle_ms: u64,
    /// Its client's last bytes still await an answer (`stall_rule:
    /// request` counts its silence). Sent only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub owes: bool,
}

/// Where sessions put their handed over connections while an upgrade collects
/// them. Cheap to clone (one `Arc`).
#[derive(Debug, Clone, Default)]
pub struct HandoverQueue {
    sink: Arc<Mutex<Option<mpsc::UnboundedSender<HandedConn>>>>,
}

impl HandoverQueue {
    /// Start collecting; the receiver gets every connection handed over from now
    /// until [`HandoverQueue::disarm`].
    pub fn arm(&self) -> mpsc::UnboundedReceiver<HandedConn> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.lock() = Some(tx);
        rx
    }

    /// Stop collecting.
    pub fn disarm(&self) {
        *self.lock() = None;
    }

    /// Hand `handed` to the upgrade. When no upgrade collects (it gave up
    /// waiting for this connection), it comes back: the caller closes it.
    pub fn take(&self, handed: HandedConn) -> Result<(), Box<HandedConn>> {
        match self.lock().as_ref() {
            Some(tx) => tx.send(handed).map_err(|e| Box::new(e.0)),
            None => Err(Box::new(handed)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<mpsc::UnboundedSender<HandedConn>>> {
        // Plain data behind the lock: a panic elsewhere leaves it usable.
        self.sink.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Connections a live upgrade's new process has taken but may not splice
/// yet: until the running process lets go of them it may still take them
/// back, and two processes moving bytes on one socket lose or repeat some.
/// Each session waits on a [`Held`] of it before its first byte.
#[derive(Debug)]
pub struct Hold {
    go: watch::Sender<bool>,
    waits: Arc<Waits>,
}

/// The [`Held`]s of one [`Hold`].
#[derive(Debug, Default)]
struct Waits {
    /// Not dropped yet: sessions still waiting, or not past their first
    /// poll since the hold let go.
    left: AtomicUsize,
    /// The last of them was dropped.
    passed: Notify,
}

/// One session's wait for its [`Hold`].
#[derive(Debug)]
pub struct Held(Option<(Arc<Waits>, watch::Receiver<bool>)>);

impl Hold {
    /// Connections held until [`Hold::let_go`].
    pub fn new() -> Hold {
        Hold {
            go: watch::channel(false).0,
            waits: Arc::default(),
        }
    }

    /// A wait for this hold.
    pub fn held(&self) -> Held {
        self.waits.left.fetch_add(1, Ordering::AcqRel);
        Held(Some((self.waits.clone(), self.go.subscribe())))
    }

    /// The connections may splice now.
    pub fn let_go(&self) {
        self.go.send_replace(true);
    }

    /// Wait until every session held has gone past the hold (after
    /// [`Hold::let_go`]), or `within` has passed: so the sessions of one
    /// hold have had their first poll before the next hold wakes its own.
    pub async fn passed(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        let waits = &self.waits;
        while waits.left.load(Ordering::Acquire) > 0 {
            let passed = waits.passed.notified();
            if waits.left.load(Ordering::Acquire) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, passed).await.is_err() {
                return;
            }
        }
    }
}

impl Default for Hold {
    fn default() -> Hold {
        Hold::new()
    }
}

impl Held {
    /// Not held: the process splices its connections as it takes them
    /// (taken back after a failed upgrade).
    pub fn free() -> Held {
        Held(None)
    }

    /// Wait until the hold lets go: `false` if it was dropped without
    /// (the connections are not this process's to splice).
    pub async fn let_go(mut self) -> bool {
        match &mut self.0 {
            None => true,
            Some((_, rx)) => rx.wait_for(|go| *go).await.is_ok(),
        }
    }
}

impl Clone for Held {
    fn clone(&self) -> Held {
        match &self.0 {
            None => Held(None),
            Some((waits, rx)) => {
                waits.left.fetch_add(1, Ordering::AcqRel);
                Held(Some((waits.clone(), rx.clone())))
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((waits, _)) = &self.0
            && waits.left.fetch_sub(1, Ordering::AcqRel) == 1
        {
            waits.passed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_held_session_waits_for_the_hold_and_not_for_a_dropped_one() {
        let hold = Hold::new();
        let waiting = tokio::spawn(hold.held().let_go());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "held until let go");
        hold.let_go();
        assert!(waiting.await.unwrap());
        // Late comers see it let go.
        assert!(hold.held().let_go().await);
        assert!(Held::free().let_go().await);

        let dropped = Hold::new();
        let waiting = dropped.held();
        drop(dropped);
        assert!(!waiting.let_go().await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_is_passed_once_every_held_session_went_past_it() {
        let hold = Hold::new();
        let held = hold.held();
        let sessions: Vec<_> = (0..3)
            .map(|_| tokio::spawn(held.clone().let_go()))
            .collect();
        drop(held);
        hold.let_go();
        hold.passed(Duration::from_secs(3600)).await;
        for s in sessions {
            assert!(s.is_finished() || s.await.unwrap());
        }
        // A session that never comes back does not hold the next hold up
        // for longer than asked.
        let stuck = Hold::new();
        let _never = stuck.held();
        stuck.let_go();
        let started = tokio::time::Instant::now();
        stuck.passed(Duration::from_millis(5)).await;
        assert_eq!(started.elapsed(), Duration::from_millis(5));
    }
}
