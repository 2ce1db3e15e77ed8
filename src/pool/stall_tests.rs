//! The stall rule under paused time, with the probe results that sample
//! it: a backend whose connections went silent while another's received is
//! `stalled` after `fall` probes (and drained); a quiet pool changes
//! nothing; young connections are not judged unless still receiving, and
//! then their backend is not stalled; a probe that fails keeps its
//! own verdict. Under `stall_rule: request` only a connection that owes an
//! answer can be silent.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::{self, Instant};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::pool::close::Closer;
use crate::pool::health::{ProbeOutcome, State};
use crate::pool::registry::{BackendId, ConnEntry, Lease, Pool};
use crate::pool::report::{Report, Verdict};

fn pool(stall: &str) -> Arc<Pool> {
    pool_with(stall, "push")
}

fn pool_with(stall: &str, rule: &str) -> Arc<Pool> {
    let yaml = format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
         health: {{ stall_timeout: {stall}, stall_rule: {rule}, fall: 2, drain_spread: 0s }}\n    \
         backends: [{{ name: a, addr: \"a.invalid:9\" }}, {{ name: b, addr: \"b.invalid:9\" }}]\n"
    );
    let c = Config::parse(&yaml, "inline.yaml".as_ref()).unwrap();
    Arc::new(Pool::new(c.pools[0].clone(), CancellationToken::new()))
}

struct Conn {
    closer: Arc<Closer>,
    _lease: Lease,
}

/// A spliced connection on the named backend.
fn connect(pool: &Arc<Pool>, id: u64, on: &str) -> Conn {
    let avoid: Vec<BackendId> = pool
        .probing()
        .probe_targets()
        .into_iter()
        .filter(|(_, c)| c.name != on)
        .map(|(id, _)| id)
        .collect();
    let closer = Arc::new(Closer::new());
    let entry = ConnEntry::new("127.0.0.1:5".parse().unwrap(), closer.clone());
    let (lease, target) = pool.legs().reserve(id, entry, &avoid).unwrap();
    assert_eq!(target.config.name, on);
    assert!(
        pool.legs()
            .splice_if_wanted(target.id, target.usable, &closer, None)
    );
    Conn {
        closer,
        _lease: lease,
    }
}

/// A spliced connection on each backend, `a`'s first sample taken.
fn pair(pool: &Arc<Pool>) -> (Conn, Conn) {
    let a = connect(pool, 1, "a");
    let b = connect(pool, 2, "b");
    probe(pool, "a");
    (a, b)
}

fn id(pool: &Pool, name: &str) -> BackendId {
    pool.probing()
        .probe_targets()
        .into_iter()
        .find(|(_, c)| c.name == name)
        .unwrap()
        .0
}

/// A passing probe of `name` now; its outcome as recorded.
fn probe(pool: &Pool, name: &str) -> (ProbeOutcome, String) {
    let b = id(pool, name);
    let epoch = pool.probing().epoch_of(b).unwrap();
    pool.probing().apply_probe(
        b,
        &Report::new(Verdict::Healthy, "connected"),
        epoch,
        Instant::now(),
    );
    let snap = pool.view().overview();
    let p = snap
        .backends
        .iter()
        .find(|x| x.name == name)
        .unwrap()
        .last_probe
        .clone()
        .unwrap();
    (p.outcome, p.detail)
}

fn state(pool: &Pool, name: &str) -> State {
    pool.view()
        .overview()
        .backends
        .into_iter()
        .find(|b| b.name == name)
        .unwrap()
        .state
}

/// Step both backends' probes every second for `secs`, `b`'s connection
/// receiving a byte each step (and `a`'s while `a_sends`).
async fn run(pool: &Pool, a: &Conn, b: &Conn, secs: u64, a_sends: bool) {
    for _ in 0..secs {
        time::advance(Duration::from_secs(1)).await;
        b.closer.bytes_down.fetch_add(1, Ordering::Relaxed);
        if a_sends {
            a.closer.bytes_down.fetch_add(1, Ordering::Relaxed);
        }
        probe(pool, "b");
    }
}

#[tokio::test(start_paused = true)]
async fn a_silent_backend_beside_a_talking_one_is_stalled_and_drained() {
    let pool = pool("10s");
    let (a, b) = pair(&pool);
    // a talks for a while, then goes silent; b keeps talking.
    run(&pool, &a, &b, 3, true).await;
    run(&pool, &a, &b, 9, false).await;
    assert_eq!(
        probe(&pool, "a").0,
        ProbeOutcome::Healthy,
        "9 s of silence is not 10"
    );
    run(&pool, &a, &b, 1, false).await;
    let (outcome, detail) = probe(&pool, "a");
    assert_eq!(outcome, ProbeOutcome::Stalled);
    assert!(
        detail.contains("1 connections received nothing for 10s while b sent"),
        "{detail}"
    );
    assert_eq!(state(&pool, "a"), State::Healthy, "fall is 2");
    assert_eq!(probe(&pool, "a").0, ProbeOutcome::Stalled);
    assert_eq!(state(&pool, "a"), State::Stalled);
    let q = pool.view().overview().backends[0].quarantine.unwrap();
    assert_eq!(q.reason.as_str(), "stalled");
    pool.drains().step(Instant::now());
    assert!(a.closer.is_closing(), "its clients go to b");
    assert!(!b.closer.is_closing());
}

#[tokio::test(start_paused = true)]
async fn a_quiet_pool_changes_nothing() {
    let pool = pool("10s");
    let a = connect(&pool, 1, "a");
    let _b = connect(&pool, 2, "b");
    for _ in 0..30 {
        time::advance(Duration::from_secs(1)).await;
        assert_eq!(probe(&pool, "a").0, ProbeOutcome::Healthy);
        assert_eq!(probe(&pool, "b").0, ProbeOutcome::Healthy);
    }
    assert!(!a.closer.is_closing());
}

#[tokio::test(start_paused = true)]
async fn young_connections_are_not_judged_and_do_not_hide_old_silent_ones() {
    let pool = pool("10s");
    let (a, b) = pair(&pool);
    run(&pool, &a, &b, 9, false).await;
    assert_eq!(
        probe(&pool, "a").0,
        ProbeOutcome::Healthy,
        "9 s old: not judged yet"
    );
    run(&pool, &a, &b, 2, false).await;
    // A new client on a that gets its handshake bytes: the old one is
    // still silent, so a is stalled anyway.
    let fresh = connect(&pool, 3, "a");
    fresh.closer.bytes_down.fetch_add(100, Ordering::Relaxed);
    assert_eq!(probe(&pool, "a").0, ProbeOutcome::Stalled);
}

/// The contract's "every spliced connection received nothing": a young
/// connection that is still being answered is one that did not, so its
/// backend is not stalled, however long an older one has been silent.
#[tokio::test(start_paused = true)]
async fn a_young_connection_still_receiving_keeps_its_backend_from_stalling() {
    let pool = pool("10s");
    let (a, b) = pair(&pool);
    run(&pool, &a, &b, 8, false).await;
    // A new client on a; its first sample sees its handshake.
    let fresh = connect(&pool, 3, "a");
    fresh.closer.bytes_down.fetch_add(100, Ordering::Relaxed);
    assert_eq!(probe(&pool, "a").0, ProbeOutcome::Healthy);
    // a answers it at every step, past the old one's 10 s of silence.
    for step in 1..=6 {
        run(&pool, &a, &b, 1, false).await;
        fresh.closer.bytes_down.fetch_add(10, Ordering::Relaxed);
        let (outcome, detail) = probe(&pool, "a");
        assert_eq!(outcome, ProbeOutcome::Healthy, "step {step}: {detail}");
    }
    assert_eq!(state(&pool, "a"), State::Healthy);
    assert!(!fresh.closer.is_closing() && !a.closer.is_closing());
    // Once a stops answering it too, both are silent: stalled after 10 s.
    run(&pool, &a, &b, 9, false).await;
    assert_eq!(
        probe(&pool, "a").0,
        ProbeOutcome::Healthy,
        "9 s since its last byte"
    );
    run(&pool, &a, &b, 1, false).await;
    let (outcome, detail) = probe(&pool, "a");
    assert_eq!(outcome, ProbeOutcome::Stalled);
    assert!(
        detail.contains("2 connections received nothing"),
        "{detail}"
    );
}

/// A first sample that comes before the node's greeting does not make
/// the greeting count as service: the old silent connection still decides.
#[tokio::test(start_paused = true)]
async fn a_greeting_after_the_first_sample_does_not_hide_a_stall() {
    let pool = pool("10s");
    let (a, b) = pair(&pool);
    run(&pool, &a, &b, 11, false).await;
    // A new client on a, sampled (by b's probe) before a greets it.
    let fresh = connect(&pool, 3, "a");
    probe(&pool, "b");
    time::advance(Duration::from_millis(200)).await;
    fresh.closer.bytes_down.fetch_add(100, Ordering::Relaxed);
    let (outcome, detail) = probe(&pool, "a");
    assert_eq!(outcome, ProbeOutcome::Stalled, "{detail}");
    assert!(
        detail.contains("1 connections received nothing"),
        "{detail}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_probe_keeps_its_verdict_and_off_means_off() {
    let pool = pool("10s");
    let (a, b) = pair(&pool);
    run(&pool, &a, &b, 11, false).await;
    let ida = id(&pool, "a");
    let epoch = pool.probing().epoch_of(ida).unwrap();
    pool.probing().apply_probe(
        ida,
        &Report::new(Verdict::Down, "refused"),
        epoch,
        Instant::now(),
    );
    let snap = pool.view().overview();
    assert_eq!(
        snap.backends[0].last_probe.as_ref().unwrap().outcome,
        ProbeOutcome::Down
    );

    let off = pool_off();
    let a = connect(&off, 1, "a");
    let b = connect(&off, 2, "b");
    probe(&off, "a");
    run(&off, &a, &b, 30, false).await;
    assert_eq!(probe(&off, "a").0, ProbeOutcome::Healthy);
}

fn pool_off() -> Arc<Pool> {
    pool("0s")
}

/// One second of a request/response exchange on `c`: the client asks (the
/// connection owes an answer) and, if `answered`, the backend answers.
fn exchange(c: &Conn, answered: bool) {
    c.closer.bytes_up.fetch_add(1, Ordering::Relaxed);
    c.closer.owes.store(true, Ordering::Relaxed);
    if answered {
        c.closer.bytes_down.fetch_add(1, Ordering::Relaxed);
        c.closer.owes.store(false, Ordering::Relaxed);
    }
}

/// Step both backends' probes every second for `secs`: `b` answers a
/// request each step; `a`'s client asks while `a_asks`, answered while
/// `a_answers`.
async fn run_requests(pool: &Pool, a: &Conn, b: &Conn, secs: u64, a_asks: bool, a_answers: bool) {
    for _ in 0..secs {
        time::advance(Duration::from_secs(1)).await;
        exchange(b, true);
        if a_asks {
            exchange(a, a_answers);
        }
        probe(pool, "b");
    }
}

#[tokio::test(start_paused = true)]
async fn under_request_quiet_clients_never_stall_their_backend() {
    for (rule, expected) in [
        ("push", ProbeOutcome::Stalled),
        ("request", ProbeOutcome::Healthy),
    ] {
        let pool = pool_with("10s", rule);
        let (a, b) = pair(&pool);
        // a's client got its answers, then asks nothing; b's keeps asking.
        run_requests(&pool, &a, &b, 2, true, true).await;
        run_requests(&pool, &a, &b, 30, false, false).await;
        assert_eq!(probe(&pool, "a").0, expected, "{rule}");
    }
}

#[tokio::test(start_paused = true)]
async fn under_request_a_backend_that_leaves_requests_unanswered_is_stalled() {
    let pool = pool_with("10s", "request");
    let (a, b) = pair(&pool);
    run_requests(&pool, &a, &b, 3, true, true).await;
    // Idle for 20 s, then one request a never answers: the silence counts
    // from the request, not from a's last byte.
    run_requests(&pool, &a, &b, 20, false, false).await;
    run_requests(&pool, &a, &b, 1, true, false).await;
    assert_eq!(probe(&pool, "a").0, ProbeOutcome::Healthy, "owed for 1 s");
    run_requests(&pool, &a, &b, 9, false, false).await;
    assert_eq!(
        probe(&pool, "a").0,
        ProbeOutcome::Healthy,
        "owed for 9 s of 10"
    );
    run_requests(&pool, &a, &b, 2, false, false).await;
    let (outcome, detail) = probe(&pool, "a");
    assert_eq!(outcome, ProbeOutcome::Stalled);
    assert!(
        detail.contains("1 connections waited for an answer for 10s while b sent"),
        "{detail}"
    );
    // A quiet client beside the unanswered one keeps a from being judged:
    // one client's unanswered bytes do not decide for the others.
    let pool = pool_with("10s", "request");
    let a = connect(&pool, 1, "a");
    let quiet = connect(&pool, 3, "a");
    let b = connect(&pool, 2, "b");
    probe(&pool, "a");
    run_requests(&pool, &a, &b, 15, true, false).await;
    assert_eq!(probe(&pool, "a").0, ProbeOutcome::Healthy);
    // Once it asks too and is not answered, a is stalled.
    exchange(&quiet, false);
    run_requests(&pool, &a, &b, 11, true, false).await;
    assert_eq!(probe(&pool, "a").0, ProbeOutcome::Stalled);
}
