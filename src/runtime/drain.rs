//! The drain clock: one task per pool that closes the connections of its
//! spread drains when they are due. The pool decides what is due
//! ([`Drains::step`](crate::pool::drain::Drains::step)); this task only sleeps until the next deadline,
//! or until the pool says a drain started or has new work.

use std::sync::Arc;

use tokio::time::{Instant, sleep_until};

use crate::pool::registry::Pool;

/// Run until the pool stops.
pub async fn run(pool: Arc<Pool>) {
    loop {
        let next = pool.drains().step(Instant::now());
        // A wake that came since the step is kept for this wait.
        let woken = pool.drains().woken();
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::config::Config;
    use crate::pool::close::Closer;
    use crate::pool::registry::ConnEntry;

    /// The task wakes for a drain started by a quarantine and closes each
    /// connection at its instant; paused time advances only to its sleeps.
    #[tokio::test(start_paused = true)]
    async fn the_task_closes_each_connection_when_it_is_due() {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                    health: { drain_spread: 2s }\n    \
                    backends: [{ name: a, addr: \"a.invalid:9\" }, { name: b, addr: \"b.invalid:9\" }]\n";
        let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
        let pool = Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()));
        let task = tokio::spawn(run(pool.clone()));
        let mut leases = Vec::new();
        let mut on_a = Vec::new();
        for id in 1..=8 {
            let closer = Arc::new(Closer::new());
            let entry = ConnEntry::new("127.0.0.1:5".parse().unwrap(), closer.clone());
            let (lease, target) = pool.legs().reserve(id, entry, &[]).unwrap();
            assert!(
                pool.legs()
                    .splice_if_wanted(target.id, target.usable, &closer, None)
            );
            if target.config.name == "a" {
                on_a.push(closer);
            }
            leases.push((lease, target));
        }
        // Let the task reach its first wait, with nothing to do.
        tokio::task::yield_now().await;
        let t0 = Instant::now();
        pool.operator()
            .quarantine("a", Duration::from_secs(3600))
            .unwrap();
        let mut times = Vec::new();
        for closer in &on_a {
            closer.closed().await;
            times.push(Instant::now() - t0);
        }
        let ms = Duration::from_millis;
        assert_eq!(times, [ms(0), ms(500), ms(1000), ms(1500)]);
        pool.token.cancel();
        task.await.unwrap();
    }
}
