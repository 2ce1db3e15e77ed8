//! A node that lies about its height cannot capture a pool, through the real
//! binary: a claim far above every other backend that its node does not
//! prove makes nobody `lagging`. A liar whose own headers contradict its
//! claim is `unhealthy`, with a detail saying so; one that cannot be asked
//! (a Blockbook height) is `unknown`, its height not counted. Liars that
//! agree with each other do not outvote a node that proves its height. Real
//! lag is still caught: by two nodes that agree, or by one that proves its
//! height with headers.
//!
//! Liars are simulated nodes that announce more than they serve headers for
//! ([`SimNode::set_headers_to`]), a script node announcing any
//! `start_height` or serving headers with broken work, and a Blockbook REST
//! twin with any `bestHeight`. Where a test must show that nothing happens,
//! it waits for the proxy's own probe counters to move on (`fall: 2`: a bad
//! verdict would have acted by then) instead of sleeping. Litecoin Core
//! tests skip when litecoind is absent (unless `PIN_PROXY_REQUIRE_PEERS=1`).

use std::net::SocketAddr;
use std::path::Path;

use crate::support::blockbook::RestTwin;
use crate::support::liar::{
    Clients, REGTEST, ScriptNode, T, about, acted_on, admin_addr, assert_untouched, backend,
    config, headers_with_bad_work, judged_contradicted, probed, status_of, wait_healthy_probes,
    wait_live, with_url,
};
use crate::support::litecoind::Litecoind;
use crate::support::live_on;
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use pin_proxy::config::Config;
use pin_proxy::inspect::Pool;
use pin_proxy::inspect::{ProbeOutcome, Proof, Report, Verdict};
use pin_proxy::sim::simnode::SimNode;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LIAR: u64 = 2_000_000_000;

/// Why a liar that serves no headers is contradicted (above genesis, or
/// above what the honest nodes' proofs taught the proxy already).
const NO_HEADERS: &str = "contradicted by its own headers: no headers above height";

/// Healthy probes each honest backend must pass after the liar was judged.
const MORE_PROBES: u32 = 4;

async fn sim(height: u64) -> SimNode {
    SimNode::start("127.0.0.1:0".parse().unwrap(), REGTEST, height)
        .await
        .unwrap()
}

/// A simulated node announcing `claim` that serves headers up to `headers_to`.
async fn liar(claim: u64, headers_to: u64) -> SimNode {
    let node = sim(claim).await;
    node.set_headers_to(headers_to);
    node
}

fn start(probe: &str, backends: &[String]) -> Proxy {
    Proxy::start_blocking(&config("127.0.0.1:0", "127.0.0.1:0", probe, backends))
}

/// Wait until `liar`'s probe is `unknown`, or one of `honest` was acted on
/// (the old rule: fail at once, with the event). Its detail must say its
/// height is not counted. (Why it is not proven is checked on `/status`
/// later: the first judgement may come before the proof was asked for, see
/// the last test.)
fn judged_unproven(proxy: &Proxy, liar: &str, honest: &[&str]) -> Value {
    let unknown = probed(liar, "unknown");
    let event =
        proxy.wait_event_blocking(|e| unknown(e) || honest.iter().any(|h| acted_on(e, h)), T);
    assert!(unknown(&event), "an honest backend was acted on: {event}");
    let detail = event["detail"].as_str().unwrap();
    assert!(
        detail.contains("not counted") && detail.contains("not proven"),
        "liar's detail: {detail}"
    );
    event
}

/// `/status` shows `liar` out as `unhealthy`, its last probe saying `why`.
async fn assert_contradicted(admin: SocketAddr, liar: &str, why: &str) {
    let status = status_of(admin, liar).await;
    assert_eq!(status["state"], "unhealthy", "{status}");
    assert_eq!(status["last_probe"]["outcome"], "unhealthy", "{status}");
    let detail = status["last_probe"]["detail"].as_str().unwrap();
    assert!(detail.contains(why), "{liar}'s detail: {detail}");
}

/// `/status` shows `liar` unknown, its last probe not counted because `why`.
async fn assert_not_counted(admin: SocketAddr, liar: &str, why: &str) {
    let status = status_of(admin, liar).await;
    assert_eq!(status["state"], "unknown", "{status}");
    assert_eq!(status["last_probe"]["outcome"], "unknown", "{status}");
    let detail = status["last_probe"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("not counted") && detail.contains(why),
        "{liar}'s detail: {detail}"
    );
}

/// Two real Litecoin Core nodes at 20 (mined apart: corroborated by
/// height alone) and a liar at 2e9 that serves no headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liar_beside_two_real_litecoin_nodes_drains_nobody() {
    let Some(a) = Litecoind::start(None) else {
        return;
    };
    let Some(b) = Litecoind::start(None) else {
        return;
    };
    a.mine(20);
    b.mine(20);
    let liar = liar(LIAR, 0).await;
    let proxy = start(
        "bitcoin-p2p",
        &[
            backend("a", a.p2p_addr()),
            backend("b", b.p2p_addr()),
            backend("liar", liar.addr()),
        ],
    );
    let admin = admin_addr(&proxy);
    for h in ["a", "b"] {
        let first = proxy.wait_event(about("probe", h), T).await;
        let got = (&first["outcome"], &first["height"]);
        assert_eq!(got, (&"healthy".into(), &20.into()), "{first}");
    }
    judged_contradicted(&proxy, "liar", &["a", "b"], NO_HEADERS);
    proxy.wait_event(about("quarantined", "liar"), T).await;
    let _clients = Clients::spawn(&proxy, 6).await;
    wait_live(&proxy, &[("a", 3), ("b", 3), ("liar", 0)]).await;
    wait_healthy_probes(admin, &["a", "b"], MORE_PROBES).await;
    assert_contradicted(admin, "liar", NO_HEADERS).await;
    assert_untouched(&proxy, &["a", "b"]);
    wait_live(&proxy, &[("a", 3), ("b", 3), ("liar", 0)]).await;
}

/// A real Litecoin Core node at 120, its height provable, and two script
/// nodes that both claim 2e9 and serve no headers: the liars agree with
/// each other, but proof outranks that. The honest node stays healthy and
/// ends with every client; the liars are unhealthy, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_liars_that_agree_do_not_outvote_a_node_that_proves_its_height() {
    let Some(honest) = Litecoind::start(None) else {
        return;
    };
    honest.mine(120);
    let claim = i32::try_from(LIAR).unwrap();
    let (l1, l2) = (
        ScriptNode::start(claim, Vec::new()).await,
        ScriptNode::start(claim, Vec::new()).await,
    );
    let proxy = start(
        "bitcoin-p2p",
        &[
            backend("a", honest.p2p_addr()),
            backend("l1", l1.addr),
            backend("l2", l2.addr),
        ],
    );
    let admin = admin_addr(&proxy);
    let _clients = Clients::spawn(&proxy, 6).await;
    for liar in ["l1", "l2"] {
        judged_contradicted(&proxy, liar, &["a"], NO_HEADERS);
        proxy.wait_event(about("quarantined", liar), T).await;
        assert_contradicted(admin, liar, NO_HEADERS).await;
    }
    wait_live(&proxy, &[("a", 6), ("l1", 0), ("l2", 0)]).await;
    wait_healthy_probes(admin, &["a"], MORE_PROBES).await;
    assert_untouched(&proxy, &["a"]);
    let a = status_of(admin, "a").await;
    assert_eq!(
        (&a["state"], &a["height"]),
        (&"healthy".into(), &120.into())
    );
}

/// Blockbook twins at 20, 20 and 2e9: a REST height cannot be
/// proven, so the lone one never counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blockbook_reporting_a_far_height_makes_nobody_lag() {
    let nodes = [Node::hold().await, Node::hold().await, Node::hold().await];
    let twins = [
        RestTwin::start_at(20).await,
        RestTwin::start_at(20).await,
        RestTwin::start_at(LIAR).await,
    ];
    let names = ["x", "y", "liar"];
    let backends: Vec<String> = (0..3)
        .map(|i| with_url(names[i], nodes[i].addr, &twins[i].url()))
        .collect();
    let proxy = start("blockbook", &backends);
    let admin = admin_addr(&proxy);
    judged_unproven(&proxy, "liar", &["x", "y"]);
    let _clients = Clients::spawn(&proxy, 3).await;
    wait_live(&proxy, &[("x", 1), ("y", 1), ("liar", 1)]).await;
    wait_healthy_probes(admin, &["x", "y"], MORE_PROBES).await;
    assert_untouched(&proxy, &["x", "y"]);
    assert_not_counted(admin, "liar", "not proven: no headers were checked").await;
}

/// One honest simulated node at 120 beside a liar announcing `claim` that
/// serves no headers: the honest one is never acted on.
async fn one_honest_beside_a_liar(claim: u64) {
    let (honest, liar) = (sim(120).await, liar(claim, 0).await);
    let proxy = start(
        "bitcoin-p2p",
        &[backend("a", honest.addr()), backend("liar", liar.addr())],
    );
    let admin = admin_addr(&proxy);
    let judged = judged_contradicted(&proxy, "liar", &["a"], NO_HEADERS);
    assert_eq!(judged["height"], claim);
    proxy.wait_event(about("quarantined", "liar"), T).await;
    let _clients = Clients::spawn(&proxy, 4).await;
    wait_live(&proxy, &[("a", 4), ("liar", 0)]).await;
    wait_healthy_probes(admin, &["a"], MORE_PROBES).await;
    assert_untouched(&proxy, &["a"]);
    assert_eq!(status_of(admin, "a").await["state"], "healthy");
    assert_contradicted(admin, "liar", NO_HEADERS).await;
}

/// One honest node beside a liar at 2e9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_honest_node_beside_a_liar_is_never_lagging() {
    one_honest_beside_a_liar(LIAR).await;
}

/// The largest `start_height` the wire can carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liar_at_i32_max_makes_nobody_lag() {
    one_honest_beside_a_liar(i32::MAX as u64).await;
}

/// A negative `start_height` is no height at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_start_height_is_unknown_and_makes_nobody_lag() {
    let (a, b) = (sim(100).await, sim(100).await);
    let negative = ScriptNode::start(-5, Vec::new()).await;
    let proxy = start(
        "bitcoin-p2p",
        &[
            backend("a", a.addr()),
            backend("b", b.addr()),
            backend("neg", negative.addr),
        ],
    );
    let admin = admin_addr(&proxy);
    let unknown = proxy.wait_event(probed("neg", "unknown"), T).await;
    assert_eq!(unknown["detail"], "negative start height -5", "{unknown}");
    assert!(unknown["height"].is_null(), "{unknown}");
    wait_healthy_probes(admin, &["a", "b"], MORE_PROBES).await;
    assert_untouched(&proxy, &["a", "b", "neg"]);
}

/// A liar added by a reload drains nobody already pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liar_added_by_reload_drains_nobody() {
    let (a, b, liar) = (sim(100).await, sim(100).await, liar(LIAR, 0).await);
    let honest = [backend("a", a.addr()), backend("b", b.addr())];
    let proxy = start("bitcoin-p2p", &honest);
    let admin = admin_addr(&proxy);
    for h in ["a", "b"] {
        proxy.wait_event(probed(h, "healthy"), T).await;
    }
    let _clients = Clients::spawn(&proxy, 4).await;
    wait_live(&proxy, &[("a", 2), ("b", 2)]).await;

    let mut backends = honest.to_vec();
    backends.push(backend("liar", liar.addr()));
    let (listen, admin_at) = (proxy.addr("p").to_string(), admin.to_string());
    let outcome = proxy
        .reload(&config(&listen, &admin_at, "bitcoin-p2p", &backends))
        .await;
    assert_eq!(outcome["message"], "reloaded", "{outcome}");
    judged_contradicted(&proxy, "liar", &["a", "b"], NO_HEADERS);
    wait_healthy_probes(admin, &["a", "b"], MORE_PROBES).await;
    assert_contradicted(admin, "liar", NO_HEADERS).await;
    assert_untouched(&proxy, &["a", "b"]);
    wait_live(&proxy, &[("a", 2), ("b", 2), ("liar", 0)]).await;
    for h in ["a", "b"] {
        assert_eq!(status_of(admin, h).await["state"], "healthy");
    }
}

/// A node that stops while two others move on past `max_lag_blocks`
/// is lagging (they corroborate each other) and drained onto them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_left_behind_by_two_that_agree_is_lagging_and_drained() {
    let (a, b, c) = (sim(100).await, sim(100).await, sim(100).await);
    let proxy = start(
        "bitcoin-p2p",
        &[
            backend("a", a.addr()),
            backend("b", b.addr()),
            backend("c", c.addr()),
        ],
    );
    for h in ["a", "b", "c"] {
        proxy.wait_event(probed(h, "healthy"), T).await;
    }
    let _clients = Clients::spawn(&proxy, 3).await;
    wait_live(&proxy, &[("a", 1), ("b", 1), ("c", 1)]).await;

    a.set_height(110);
    b.set_height(111);
    let lag = proxy.wait_event(probed("c", "lagging"), T).await;
    assert_eq!(lag["height"], 100);
    assert_eq!(
        proxy.wait_event(about("quarantined", "c"), T).await["reason"],
        "lagging"
    );
    let drained = proxy.wait_event(about("drained", "c"), T).await;
    assert_eq!(
        (&drained["reason"], &drained["connections"]),
        (&"lagging".into(), &1.into())
    );
    // Its client redials onto the two usable nodes.
    crate::support::wait_until("c's client on a or b", T, || {
        let events = proxy.events();
        let live = |h| live_on(&events, h).len();
        live("c") == 0 && live("a") + live("b") == 3
    })
    .await;
    let events = proxy.events();
    assert!(
        events
            .iter()
            .all(|e| !acted_on(e, "a") && !acted_on(e, "b"))
    );
}

/// In a two-node pool, a node 10 blocks ahead that proves it with
/// its headers makes the other lagging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_behind_one_that_proves_its_height_is_lagging() {
    let (a, b) = (sim(100).await, sim(100).await);
    let proxy = start(
        "bitcoin-p2p",
        &[backend("a", a.addr()), backend("b", b.addr())],
    );
    for h in ["a", "b"] {
        proxy.wait_event(probed(h, "healthy"), T).await;
    }
    let _clients = Clients::spawn(&proxy, 2).await;
    wait_live(&proxy, &[("a", 1), ("b", 1)]).await;
    b.set_height(110);
    assert_eq!(
        proxy.wait_event(probed("a", "lagging"), T).await["height"],
        100
    );
    proxy.wait_event(about("drained", "a"), T).await;
    wait_live(&proxy, &[("a", 0), ("b", 2)]).await;
    assert_b_untouched(&proxy);
}

/// B, ahead and proven, was never acted on nor judged unknown.
fn assert_b_untouched(proxy: &Proxy) {
    let events = proxy.events();
    let touched: Vec<_> = events
        .iter()
        .filter(|e| acted_on(e, "b") || probed("b", "unknown")(e))
        .collect();
    assert!(touched.is_empty(), "b was acted on: {touched:?}");
}

/// The same against Litecoin Core: two nodes that do not peer, one mines 10
/// more and proves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_node_behind_one_that_proves_its_height_is_lagging() {
    let Some(a) = Litecoind::start(None) else {
        return;
    };
    let Some(b) = Litecoind::start(None) else {
        return;
    };
    a.mine(20);
    b.mine(20);
    let proxy = start(
        "bitcoin-p2p",
        &[backend("a", a.p2p_addr()), backend("b", b.p2p_addr())],
    );
    for h in ["a", "b"] {
        proxy.wait_event(probed(h, "healthy"), T).await;
    }
    b.mine(10);
    assert_eq!(
        proxy.wait_event(probed("a", "lagging"), T).await["height"],
        20
    );
    assert_eq!(
        proxy.wait_event(about("quarantined", "a"), T).await["reason"],
        "lagging"
    );
    assert_b_untouched(&proxy);
}

/// A liar whose headers stop short of its claim, and one whose
/// headers lack the work: no one lagging, the liar unhealthy, contradicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liar_with_headers_that_stop_short_or_lack_work_is_not_counted() {
    let honest = sim(40).await;
    let short = liar(100, 30).await;
    let proxy = start(
        "bitcoin-p2p",
        &[backend("a", honest.addr()), backend("liar", short.addr())],
    );
    let admin = admin_addr(&proxy);
    // The first proof may find the headers to 30 learned already (from the
    // honest node's proof): then none above 30 is what it says.
    let why = "claimed 100";
    judged_contradicted(&proxy, "liar", &["a"], why);
    wait_healthy_probes(admin, &["a"], MORE_PROBES).await;
    assert_contradicted(admin, "liar", why).await;
    assert_untouched(&proxy, &["a"]);
    drop(proxy);

    // Broken above the honest node's 40: its proof teaches the proxy the
    // headers below, and the liar's proof starts there.
    let forged = ScriptNode::start(100, headers_with_bad_work(100, 50)).await;
    let proxy = start(
        "bitcoin-p2p",
        &[backend("a", honest.addr()), backend("liar", forged.addr)],
    );
    let admin = admin_addr(&proxy);
    let why = "invalid headers: header at height 50 lacks the proof of work its target asks for";
    judged_contradicted(&proxy, "liar", &["a"], why);
    wait_healthy_probes(admin, &["a"], MORE_PROBES).await;
    assert_contradicted(admin, "liar", why).await;
    assert_untouched(&proxy, &["a"]);
}

/// An in-process `bitcoin-p2p` pool of `a` and `liar` (ids 0 and 1) whose
/// probes the test applies itself.
fn honest_and_liar() -> Pool {
    let unreachable: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let backends = [backend("a", unreachable), backend("liar", unreachable)];
    let yaml = config("127.0.0.1:0", "127.0.0.1:0", "bitcoin-p2p", &backends);
    let config = Config::parse(&yaml, Path::new("liar.yaml")).unwrap();
    Pool::new(config.pools[0].clone(), CancellationToken::new())
}

/// A `bitcoin-p2p` probe asks `needs_proof` when the node's version
/// arrives; if another backend's first height is applied between that and
/// the probe's own result, the claim is judged unproven with no headers
/// asked for. Its detail says so, and the next probe asks for them.
#[test]
fn a_claim_judged_before_its_proof_was_wanted_says_no_headers_were_checked() {
    let pool = honest_and_liar();
    let (a, liar) = (0, 1);
    // The liar's version arrives while `a` has no height: no proof wanted.
    assert!(!pool.probing().needs_proof(liar, LIAR));
    // Then `a`'s first result lands, then the liar's.
    let now = Instant::now();
    let honest = Report::with_height(Verdict::Healthy, 20, "height 20");
    pool.probing()
        .apply_probe(a, &honest, pool.probing().epoch_of(a).unwrap(), now);
    let claim = Report::with_height(Verdict::Healthy, LIAR, format!("height {LIAR}"));
    pool.probing()
        .apply_probe(liar, &claim, pool.probing().epoch_of(liar).unwrap(), now);
    let status = pin_proxy::inspect::status(&pool);
    let probe = status.backends[1].last_probe.as_ref().unwrap();
    assert_eq!(probe.outcome, ProbeOutcome::Unknown);
    assert!(probe.detail.contains("not counted"), "{}", probe.detail);
    assert!(
        probe
            .detail
            .ends_with("not proven: no headers were checked"),
        "{}",
        probe.detail
    );
    // The next probe of the liar is asked to prove its claim.
    assert!(pool.probing().needs_proof(liar, LIAR));
}

/// A claim its own headers contradict is `unhealthy`, saying why; one
/// whose proof was cut short by the probe's timeout stays `unknown`.
#[test]
fn a_contradicted_claim_is_unhealthy_and_one_cut_short_is_unknown() {
    let pool = honest_and_liar();
    let (a, liar) = (0, 1);
    let now = Instant::now();
    let honest = Report::with_height(Verdict::Healthy, 20, "height 20");
    pool.probing()
        .apply_probe(a, &honest, pool.probing().epoch_of(a).unwrap(), now);
    let claim = |proof| Report {
        proof,
        ..Report::with_height(Verdict::Healthy, LIAR, format!("height {LIAR}"))
    };
    let last = |pool: &Pool| {
        pin_proxy::inspect::status(pool).backends[1]
            .last_probe
            .clone()
            .unwrap()
    };
    let why = "headers end at height 20, below the claimed 2000000000";
    let contradicted = claim(Proof::Contradicted(why.into()));
    pool.probing().apply_probe(
        liar,
        &contradicted,
        pool.probing().epoch_of(liar).unwrap(),
        now,
    );
    let probe = last(&pool);
    assert_eq!(probe.outcome, ProbeOutcome::Unhealthy);
    assert_eq!(
        probe.detail,
        format!("height {LIAR} contradicted by its own headers: {why}")
    );
    let why = "headers for height 2000000000 did not arrive in time";
    let cut_short = claim(Proof::Unproven(why.into()));
    pool.probing().apply_probe(
        liar,
        &cut_short,
        pool.probing().epoch_of(liar).unwrap(),
        now,
    );
    let probe = last(&pool);
    assert_eq!(probe.outcome, ProbeOutcome::Unknown);
    assert!(probe.detail.ends_with(why), "{}", probe.detail);
}
