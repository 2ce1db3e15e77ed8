//! Manual quarantine, release, stale probe results and the last-leg rule,
//! driven through the library: the server runs in the test's runtime and the
//! test acts on its pools (`quarantine`, `release`) and reads their status.
//!
//! Backends are simulated Litecoin P2P nodes probed with `bitcoin-p2p`.

use std::time::Duration;

use crate::support::admin_http::backend;
use crate::support::admin_wait::wait_status;
use crate::support::inproc::{Running, T};
use crate::support::{wait_until, within};
use pin_proxy::inspect::{BackendStatus, ProbeOutcome, State};
use pin_proxy::sim::simnode::SimNode;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

const REGTEST: [u8; 4] = [0xfa, 0xbf, 0xb5, 0xda];

async fn sim(height: u64) -> SimNode {
    SimNode::start("127.0.0.1:0".parse().unwrap(), REGTEST, height)
        .await
        .unwrap()
}

/// Pool `p` in front of `nodes` (named a, b, ...), probed every `interval`
/// with `timeout`; rebalancing off so only the rules under test move clients,
/// and drains at once (their spread has its own tests).
fn yaml(nodes: &[&SimNode], interval: &str, timeout: &str) -> String {
    let backends: Vec<String> = nodes
        .iter()
        .zip('a'..)
        .map(|(n, name)| format!("{{ name: {name}, addr: \"{}\" }}", n.addr()))
        .collect();
    format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    connect_timeout: 300ms\n    \
         rebalance: {{ interval: 0s }}\n    \
         quarantine: {{ base: 1h, max: 1h, failures: 3 }}\n    \
         health: {{ probe: bitcoin-p2p, network: litecoin-regtest, interval: {interval}, \
         timeout: {timeout}, fall: 2, rise: 1, drain_spread: 0s }}\n    backends: [{}]\n",
        backends.join(", ")
    )
}

/// Wait until the proxy closes `stream`.
async fn closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    within("connection closed by the proxy", T, async {
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_quarantine_drains_and_lasts_exactly_its_window_despite_passing_probes() {
    const WINDOW: Duration = Duration::from_millis(1500);
    let (a, b) = (sim(100).await, sim(100).await);
    let proxy = Running::start(&yaml(&[&a, &b], "100ms", "300ms"));
    proxy.wait_state("a", State::Healthy).await;
    proxy.wait_state("b", State::Healthy).await;
    let mut on_a = proxy.client().await;
    let _on_b = proxy.client().await;
    proxy.wait_connections(&[("a", 1), ("b", 1)]).await;

    let started = Instant::now();
    proxy.pool().operator().quarantine("a", WINDOW).unwrap();
    let passed_before = proxy.probes("a", ProbeOutcome::Healthy);
    let q = proxy.backend("a").quarantine.expect("quarantined");
    assert_eq!(
        (proxy.state("a").as_str(), q.reason.as_str()),
        ("quarantined", "manual")
    );
    closed(&mut on_a).await;
    // No new client goes to the quarantined backend, however empty it is.
    let _next = proxy.client().await;
    proxy.wait_connections(&[("a", 0), ("b", 2)]).await;

    // Watch A until it returns. Real sockets, so real time: the window is
    // checked by what must hold whatever the scheduling, never by how soon
    // A came back (that bound is only the wait's own, `T`).
    let window_end = started + WINDOW;
    let mut in_window = None;
    let back = wait_status(&proxy, "a back after its window", T, |status| {
        let seen: BackendStatus =
            serde_json::from_value(backend(status, "p", "a").clone()).expect("a backend's status");
        let passed = proxy.probes("a", ProbeOutcome::Healthy) - passed_before;
        let at = Instant::now();
        if at < window_end {
            // Read before the window could have ended.
            assert_eq!(seen.state, State::Quarantined, "returned inside its window");
            in_window = Some(passed);
            None
        } else {
            (seen.state == State::Healthy).then(|| (seen, started.elapsed()))
        }
    })
    .await;
    let (returned, lasted) = back;
    assert!(
        lasted >= WINDOW,
        "window of {WINDOW:?} ended after {lasted:?}"
    );
    let passed = in_window.expect("a seen inside its window");
    assert!(
        passed >= 5,
        "only {passed} probes passed inside the window: it was not tested against them"
    );
    // Window over, then a passing probe, then healthy: the probe that
    // brought A back is not older than the window's end.
    let probe = returned.last_probe.expect("a probed");
    assert_eq!(probe.outcome, ProbeOutcome::Healthy);
    assert!(
        probe.at >= q.until,
        "returned on a probe at {} for a window until {}",
        probe.at,
        q.until
    );
    assert_eq!(returned.quarantine, None);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_ends_the_window_but_waits_for_a_passing_probe() {
    let (a, b) = (sim(100).await, sim(100).await);
    let proxy = Running::start(&yaml(&[&a, &b], "100ms", "300ms"));
    proxy.wait_state("a", State::Healthy).await;
    proxy.wait_state("b", State::Healthy).await;
    assert_eq!(
        proxy.pool().operator().release("b"),
        Ok(false),
        "b is not quarantined"
    );
    assert_eq!(proxy.state("b"), State::Healthy);
    assert!(proxy.pool().operator().release("nope").is_err());
    assert!(
        proxy
            .pool()
            .operator()
            .quarantine("nope", Duration::from_secs(1))
            .is_err()
    );

    proxy
        .pool()
        .operator()
        .quarantine("a", Duration::from_secs(3600))
        .unwrap();
    // Reached but not answering: the probes after the release say unknown.
    a.set_silent(true);
    let unknown = proxy.probes("a", ProbeOutcome::Unknown);
    assert_eq!(proxy.pool().operator().release("a"), Ok(true));
    wait_until("two unknown probes after the release", T, || {
        proxy.probes("a", ProbeOutcome::Unknown) >= unknown + 2
    })
    .await;
    assert_eq!(
        proxy.state("a"),
        State::Quarantined,
        "returned without a passed probe"
    );

    a.set_silent(false);
    proxy.wait_state("a", State::Healthy).await;
    assert_eq!(proxy.backend("a").quarantine, None);
    proxy.stop().await;
}

/// A probe that started before a manual quarantine reports after it: its
/// result is dropped, not recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_result_that_raced_a_manual_quarantine_is_dropped() {
    let a = sim(100).await;
    // A silent node holds a probe for its whole timeout: a long time in flight.
    let proxy = Running::start(&yaml(&[&a], "600ms", "800ms"));
    proxy.wait_state("a", State::Healthy).await;

    a.set_silent(true);
    let dialled = a.accepted();
    wait_until("next probe in flight", T, || a.accepted() > dialled).await;
    proxy
        .pool()
        .operator()
        .quarantine("a", Duration::from_millis(50))
        .unwrap();
    wait_until("probe gave up", T, || a.live() == 0).await;
    a.set_silent(false);

    // The next probe passes and, the short window being over, brings A back.
    // Until then the stale "unknown" must never show.
    wait_until("a back after a passed probe", T, || {
        let b = proxy.backend("a");
        let outcome = b.last_probe.map(|p| p.outcome);
        assert_eq!(
            outcome,
            Some(ProbeOutcome::Healthy),
            "the stale probe result was applied"
        );
        b.state == State::Healthy
    })
    .await;
    assert_eq!(proxy.probes("a", ProbeOutcome::Unknown), 0);
    proxy.stop().await;
}

/// One client on each of `a` and `b`, then both quarantined by hand, B
/// first: B's client is drained, A's (returned) is kept as the last leg.
async fn both_out_last_leg_on_a(proxy: &Running) -> TcpStream {
    proxy.wait_state("a", State::Healthy).await;
    proxy.wait_state("b", State::Healthy).await;
    let first = proxy.client().await;
    let mut on_b = proxy.client().await;
    proxy.wait_connections(&[("a", 1), ("b", 1)]).await;
    proxy
        .pool()
        .operator()
        .quarantine("b", Duration::from_secs(3600))
        .unwrap();
    closed(&mut on_b).await;
    proxy
        .pool()
        .operator()
        .quarantine("a", Duration::from_secs(3600))
        .unwrap();
    first
}

/// With every backend taken out, the last leg keeps its clients and takes
/// new ones (fail open); once a peer is usable again it is drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_leg_is_kept_until_a_peer_is_usable_again() {
    let (a, b) = (sim(100).await, sim(100).await);
    let proxy = Running::start(&yaml(&[&a, &b], "100ms", "300ms"));
    let mut first = both_out_last_leg_on_a(&proxy).await;
    assert!(proxy.none_closing("a"), "the last leg was drained");
    let mut second = proxy.client().await;
    proxy.wait_connections(&[("a", 2), ("b", 0)]).await;
    assert!(proxy.none_closing("a"), "the last leg was drained");

    // B comes back (after a passed probe): A's clients are drained at once.
    proxy.pool().operator().release("b").unwrap();
    proxy.wait_state("b", State::Healthy).await;
    closed(&mut first).await;
    closed(&mut second).await;
    proxy.wait_connections(&[("a", 0)]).await;
    assert_eq!(proxy.state("a"), State::Quarantined);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_two_pools_is_probed_once_per_interval() {
    let node = sim(1000).await;
    let one = yaml(&[&node], "300ms", "200ms");
    let two = one
        .replacen("pools:\n", "", 1)
        .replace("name: p\n", "name: q\n");
    let proxy = Running::start(&format!("{one}{two}"));
    // Both pools receive every result of the one shared probe task.
    wait_until("five probes applied to each pool", T, || {
        (0..2).all(|i| proxy.probes_applied(i) >= 5)
    })
    .await;
    let (p, q, connects) = (
        proxy.probes_applied(0),
        proxy.probes_applied(1),
        node.accepted() as u64,
    );
    assert!(p.abs_diff(q) <= 1, "pools saw {p} and {q} results");
    assert!(
        connects <= p.max(q) + 1,
        "{connects} probe connections for {p} results per pool: probed once per pool, not once per interval"
    );
    proxy.stop().await;
}

/// Two backends out, the last leg kept on A; both released at once. B's
/// probe passes first: A's clients stay, for A's own probe to decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_released_together_keep_the_last_leg() {
    let (a, b) = (sim(100).await, sim(100).await);
    let proxy = Running::start(&yaml(&[&a, &b], "100ms", "300ms"));
    let _first = both_out_last_leg_on_a(&proxy).await;
    let _second = proxy.client().await;
    proxy.wait_connections(&[("a", 2), ("b", 0)]).await;

    // A's probes cannot pass yet, so B is surely back first.
    a.set_silent(true);
    assert_eq!(proxy.pool().operator().release("b"), Ok(true));
    assert_eq!(proxy.pool().operator().release("a"), Ok(true));
    proxy.wait_state("b", State::Healthy).await;
    let unknown = proxy.probes("a", ProbeOutcome::Unknown);
    wait_until("a probed after b's return", T, || {
        proxy.probes("a", ProbeOutcome::Unknown) > unknown
    })
    .await;
    assert!(proxy.none_closing("a"), "A's kept clients were drained");
    assert_eq!(
        proxy.backend("a").connections,
        2,
        "A's kept clients were drained"
    );
    a.set_silent(false);
    proxy.wait_state("a", State::Healthy).await;
    assert!(proxy.none_closing("a"), "A's kept clients were drained");
    proxy.wait_connections(&[("a", 2), ("b", 0)]).await;
    proxy.stop().await;
}

/// The probes that bring a backend back run when its window ends or it is
/// released, not up to an interval later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_a_window_and_a_release_are_probed_at_once() {
    const WINDOW: Duration = Duration::from_millis(300);
    let a = sim(100).await;
    // An interval far beyond the test: only the end of a window probes.
    let proxy = Running::start(&yaml(&[&a], "1h", "300ms"));
    proxy.wait_state("a", State::Healthy).await;
    let passed = proxy.probes("a", ProbeOutcome::Healthy);

    let start = Instant::now();
    proxy.pool().operator().quarantine("a", WINDOW).unwrap();
    proxy.wait_state("a", State::Healthy).await;
    assert!(start.elapsed() >= WINDOW, "back before its window ended");
    assert_eq!(proxy.probes("a", ProbeOutcome::Healthy), passed + 1);

    proxy
        .pool()
        .operator()
        .quarantine("a", Duration::from_secs(3600))
        .unwrap();
    assert_eq!(proxy.state("a"), State::Quarantined);
    assert_eq!(proxy.pool().operator().release("a"), Ok(true));
    proxy.wait_state("a", State::Healthy).await;
    assert_eq!(proxy.probes("a", ProbeOutcome::Healthy), passed + 2);
    proxy.stop().await;
}
