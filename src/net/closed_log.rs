//! The `closed` event, folded for a flood: a connection its client or node
//! ended after carrying nothing, or within a second of its start, is one of
//! many in a connect-and-reset flood, so per pool and reason at most
//! `fold::LIMIT` of them are logged in full per second, then one `closed`
//! summary line (`pool`, `reason`, `suppressed`) per second while it lasts.
//! Every other connection's `closed` line is logged in full, always.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use crate::pool::close::CloseReason;
use crate::pool::registry::Pool;

/// A connection that ended within this of its start may be one of a
/// flood's, whatever it carried.
pub const SHORT: Duration = Duration::from_secs(1);

/// One connection's end, as its `closed` event shows it.
pub struct Closed<'a> {
    /// Its backend's name; none when no backend connected.
    pub backend: Option<&'a str>,
    /// The connection id.
    pub conn: u64,
    /// The client's address.
    pub client: SocketAddr,
    /// The PROXY header's sender it came through, if any.
    pub via: Option<SocketAddr>,
    /// Bytes client to backend.
    pub bytes_up: u64,
    /// Bytes backend to client.
    pub bytes_down: u64,
    /// Its life.
    pub duration: Duration,
    /// Why it ended.
    pub reason: CloseReason,
    /// The error that ended it, if one did.
    pub err: Option<String>,
}

impl Closed<'_> {
    /// Ended by its client or node (or no node took it) with nothing
    /// carried, however long that took (a flood fills the nodes' accept
    /// backlogs, so its connects can take seconds), or within
    /// [`SHORT`] of its start whatever it carried (a flood that sends a
    /// byte and resets): one of a flood's many. A session that carried
    /// bytes for longer keeps its line, and the proxy's own closes
    /// (drains, rebalancing, reloads, shutdown, an operator's) are bounded
    /// by the connections it holds, and always logged.
    fn foldable(&self) -> bool {
        let by_peer = matches!(
            self.reason,
            CloseReason::ClientClosed
                | CloseReason::ClientError
                | CloseReason::BackendClosed
                | CloseReason::BackendError
                | CloseReason::NoBackend
                | CloseReason::LocalResources
        );
        let silent = self.bytes_up == 0 && self.bytes_down == 0;
        by_peer && (silent || self.duration < SHORT)
    }
}

/// Log `c`'s `closed` event on `pool`, or count it into the pool's fold.
pub fn closed(pool: &Pool, c: Closed<'_>) {
    let reason = c.reason.as_str();
    if c.foldable() {
        let hit = pool.closed_folds.hit(reason, Instant::now());
        if hit.carried > 0 {
            summary(&pool.name, reason, hit.carried);
        }
        if !hit.show {
            return;
        }
    }
    let duration_ms = c.duration.as_millis() as u64;
    let (conn, client, up, down, err) = (c.conn, c.client, c.bytes_up, c.bytes_down, c.err);
    let via = c.via.map(tracing::field::display);
    match c.backend {
        Some(backend) => info!(
            pool = %pool.name, backend = %backend, conn, client = %client, via,
            bytes_up = up, bytes_down = down, duration_ms, reason, err, "closed"
        ),
        None => info!(
            pool = %pool.name, conn, client = %client, via,
            bytes_up = up, bytes_down = down, duration_ms, reason, err, "closed"
        ),
    }
}

/// The pool's fold reporter: a summary line per reason and window while
/// lines are left out; on the pool's end, the counts still pending, and
/// every later line is logged in full.
pub async fn report_folded(pool: Arc<Pool>) {
    loop {
        let (due, next) = pool.closed_folds.due(Instant::now());
        for (reason, n) in due {
            summary(&pool.name, reason, n);
        }
        let at = next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            () = pool.token.cancelled() => break,
            () = pool.closed_folds.wake.notified() => {}
            () = tokio::time::sleep_until(at) => {}
        }
    }
    for (reason, n) in pool.closed_folds.close() {
        summary(&pool.name, reason, n);
    }
}

fn summary(pool: &str, reason: &str, suppressed: u64) {
    info!(pool = %pool, reason, suppressed, "closed");
}
