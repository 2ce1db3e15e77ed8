//! The rebalance tick: every `rebalance.interval`, ask the pool for a move,
//! test-connect the receiving backend, and only when it answers make the
//! move. A balanced pool makes no connection.

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use crate::net::connect::{self, HandshakeAck};
use crate::net::source::Origin;
use crate::pool::registry::Pool;

/// How often a disabled rebalancer checks whether a reload enabled it.
const DISABLED_RECHECK: Duration = Duration::from_secs(1);

/// Run ticks every `rebalance.interval` until the pool stops. The interval
/// is re-read each tick, so a reload applies to the next one.
pub async fn run(pool: Arc<Pool>) {
    loop {
        // Disabled (`0s`): look again later, a reload may enable it.
        let interval = pool.config().rebalance.interval;
        tokio::select! {
            () = pool.token.cancelled() => return,
            () = tokio::time::sleep(interval.unwrap_or(DISABLED_RECHECK)) => {}
        }
        if interval.is_some() {
            tick(&pool).await;
        }
    }
}

/// One tick: plan, test-connect, move.
pub async fn tick(pool: &Pool) {
    let Some(m) = pool.rebalance().plan() else {
        return;
    };
    let timeout = pool.config().connect_timeout;
    // From the proxy's own address, as a probe: it is no client's.
    match connect::connect_from(
        &m.to_addr,
        timeout,
        pool.own(),
        (Origin::Proxy, HandshakeAck::Now),
    )
    .await
    {
        // The test connection only proves the node answers; it carries nothing.
        Ok(connected) => drop(connected),
        Err(err) => {
            debug!(pool = %pool.name, to = %m.to_addr, err = err.to_string().as_str(), "rebalance_skipped");
            return;
        }
    }
    pool.rebalance().make(&m);
}
