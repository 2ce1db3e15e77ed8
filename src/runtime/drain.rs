//! The drain clock: one task per pool that closes the connections of its
//! spread drains when they are due. The pool decides what is due
//! ([`Pool::drain_step`]); this task only sleeps until the next deadline,
//! or until the pool says a drain started or has new work.

use std::sync::Arc;

use tokio::time::{Instant, sleep_until};

use crate::pool::registry::Pool;

/// Run until the pool stops.
pub async fn run(pool: Arc<Pool>) {
    loop {
        let next = pool.drain_step(Instant::now());
        // A wake that came since the step is kept for this wait.
        let woken = pool.drain_woken();
        let due = async {
            match next {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = pool.token.cancelled() => return,
            () = woken => {}
            () = due => {}
        }
    }
}
