//! The discovery task of one pool: looks up each discover entry every
//! `discovery.interval` (at once after a reload changed them), hands
//! successful answers to the pool and has the members that joined probed
//! at once. A failed lookup changes nothing but what `/status` shows; it
//! is logged (`discovery_failed`) when it starts failing or fails for
//! another reason.

pub mod dns;

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::pool::registry::Pool;
use crate::probe::prober::Prober;
use dns::Dns;

/// Run `pool`'s lookups until the pool stops; `first` is told when the
/// first round is done (or at once when the pool discovers nothing).
pub async fn run(pool: Arc<Pool>, prober: Prober, first: oneshot::Sender<()>) {
    let mut first = Some(first);
    loop {
        let config = pool.config();
        let interval = config.discovery.interval;
        if !config.discover.is_empty() {
            round(&pool, &prober).await;
        }
        if let Some(tell) = first.take() {
            // Whoever waited may have stopped waiting.
            let _ = tell.send(());
        }
        tokio::select! {
            () = pool.token.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
            () = pool.discover_wake.notified() => {}
        }
    }
}

/// Look up every discover entry once, with a resolver made for this round:
/// the system's configuration is read again, and no TCP connection is kept
/// from the last round (a server may answer a kept connection from the data
/// it had when the connection opened: dnsmasq does, for up to 100 queries).
async fn round(pool: &Arc<Pool>, prober: &Prober) {
    let config = pool.config();
    let d = config.discovery;
    let dns = match Dns::new(d.resolver, d.interval) {
        Ok(dns) => dns,
        Err(error) => {
            for entry in &config.discover {
                if pool.discovery().lookup_failed(&entry.name, &error) {
                    warn!(pool = %pool.name, name = %entry.name, error = %error, "discovery_failed");
                }
            }
            return;
        }
    };
    for entry in &config.discover {
        let known = pool.discovery().members_of(&entry.name);
        let started = Instant::now();
        let answer = tokio::select! {
            () = pool.token.cancelled() => return,
            a = dns.lookup(&entry.query, &known) => a,
        };
        match answer {
            Ok(found) => {
                let count = found.len();
                let Some(change) =
                    pool.discovery()
                        .apply_lookup(&entry.name, found, Instant::now())
                else {
                    continue;
                };
                if change.recovered {
                    info!(pool = %pool.name, name = %entry.name, members = change.members, "discovery_recovered");
                }
                debug!(
                    pool = %pool.name, name = %entry.name, found = count,
                    ms = started.elapsed().as_millis() as u64, "lookup"
                );
                for (id, backend) in &change.added {
                    prober.watch_one(pool, *id, backend);
                }
            }
            Err(error) => {
                if pool.discovery().lookup_failed(&entry.name, &error) {
                    warn!(
                        pool = %pool.name, name = %entry.name, query = %entry.query,
                        error = %error, members = known.len(), "discovery_failed"
                    );
                }
            }
        }
    }
}
