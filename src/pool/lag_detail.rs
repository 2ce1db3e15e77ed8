//! How a lag verdict reads in a probe's detail: the backend's height, how
//! far it trails, the reference it trails and the allowance, so the reason
//! for a `lagging` backend can be read without the other rows.

/// The detail of a backend at `height` trailing `reference` by more than
/// `max_lag`: `height 12, 9 behind 21 (max 3)`.
pub fn lagging(height: u64, reference: u64, max_lag: u64) -> String {
    let behind = reference.saturating_sub(height);
    format!("height {height}, {behind} behind {reference} (max {max_lag})")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

    use crate::config::Config;
    use crate::pool::health::ProbeOutcome;
    use crate::pool::registry::{BackendId, Pool};
    use crate::pool::report::{Proof, Report, Verdict};

    fn pool() -> Arc<Pool> {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                    health: { probe: bitcoin-p2p, max_lag_blocks: 3, fall: 1 }\n    \
                    backends: [{ name: a, addr: \"a.invalid:9\" }, \
                    { name: b, addr: \"b.invalid:9\" }, { name: c, addr: \"c.invalid:9\" }]\n";
        let c = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
        Arc::new(Pool::new(c.pools[0].clone(), CancellationToken::new()))
    }

    fn id(pool: &Pool, name: &str) -> BackendId {
        let targets = pool.probing().probe_targets();
        targets.into_iter().find(|(_, c)| c.name == name).unwrap().0
    }

    /// A passing probe of `name` that read and proved `height` (a pool that
    /// proves heights judges lag only between proven ones); the recorded
    /// outcome and detail.
    fn probe(pool: &Pool, name: &str, height: u64) -> (ProbeOutcome, String) {
        let b = id(pool, name);
        let epoch = pool.probing().epoch_of(b).unwrap();
        let report = Report {
            proof: Proof::Proven,
            ..Report::with_height(Verdict::Healthy, height, format!("height {height}"))
        };
        pool.probing()
            .apply_probe(b, &report, epoch, Instant::now());
        let snap = pool.view().overview();
        let p = snap.backends.iter().find(|x| x.name == name).unwrap();
        let p = p.last_probe.clone().unwrap();
        (p.outcome, p.detail)
    }

    #[tokio::test(start_paused = true)]
    async fn a_lagging_probe_names_the_reference_and_the_lag() {
        let pool = pool();
        probe(&pool, "a", 21);
        probe(&pool, "b", 21);
        let (outcome, detail) = probe(&pool, "c", 12);
        assert_eq!(outcome, ProbeOutcome::Lagging);
        assert_eq!(detail, "height 12, 9 behind 21 (max 3)");
        // Caught up: the probe's own words again.
        assert_eq!(
            probe(&pool, "c", 21),
            (ProbeOutcome::Healthy, "height 21".into())
        );
    }
}
