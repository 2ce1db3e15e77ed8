//! Folds repeated `rejected` events: a flood of refused clients logs at most
//! `fold::LIMIT` lines per `fold::WINDOW` for each pool and reason, then one summary
//! line per window with the number left out (`suppressed`), while it lasts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

use crate::pool::admission::Refusal;
use crate::pool::fold::{Flush, Fold};

type Key = (String, Refusal);

/// The folds of every pool, shared by the accept loops (several per pool:
/// one per listen address and data worker).
#[derive(Debug, Default)]
pub struct RejectLog {
    folds: Mutex<HashMap<Key, Fold>>,
}

/// Who was refused: the client, and the PROXY header's sender it came
/// through, if any.
#[derive(Debug, Clone, Copy)]
pub struct Rejected {
    /// The client (the header's, behind one).
    pub client: std::net::SocketAddr,
    /// The header's sender.
    pub via: Option<std::net::SocketAddr>,
}

impl RejectLog {
    /// Log (or fold) one refused client. Spawns, on `tracker`, the flush
    /// that reports the folded ones once the window closes; it stops early
    /// when `token` is cancelled.
    pub fn rejected(
        self: &Arc<Self>,
        pool: &str,
        reason: Refusal,
        conn: u64,
        who: Rejected,
        tracker: &TaskTracker,
        token: &CancellationToken,
    ) {
        let Rejected { client, via } = who;
        let hit = self.with(pool, reason, |f| f.hit(Instant::now()));
        if hit.carried > 0 {
            summary(pool, reason, hit.carried);
        }
        if hit.show {
            info!(
                pool = %pool, conn, client = %client, via = via.map(tracing::field::display),
                reason = reason.as_str(), "rejected"
            );
        }
        if hit.arm {
            let (log, pool, token) = (self.clone(), pool.to_owned(), token.clone());
            tracker.spawn(async move {
                let report = |n| summary(&pool, reason, n);
                log.flush_loop(&pool, reason, &token, report).await;
            });
        }
    }

    /// Until nothing is left out: wait for the window to close, report.
    async fn flush_loop(
        &self,
        pool: &str,
        reason: Refusal,
        token: &CancellationToken,
        report: impl Fn(u64),
    ) {
        loop {
            match self.with(pool, reason, |f| f.flush(Instant::now())) {
                Flush::Done => return,
                Flush::Report(n) => report(n),
                Flush::Wait(at) => tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep_until(at) => {}
                },
            }
        }
    }

    fn with<T>(&self, pool: &str, reason: Refusal, f: impl FnOnce(&mut Fold) -> T) -> T {
        let mut folds = self.folds.lock().unwrap_or_else(|e| e.into_inner());
        f(folds.entry((pool.to_owned(), reason)).or_default())
    }
}

fn summary(pool: &str, reason: Refusal, suppressed: u64) {
    info!(pool = %pool, reason = reason.as_str(), suppressed, "rejected");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::fold::{Hit, LIMIT, WINDOW};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn a_flood_shows_the_first_few_then_counts_the_rest_per_window() {
        let mut f = Fold::default();
        let t = Instant::now();
        let shown: Vec<Hit> = (0..LIMIT).map(|_| f.hit(t)).collect();
        assert!(shown.iter().all(|h| h.show && h.carried == 0 && !h.arm));
        let first_hidden = f.hit(t + MS);
        assert_eq!(
            first_hidden,
            Hit {
                show: false,
                carried: 0,
                arm: true
            }
        );
        for _ in 0..99 {
            assert!(!f.hit(t + 2 * MS).arm, "one flush per episode");
        }
        assert_eq!(f.flush(t + 500 * MS), Flush::Wait(t + WINDOW));
        assert_eq!(f.flush(t + WINDOW), Flush::Report(100));
        // Quiet since: the flush ends; the next one shows again.
        assert_eq!(f.flush(t + 2 * WINDOW), Flush::Done);
        assert!(f.hit(t + 3 * WINDOW).show);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hit_after_the_window_closed_reports_what_the_flush_did_not_yet() {
        let mut f = Fold::default();
        let t = Instant::now();
        for _ in 0..LIMIT + 3 {
            f.hit(t);
        }
        let next = f.hit(t + WINDOW + MS);
        assert_eq!((next.show, next.carried), (true, 3));
        assert_eq!(f.flush(t + WINDOW + MS), Flush::Wait(t + 2 * WINDOW + MS));
    }

    #[tokio::test(start_paused = true)]
    async fn the_flush_reports_once_a_window_while_the_flood_lasts_then_stops() {
        let log = Arc::new(RejectLog::default());
        let counted = Arc::new(AtomicU64::new(0));
        let summaries = Arc::new(AtomicU64::new(0));
        let token = CancellationToken::new();
        let mut flushes = Vec::new();
        // Three windows of 100 refusals each, then quiet.
        for _ in 0..3 {
            for _ in 0..100 {
                let hit = log.with("p", Refusal::MaxConnections, |f| f.hit(Instant::now()));
                counted.fetch_add(hit.carried, Ordering::Relaxed);
                if hit.arm {
                    let (log, token) = (log.clone(), token.clone());
                    let (counted, summaries) = (counted.clone(), summaries.clone());
                    flushes.push(tokio::spawn(async move {
                        let report = |n| {
                            counted.fetch_add(n, Ordering::Relaxed);
                            summaries.fetch_add(1, Ordering::Relaxed);
                        };
                        log.flush_loop("p", Refusal::MaxConnections, &token, report)
                            .await;
                    }));
                }
            }
            tokio::time::sleep(WINDOW + MS).await;
        }
        for f in flushes {
            f.await.unwrap();
        }
        assert_eq!(
            counted.load(Ordering::Relaxed),
            3 * u64::from(100 - LIMIT),
            "every refusal is either shown or counted"
        );
        assert_eq!(
            summaries.load(Ordering::Relaxed),
            3,
            "one summary per window, the last one after the flood"
        );
        // Quiet now: nothing pending, and the next refusal shows in full.
        assert!(
            log.with("p", Refusal::MaxConnections, |f| f.hit(Instant::now()))
                .show
        );
    }
}
