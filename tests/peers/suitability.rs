//! Node suitability through the proxy, against real Litecoin Core regtest
//! nodes: a pool that requires services gives clients only to the nodes
//! that announce them (each client checks the node's `version` itself, and
//! the nodes' `getpeerinfo` shows where it landed); a pool none of whose
//! nodes can serve closes its clients at once, unspliced; a node restarted
//! with the flags returns; a reload and a live upgrade keep what the
//! probes learnt. Skips when litecoind is not installed (unless
//! `PIN_PROXY_REQUIRE_PEERS=1`).

use std::net::SocketAddr;
use std::time::Duration;

use pin_proxy::inspect::Services;
use serde_json::Value;

use crate::support::admin_http::{Kind, backend};
use crate::support::admin_wait::{wait_metrics, wait_status};
use crate::support::litecoind::Litecoind;
use crate::support::p2p_client::{self, Client, Ended};
use crate::support::proxy::{self, Proxy};

/// Bound on every wait.
const T: Duration = Duration::from_secs(15);

/// What makes Litecoin Core serve compact block filters.
const FILTERS: [&str; 2] = ["-blockfilterindex=1", "-peerblockfilters=1"];

/// The requirement of the filter tests, as the config names it.
const NEEDS: &str = "[network, witness, compact_filters]";

/// [`NEEDS`] as service bits, for the clients' own check.
fn needs() -> Services {
    ["network", "witness", "compact_filters"]
        .into_iter()
        .map(|n| Services::named(n).expect("a known service"))
        .fold(Services::NONE, Services::union)
}

/// A pool `ltc` of `backends` (name, address) probed every `interval` with
/// `health` besides, no rebalancing, quarantine windows of `window`; an
/// admin endpoint; `extra` pool lines.
fn yaml(
    backends: &[(&str, SocketAddr)],
    interval: &str,
    window: &str,
    health: &str,
    extra: &str,
) -> String {
    let list: Vec<String> = backends
        .iter()
        .map(|(name, addr)| format!("{{ name: {name}, addr: \"{addr}\" }}"))
        .collect();
    format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: ltc\n    listen: 127.0.0.1:0\n    \
         rebalance: {{ interval: 0s }}\n    quarantine: {{ base: {window}, max: {window} }}\n{extra}    \
         health: {{ probe: bitcoin-p2p, network: litecoin-regtest, interval: {interval}, \
         timeout: 10s, rise: 2, {health} }}\n    backends: [{}]\n",
        list.join(", ")
    )
}

/// Probes every 200 ms, half-second windows: judgements and returns come
/// fast.
fn fast(backends: &[(&str, SocketAddr)], health: &str) -> String {
    yaml(backends, "200ms", "500ms", health, "")
}

/// The `/status` of the moment each backend of `want` (name, state) is in
/// that state with the `node` its probe read.
async fn judged(admin: SocketAddr, want: &[(&str, &str)]) -> Value {
    let what = format!("backends {want:?} with their node facts");
    wait_status(admin, &what, T, |s| {
        want.iter()
            .all(|(name, state)| {
                let b = backend(s, "ltc", name);
                b["state"] == *state && b["node"].is_object()
            })
            .then(|| s.clone())
    })
    .await
}

/// The service names of a backend's `node`.
fn names(b: &Value) -> Vec<&str> {
    b["node"]["service_names"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A backend is out as unsuitable, its last probe naming `detail`, and
/// its `node` as the contract shows it.
fn assert_unsuitable(b: &Value, detail: &str) {
    assert_eq!(b["state"], "unsuitable", "{b}");
    assert_eq!(b["quarantine"]["reason"], "unsuitable", "{b}");
    assert_eq!(b["last_probe"]["outcome"], "unsuitable", "{b}");
    assert_eq!(b["last_probe"]["detail"], detail, "{b}");
    assert_node(b);
}

/// Its `node` has the fields a `bitcoin-p2p` probe reads.
fn assert_node(b: &Value) {
    let node = &b["node"];
    let hex = node["services"].as_str().unwrap_or_default();
    assert!(hex.starts_with("0x"), "{b}");
    assert!(names(b).contains(&"network_limited"), "{b}");
    assert!(node["protocol"].as_u64().unwrap_or(0) >= 70016, "{b}");
    let agent = node["user_agent"].as_str().unwrap_or_default();
    assert!(agent.starts_with("/LitecoinCore:0.21."), "{b}");
}

/// Whether the nodes are Debian's 0.21.2.1, whose announcements some
/// assertions spell out.
fn debian(b: &Value) -> bool {
    b["node"]["user_agent"] == "/LitecoinCore:0.21.2.1/"
}

/// The user agent of client `i` of the batch `tag`.
fn agent(tag: &str, i: usize) -> String {
    format!("/suitability-{tag}:{i}/")
}

/// `n` clients of the batch `tag` through the proxy, each handshaken and
/// each checking itself that the node it reached announces [`needs`].
fn clients(proxy: &Proxy, tag: &str, n: usize) -> Vec<Client> {
    (0..n)
        .map(|i| {
            let client = p2p_client::connect(proxy.addr("ltc"), &agent(tag, i), T)
                .unwrap_or_else(|e| panic!("client {i} of {tag}: {e}"));
            let seen = Services(client.node.services);
            let lacks = needs().missing_from(seen);
            assert!(
                lacks.is_empty(),
                "client {i} reached a node that lacks {lacks}"
            );
            client
        })
        .collect()
}

/// How many clients of the batch `tag` `node` lists among its peers.
fn on(node: &Litecoind, tag: &str) -> usize {
    let prefix = format!("/suitability-{tag}:");
    p2p_client::agents(node)
        .iter()
        .filter(|a| a.starts_with(&prefix))
        .count()
}

/// Wait until the backends of `want` (name, connections) hold that many.
async fn holding(admin: SocketAddr, want: &[(&str, u64)]) {
    let what = format!("connections {want:?}");
    wait_status(admin, &what, T, |s| {
        want.iter()
            .all(|(name, n)| backend(s, "ltc", name)["connections"] == *n)
            .then_some(())
    })
    .await;
}

/// `n` clients turned away: the odd ones send their `version` at once
/// (a node behind a splice would answer it), the even ones send nothing
/// and must see an orderly close. Neither receives a byte; then
/// `pin_proxy_rejected_total` counts them as `no_suitable_backend`.
async fn refused(proxy: &Proxy, tag: &str, n: usize) {
    for i in 0..n {
        let eager = i % 2 == 1;
        let says = eager.then(|| agent(tag, i));
        let (ended, after) = p2p_client::refused(proxy.addr("ltc"), says.as_deref(), T)
            .unwrap_or_else(|e| panic!("refused client {i} of {tag}: {e}"));
        eprintln!("refused client {i} ({ended:?} after {after:?})");
        if !eager {
            assert_eq!(ended, Ended::Closed, "a silent client sees EOF");
        }
    }
    let want = n as f64;
    let labels = [("pool", "ltc"), ("reason", "no_suitable_backend")];
    wait_metrics(proxy.admin(), "the refusals counted", T, |m| {
        let got = m.get("pin_proxy_rejected_total", Kind::Counter, &labels)?;
        assert!(got <= want, "{got} refusals of {n} clients");
        (got == want).then_some(())
    })
    .await;
    let events = proxy.named("rejected");
    assert!(
        events
            .iter()
            .all(|e| e["reason"] == "no_suitable_backend" && e["pool"] == "ltc"),
        "{events:?}"
    );
}

/// `pin_proxy_backend_suitable` of each backend of `want` (name, value).
async fn suitable(admin: SocketAddr, want: &[(&str, f64)]) {
    wait_metrics(admin, "pin_proxy_backend_suitable", T, |m| {
        want.iter()
            .all(|(name, v)| {
                let labels = [("pool", "ltc"), ("backend", *name)];
                m.get("pin_proxy_backend_suitable", Kind::Gauge, &labels) == Some(*v)
            })
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_lands_on_the_node_with_compact_filters() {
    let Some(filters) = Litecoind::start_with(None, &FILTERS) else {
        return;
    };
    let Some(plain) = Litecoind::start(None) else {
        return;
    };
    let nodes = [("filters", filters.p2p_addr()), ("plain", plain.p2p_addr())];
    let proxy = Proxy::start(&fast(&nodes, &format!("require_services: {NEEDS}"))).await;
    let admin = proxy.admin();
    let status = judged(admin, &[("filters", "healthy"), ("plain", "unsuitable")]).await;
    let (f, p) = (
        backend(&status, "ltc", "filters"),
        backend(&status, "ltc", "plain"),
    );
    eprintln!("with filters: {}\nwithout: {}", f["node"], p["node"]);
    assert_unsuitable(p, "lacks compact_filters");
    assert!(!names(p).contains(&"compact_filters"), "{p}");
    assert_node(f);
    assert!(names(f).contains(&"compact_filters"), "{f}");
    if debian(p) {
        assert_eq!(p["node"]["services"], "0x1000409");
        assert_eq!(f["node"]["services"], "0x1000449");
        assert_eq!(p["node"]["protocol"], 70016);
    }
    suitable(admin, &[("filters", 1.0), ("plain", 0.0)]).await;

    // Least-used-first would give every other one to the emptier node.
    let _held = clients(&proxy, "six", 6);
    holding(admin, &[("filters", 6), ("plain", 0)]).await;
    assert_eq!(on(&filters, "six"), 6);
    assert_eq!(on(&plain, "six"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_mwebd_preset_clients_are_closed_unspliced() {
    let Some(filters) = Litecoind::start_with(None, &FILTERS) else {
        return;
    };
    let Some(plain) = Litecoind::start(None) else {
        return;
    };
    let nodes = [("filters", filters.p2p_addr()), ("plain", plain.p2p_addr())];
    let proxy = Proxy::start(&fast(&nodes, "require_services: mwebd")).await;
    let admin = proxy.admin();
    let status = judged(admin, &[("filters", "unsuitable"), ("plain", "unsuitable")]).await;
    let (f, p) = (
        backend(&status, "ltc", "filters"),
        backend(&status, "ltc", "plain"),
    );
    // 0.21.2.1 predates NODE_MWEB_LIGHT_CLIENT (0.21.3): nothing serves mwebd.
    assert_unsuitable(f, "lacks mweb_light_client");
    assert_unsuitable(p, "lacks compact_filters, mweb_light_client");
    suitable(admin, &[("filters", 0.0), ("plain", 0.0)]).await;

    refused(&proxy, "mwebd", 6).await;
    assert_eq!(
        on(&filters, "mwebd"),
        0,
        "{:?}",
        p2p_client::agents(&filters)
    );
    assert_eq!(on(&plain, "mwebd"), 0, "{:?}", p2p_client::agents(&plain));
    let status = crate::support::admin_http::status(admin).await;
    assert_eq!(status["pools"][0]["connections"], 0, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_with_filters_returns_and_gets_clients() {
    let Some(filters) = Litecoind::start_with(None, &FILTERS) else {
        return;
    };
    let Some(mut plain) = Litecoind::start(None) else {
        return;
    };
    let nodes = [("filters", filters.p2p_addr()), ("plain", plain.p2p_addr())];
    let proxy = Proxy::start(&fast(&nodes, &format!("require_services: {NEEDS}"))).await;
    let admin = proxy.admin();
    judged(admin, &[("filters", "healthy"), ("plain", "unsuitable")]).await;
    let _before = clients(&proxy, "before", 2);
    holding(admin, &[("filters", 2), ("plain", 0)]).await;

    plain.stop();
    wait_status(admin, "a probe finding plain stopped", T, |s| {
        (backend(s, "ltc", "plain")["last_probe"]["outcome"] == "down").then_some(())
    })
    .await;
    plain.start_again(&FILTERS);
    let status = judged(admin, &[("filters", "healthy"), ("plain", "healthy")]).await;
    let p = backend(&status, "ltc", "plain");
    assert!(names(p).contains(&"compact_filters"), "{p}");
    assert_eq!(p["last_probe"]["outcome"], "healthy", "{p}");
    assert!(p["quarantine"].is_null(), "{p}");
    suitable(admin, &[("filters", 1.0), ("plain", 1.0)]).await;

    // The emptier node again, now that it can serve.
    let _after = clients(&proxy, "after", 2);
    holding(admin, &[("filters", 2), ("plain", 2)]).await;
    assert_eq!(on(&plain, "after"), 2);
    assert_eq!(on(&filters, "after"), 0);
    assert_eq!(on(&filters, "before"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_floor_above_the_nodes_refuses_every_client() {
    let Some(a) = Litecoind::start(None) else {
        return;
    };
    let Some(b) = Litecoind::start_with(None, &FILTERS) else {
        return;
    };
    let nodes = [("a", a.p2p_addr()), ("b", b.p2p_addr())];
    let proxy = Proxy::start(&fast(&nodes, "min_protocol_version: 70017")).await;
    let status = judged(proxy.admin(), &[("a", "unsuitable"), ("b", "unsuitable")]).await;
    for name in ["a", "b"] {
        let node = backend(&status, "ltc", name);
        let have = node["node"]["protocol"].as_u64().unwrap_or(0);
        assert_eq!(have, 70016, "0.21 speaks 70016: {node}");
        assert_unsuitable(node, "protocol 70016 below 70017");
    }
    refused(&proxy, "floor", 4).await;
    assert_eq!(on(&a, "floor"), 0);
    assert_eq!(on(&b, "floor"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_node_lacks_network_and_gets_no_client() {
    let Some(pruned) = Litecoind::start_with(None, &["-prune=550"]) else {
        return;
    };
    let Some(full) = Litecoind::start(None) else {
        return;
    };
    let nodes = [("pruned", pruned.p2p_addr()), ("full", full.p2p_addr())];
    let proxy = Proxy::start(&fast(&nodes, "require_services: [network]")).await;
    let admin = proxy.admin();
    let status = judged(admin, &[("pruned", "unsuitable"), ("full", "healthy")]).await;
    let p = backend(&status, "ltc", "pruned");
    assert_unsuitable(p, "lacks network");
    assert!(!names(p).contains(&"network"), "{p}");
    let full_names = names(backend(&status, "ltc", "full"));
    assert!(full_names.contains(&"network"), "{status}");

    let _held: Vec<Client> = (0..3)
        .map(|i| {
            p2p_client::connect(proxy.addr("ltc"), &agent("pruned", i), T)
                .unwrap_or_else(|e| panic!("client {i}: {e}"))
        })
        .inspect(|c| assert_eq!(c.node.services & 1, 1, "a client reached a pruned node"))
        .collect();
    holding(admin, &[("pruned", 0), ("full", 3)]).await;
    assert_eq!(on(&full, "pruned"), 3);
    assert_eq!(on(&pruned, "pruned"), 0);
}

/// A pool of a node with filters and one without that are judged once (no
/// probe for an hour, hour-long windows): three clients on `filters`, then
/// `plain` stopped, so that no later probe can tell what it was. What
/// `/status` shows of it afterwards was kept, not learnt again.
struct Judged {
    filters: Litecoind,
    _plain: Litecoind,
    proxy: Proxy,
    _held: Vec<Client>,
}

/// The config of [`Judged`]'s pool, with `extra` pool lines.
fn judged_once_yaml(nodes: &[(&str, SocketAddr)], extra: &str) -> String {
    yaml(
        nodes,
        "1h",
        "1h",
        &format!("require_services: {NEEDS}"),
        extra,
    )
}

/// [`Judged`] set up, and its config with an unrelated setting changed
/// (`max_connections`); `None` when litecoind is not installed.
async fn judged_once() -> Option<(Judged, String)> {
    let filters = Litecoind::start_with(None, &FILTERS)?;
    let mut plain = Litecoind::start(None)?;
    let nodes = [("filters", filters.p2p_addr()), ("plain", plain.p2p_addr())];
    let config = judged_once_yaml(&nodes, "");
    let proxy = Proxy::start(&config).await;
    judged(
        proxy.admin(),
        &[("filters", "healthy"), ("plain", "unsuitable")],
    )
    .await;
    let held = clients(&proxy, "kept", 3);
    holding(proxy.admin(), &[("filters", 3), ("plain", 0)]).await;
    plain.stop();
    let unrelated = judged_once_yaml(&nodes, "    max_connections: 500\n");
    let pool = Judged {
        filters,
        _plain: plain,
        proxy,
        _held: held,
    };
    Some((pool, unrelated))
}

/// What `judged_once` set up still holds: `plain` unsuitable with its
/// `node`, `filters` serving its three clients and the next one.
async fn still_judged(pool: &Judged, tag: &str) {
    let admin = pool.proxy.admin();
    let status = crate::support::admin_http::status(admin).await;
    let p = backend(&status, "ltc", "plain");
    assert_eq!(p["state"], "unsuitable", "{p}");
    assert_eq!(p["quarantine"]["reason"], "unsuitable", "{p}");
    assert_node(p);
    assert!(!names(p).contains(&"compact_filters"), "{p}");
    let f = backend(&status, "ltc", "filters");
    assert_eq!(f["state"], "healthy", "{f}");
    assert!(names(f).contains(&"compact_filters"), "{f}");
    let _next = clients(&pool.proxy, tag, 1);
    holding(admin, &[("filters", 4), ("plain", 0)]).await;
    assert_eq!(on(&pool.filters, "kept"), 3);
    assert_eq!(on(&pool.filters, tag), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_judgement_and_the_clients() {
    let Some((pool, unrelated)) = judged_once().await else {
        return;
    };
    let reloaded = pool.proxy.reload(&unrelated).await;
    assert_eq!(reloaded["message"], "reloaded", "{reloaded}");
    // The reload probes again at once: plain is found stopped.
    wait_status(
        pool.proxy.admin(),
        "plain probed after the reload",
        T,
        |s| (backend(s, "ltc", "plain")["last_probe"]["outcome"] == "down").then_some(()),
    )
    .await;
    still_judged(&pool, "reload").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_upgrade_keeps_the_judgement_and_the_clients() {
    let Some((pool, _)) = judged_once().await else {
        return;
    };
    let admin = pool.proxy.admin().to_string();
    let out = tokio::process::Command::new(proxy::binary())
        .args(["upgrade", "--admin", &admin])
        .output()
        .await
        .expect("run pin-proxy upgrade");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = pool
        .proxy
        .wait_event(|e| e["message"] == "upgraded", T)
        .await;
    assert_eq!(done["connections"], 3, "{done}");
    still_judged(&pool, "upgrade").await;
}

/// `kill -<sig>` of `node`'s process.
fn signal(node: &Litecoind, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &node.pid().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {}", node.pid());
}

/// A reload that adds a requirement judges each node again at once, on
/// what it last told: not only when its next probe answers, which a node
/// slow to answer (here: frozen) makes late while clients keep coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_adds_a_requirement_applies_it_at_once() {
    let Some(filters) = Litecoind::start_with(None, &FILTERS) else {
        return;
    };
    let Some(plain) = Litecoind::start(None) else {
        return;
    };
    // plain first: between two empty nodes the choice falls to it.
    let nodes = [("plain", plain.p2p_addr()), ("filters", filters.p2p_addr())];
    let proxy = Proxy::start(&yaml(&nodes, "1h", "1h", "drain: true", "")).await;
    let admin = proxy.admin();
    judged(admin, &[("plain", "healthy"), ("filters", "healthy")]).await;
    suitable(admin, &[("plain", 1.0), ("filters", 1.0)]).await;

    signal(&plain, "STOP");
    let needs = format!("require_services: {NEEDS}");
    let reloaded = proxy.reload(&yaml(&nodes, "1h", "1h", &needs, "")).await;
    assert_eq!(reloaded["message"], "reloaded", "{reloaded}");
    // The probe the reload asks of plain waits out its timeout meanwhile:
    // what /status says of plain is the reload's judgement.
    let _held = clients(&proxy, "added", 2);
    holding(admin, &[("plain", 0), ("filters", 2)]).await;
    assert_eq!(on(&filters, "added"), 2);
    let status = crate::support::admin_http::status(admin).await;
    assert_unsuitable(backend(&status, "ltc", "plain"), "lacks compact_filters");
    suitable(admin, &[("plain", 0.0), ("filters", 1.0)]).await;
    // Thawed, it has heard from none of them.
    signal(&plain, "CONT");
    assert_eq!(on(&plain, "added"), 0);
}
