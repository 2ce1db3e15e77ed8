//! Unit tests of the registry: registration, selection under the lock, leases.

use super::*;
use crate::config::Config;
use crate::pool::admission::Refusal;
use crate::pool::backend::Suitability;
use crate::pool::health::State;

fn pool() -> Arc<Pool> {
    let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends: [\"127.0.0.1:9\"]\n";
    let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
    Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()))
}

fn entry() -> ConnEntry {
    ConnEntry::new("127.0.0.1:5".parse().unwrap(), Arc::new(Closer::new()))
}

/// A strict pool (services required) of `a` and `b`, probed with
/// `bitcoin-p2p`.
fn strict_pool() -> Arc<Pool> {
    let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                health: { probe: bitcoin-p2p, require_services: [compact_filters] }\n    \
                backends: [{ name: a, addr: \"127.0.0.1:9\" }, { name: b, addr: \"127.0.0.1:10\" }]\n";
    let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
    Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()))
}

/// A probe of `id` finding a node that announces `services`.
fn told(pool: &Pool, id: BackendId, services: u64) {
    let facts = crate::pool::node::NodeFacts::p2p(services, 70016, "/Satoshi:0.21.2/", 10);
    let requirement = node::Requirement::of(&pool.config().health, None);
    let mut report = crate::pool::report::Report::new(crate::pool::report::Verdict::Healthy, "ok")
        .with_node(facts.clone());
    report.unfit = node::judge(&requirement, &facts).err();
    let epoch = pool.probing().epoch_of(id).unwrap();
    pool.probing()
        .apply_probe(id, &report, epoch, Instant::now());
}

#[test]
fn a_strict_pool_serves_only_from_backends_judged_suitable() {
    const FILTERS: u64 = 1 | 1 << 3 | 1 << 6;
    let pool = strict_pool();
    let peer = "127.0.0.1".parse().unwrap();
    // Nobody judged yet: refused at accept, and nothing to reserve.
    assert_eq!(
        pool.gate().admit_from(peer).unwrap_err(),
        Refusal::NoSuitableBackend
    );
    assert!(pool.legs().reserve(1, entry(), &[]).is_none());
    // `a` has compact filters; `b`, never judged, is as usable as far as
    // its health goes, yet gets nothing: not least-used, not the
    // rebalancer's target.
    told(&pool, 0, FILTERS);
    let _admitted = pool.gate().admit_from(peer).unwrap();
    let leases: Vec<_> = (1..=4)
        .map(|conn| pool.legs().reserve(conn, entry(), &[]).unwrap())
        .collect();
    assert!(leases.iter().all(|(_, t)| t.config.name == "a"));
    assert_eq!(pool.rebalance().plan(), None);
    // `b` lacks them: unsuitable, out at once.
    told(&pool, 1, 1 | 1 << 3);
    let snap = pool.view().snapshot();
    let b = &snap.backends[1];
    assert_eq!(b.state, State::Unsuitable);
    assert_eq!(
        b.quarantine.map(|q| q.reason),
        Some(QuarantineReason::Unsuitable)
    );
    assert_eq!(
        b.last_probe.as_ref().unwrap().detail,
        "lacks compact_filters"
    );
    assert_eq!(b.suitability, Suitability::Unsuitable);
    // `a` loses them too (restarted without the flags): nobody can serve.
    told(&pool, 0, 1 | 1 << 3);
    assert_eq!(
        pool.gate().admit_from(peer).unwrap_err(),
        Refusal::NoSuitableBackend
    );
    assert!(pool.legs().reserve(9, entry(), &[]).is_none());
}

/// In a strict pool a backend no probe has judged is usable as far as
/// its health goes but takes no client: it is no other leg. The only fit
/// backend keeps its connections when taken out (and a client connecting
/// to it still splices there), until another is judged fit.
#[test]
fn a_backend_that_takes_no_client_is_no_other_leg() {
    const FILTERS: u64 = 1 | 1 << 3 | 1 << 6;
    let pool = strict_pool();
    told(&pool, 0, FILTERS);
    let on_a: Vec<_> = (1..=3)
        .map(|conn| {
            let e = entry();
            let (lease, target) = pool.legs().reserve(conn, e.clone(), &[]).unwrap();
            assert_eq!(target.config.name, "a");
            assert!(pool.legs().splice_if_wanted(0, true, &e.closer, None));
            (lease, e)
        })
        .collect();
    let connecting = entry();
    let (_lease, _) = pool.legs().reserve(4, connecting.clone(), &[]).unwrap();
    let hour = std::time::Duration::from_secs(3600);
    assert_eq!(
        pool.operator().quarantine("a", hour),
        Ok(3),
        "b, unjudged, cannot take a's clients: a is the last leg"
    );
    assert!(
        pool.legs()
            .splice_if_wanted(0, true, &connecting.closer, None),
        "nowhere else to go: it stays on a"
    );
    let later = Instant::now() + std::time::Duration::from_secs(60);
    pool.drains().step(later);
    assert!(on_a.iter().all(|(_, e)| !e.closer.is_closing()));
    // `b` judged fit: a's clients may go there now.
    told(&pool, 1, FILTERS);
    pool.drains().step(later);
    assert!(on_a.iter().all(|(_, e)| e.closer.is_closing()));
    assert!(connecting.closer.is_closing());
}

/// Closes at once count toward `quarantine.failures` only in a row: a
/// client accepted after a refusal and served since ends the run, even
/// while it stays connected. Without those clients served, the same three
/// refusals from three addresses take the backend out.
#[tokio::test(start_paused = true)]
async fn a_client_served_between_refusals_ends_their_run() {
    for served in [true, false] {
        let pool = pool();
        let mut held = Vec::new();
        for i in 0..3u8 {
            let conn = 2 * ConnId::from(i) + 1;
            let client = std::net::IpAddr::from([10, 0, 0, i + 1]);
            // Each refused client accepted after the last refusal: a new
            // incident each time.
            tokio::time::advance(std::time::Duration::from_secs(1)).await;
            let started = Instant::now();
            tokio::time::advance(std::time::Duration::from_millis(10)).await;
            pool.legs().record_closed_at_once(0, conn, started, client);
            let next = entry();
            let (lease, target) = pool.legs().reserve(conn + 1, next.clone(), &[]).unwrap();
            assert!(
                pool.legs()
                    .splice_if_wanted(target.id, target.usable, &next.closer, None)
            );
            if served {
                next.closer.bytes_down.store(10, Ordering::Relaxed);
            }
            held.push(lease);
        }
        let state = pool.view().overview().backends[0].state;
        assert_eq!(state.is_usable(), served, "served between: {served}");
    }
}

/// One per connection, in the backend's B-tree: what `/connections`
/// shows (a pointer for `via`, the backend leg's address) costs 40
/// bytes over the 56 before it; no more without a reason.
#[test]
fn a_registry_entry_stays_small() {
    assert!(std::mem::size_of::<ConnEntry>() <= 96);
}

#[test]
fn stop_closes_registered_connections_and_later_ones() {
    let pool = pool();
    let before = entry();
    let (_lease, _) = pool.legs().reserve(1, before.clone(), &[]).unwrap();
    assert!(!before.closer.is_closing());
    pool.stop(CloseReason::PoolRemoved);
    assert!(pool.token.is_cancelled());
    assert!(before.closer.is_closing());
    assert_eq!(before.closer.reason(), CloseReason::PoolRemoved);
    // A client accepted just before the stop registers just after it:
    // it must not be left running on a stopped pool.
    let after = entry();
    let (_lease, _) = pool.legs().reserve(2, after.clone(), &[]).unwrap();
    assert!(after.closer.is_closing());
    assert_eq!(after.closer.reason(), CloseReason::PoolRemoved);
}

/// Nothing usable: the client tries the least recently failed first,
/// a probe that found a backend down counting as its failure.
#[test]
fn fail_open_goes_to_the_least_recently_failed_probe_failures_included() {
    use crate::pool::report::{Report, Verdict};
    let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                quarantine: { failures: 1 }\n    health: { fall: 1 }\n    \
                backends: [{ name: a, addr: \"127.0.0.1:9\" }, { name: b, addr: \"127.0.0.1:10\" }]\n";
    let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
    let pool = Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()));
    let (a, b) = {
        let m = pool.backends();
        (m.active[0].id(), m.active[1].id())
    };
    // A client's connect to B failed first, then a probe found A down.
    let t0 = Instant::now();
    pool.legs().record_connect(b, t0, false);
    let epoch = pool.probing().epoch_of(a).unwrap();
    let down = Report::new(Verdict::Down, "refused");
    pool.probing()
        .apply_probe(a, &down, epoch, t0 + std::time::Duration::from_secs(1));
    assert!(
        pool.view()
            .overview()
            .backends
            .iter()
            .all(|s| !s.state.is_usable())
    );
    let (_lease, target) = pool.legs().reserve(1, entry(), &[]).unwrap();
    assert_eq!(target.id, b, "B failed longer ago than A");
    let (_lease, target) = pool.legs().reserve(2, entry(), &[b]).unwrap();
    assert_eq!(target.id, a);
}

/// A probe kind that reads no height (after a reload to `connect`)
/// clears the height an earlier kind read.
#[test]
fn a_probe_that_reads_no_height_clears_an_old_one() {
    use crate::pool::report::{Report, Verdict};
    let pool = pool();
    let a = pool.backends().active[0].id();
    // Read by an earlier probe kind; the pool probes `connect` now.
    pool.backends().active[0].set_height(Some(100), false);
    pool.probing().apply_probe(
        a,
        &Report::new(Verdict::Healthy, "connected"),
        0,
        Instant::now(),
    );
    assert_eq!(pool.backends().active[0].height(), None);
}

/// Drained before its connect finished: goes elsewhere. Spliced
/// first: the drain closes it. Never left on a drained backend.
#[test]
fn a_connect_that_races_a_drain_never_stays_on_the_drained_backend() {
    let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                backends: [{ name: a, addr: \"127.0.0.1:9\" }, { name: b, addr: \"127.0.0.1:10\" }]\n";
    let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
    let pool = Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()));
    let a = pool.backends().active[0].id();

    let early = entry();
    let (_lease, target) = pool.legs().reserve(1, early.clone(), &[]).unwrap();
    assert_eq!(target.id, a);
    let late = entry();
    let (_lease, _) = pool.legs().reserve(2, late.clone(), &[]).unwrap();
    // `late` is still connecting to B; `early`'s leg to A is up.
    assert!(pool.legs().splice_if_wanted(a, true, &early.closer, None));
    pool.operator()
        .quarantine("a", std::time::Duration::from_secs(60))
        .unwrap();
    assert!(
        early.closer.is_closing(),
        "spliced before the drain: closed by it"
    );
    assert_eq!(early.closer.reason(), CloseReason::Drained);
    // A third client that chose A before the quarantine, connected after.
    let third = entry();
    assert!(
        !pool.legs().splice_if_wanted(a, true, &third.closer, None),
        "goes elsewhere"
    );
    assert!(!third.closer.is_movable());
    // With nothing usable, fail-open: whatever it chose, it stays.
    pool.operator()
        .quarantine("b", std::time::Duration::from_secs(60))
        .unwrap();
    assert!(pool.legs().splice_if_wanted(a, true, &third.closer, None));
    assert!(pool.legs().splice_if_wanted(a, false, &late.closer, None));
}

/// A refusal steers its address away for `quarantine.base`; the first
/// selection after that forgets it, so later ones look nothing up.
#[tokio::test(start_paused = true)]
async fn a_selection_forgets_refusals_whose_window_is_over() {
    let pool = pool();
    let client = "127.0.0.1".parse().unwrap();
    pool.legs()
        .record_closed_at_once(0, 1, Instant::now(), client);
    drop(pool.legs().reserve(1, entry(), &[]));
    assert!(!pool.backends().refused.is_empty(), "its window runs");
    tokio::time::advance(pool.config().quarantine.base).await;
    drop(pool.legs().reserve(2, entry(), &[]));
    assert!(pool.backends().refused.is_empty(), "forgotten");
}
