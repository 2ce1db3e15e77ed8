//! A real Litecoin Core node that refuses the proxy (it banned our address,
//! or stopped taking peers) accepts every TCP connect and closes it at once.
//! It must not trap clients: its probes fail, the connections it closes at
//! once count toward `quarantine.failures`, and clients end up on the node
//! that serves them. Skips when litecoind is not installed (unless
//! `PIN_PROXY_REQUIRE_PEERS=1`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::support::litecoind::{Litecoind, peer, try_peer_from};
use crate::support::proxy::Proxy;
use serde_json::Value;

/// Bound on every wait.
const T: Duration = Duration::from_secs(20);

/// A two-node pool; `interval` is the probe interval (`1h`: only the
/// start-up probe runs, so only client traffic can find the refusal).
fn pool(a: SocketAddr, b: SocketAddr, interval: &str) -> String {
    format!(
        "pools:\n  - name: ltc\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
         quarantine: {{ base: 1h, max: 1h, failures: 3 }}\n    \
         health: {{ probe: bitcoin-p2p, network: litecoin-regtest, interval: {interval}, \
         timeout: 2s, fall: 2, max_lag_blocks: 3 }}\n    \
         backends: [{{ name: a, addr: \"{a}\" }}, {{ name: b, addr: \"{b}\" }}]\n"
    )
}

fn about<'a>(message: &'a str, backend: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |e| e["message"] == message && e["backend"] == backend
}

fn nodes() -> Option<(Litecoind, Litecoind)> {
    let a = Litecoind::start(None)?;
    let b = Litecoind::start(None)?;
    a.mine(5);
    b.mine(5);
    Some((a, b))
}

/// With the proxy refused by A, its probes fail: A is quarantined as down
/// after `fall` probes, and every new client lands on B.
fn refused_node_is_found_by_its_probes(refuse: &[&str]) {
    let Some((a, b)) = nodes() else { return };
    let proxy = Proxy::start_blocking(&pool(a.p2p_addr(), b.p2p_addr(), "200ms"));
    for name in ["a", "b"] {
        let probe = proxy.wait_event_blocking(about("probe", name), T);
        assert_eq!(probe["outcome"], "healthy", "{probe}");
    }
    a.call(refuse);
    let down = proxy.wait_event_blocking(|e| about("probe", "a")(e) && e["outcome"] == "down", T);
    let detail = down["detail"].as_str().unwrap_or_default();
    assert!(
        ["closed before version", "read: ", "send version: "]
            .iter()
            .any(|d| detail.starts_with(d)),
        "{down}"
    );
    let q = proxy.wait_event_blocking(about("quarantined", "a"), T);
    assert_eq!(q["reason"], "down");
    every_new_client_lands_on_b(&proxy, &b, 4);
}

/// `n` new clients complete their handshakes, all with B.
fn every_new_client_lands_on_b(proxy: &Proxy, b: &Litecoind, n: usize) {
    let on_a = proxy
        .wait_count_blocking(about("connected", "a"), 0, T)
        .len();
    let on_b = proxy
        .wait_count_blocking(about("connected", "b"), 0, T)
        .len();
    let clients: Vec<_> = (0..n).map(|_| peer(proxy.addr("ltc"), T)).collect();
    assert!(clients.iter().all(|(_, height)| *height == b.height()));
    proxy.wait_count_blocking(about("connected", "b"), on_b + n, T);
    assert_eq!(
        proxy
            .wait_count_blocking(about("connected", "a"), 0, T)
            .len(),
        on_a
    );
}

#[test]
fn a_node_that_banned_the_proxy_fails_its_probes() {
    refused_node_is_found_by_its_probes(&["setban", "127.0.0.1", "add"]);
}

#[test]
fn a_node_that_stopped_taking_peers_fails_its_probes() {
    refused_node_is_found_by_its_probes(&["setnetworkactive", "false"]);
}

/// No probe runs after start-up: the closes at once of client connections
/// alone take A out, after `quarantine.failures` of them, with a warning.
/// The redials come from three client addresses (127.0.0.1-3): closes from
/// one address alone are that client's matter (see `refused.rs`).
fn refused_node_is_found_by_client_traffic(refuse: &[&str]) {
    let Some((a, b)) = nodes() else { return };
    let proxy = Proxy::start_blocking(&pool(a.p2p_addr(), b.p2p_addr(), "1h"));
    for name in ["a", "b"] {
        proxy.wait_event_blocking(about("probe", name), T);
    }
    // One client on each node; then A refuses us.
    let _on_a = peer(proxy.addr("ltc"), T);
    let _on_b = peer(proxy.addr("ltc"), T);
    a.call(refuse);
    // Redials go to A (fewest connections) and are closed at once; each is
    // a new incident once the proxy has recorded the last one.
    for i in 1..=3u8 {
        let redial = try_peer_from(IpAddr::from([127, 0, 0, i]), proxy.addr("ltc"), T);
        assert!(
            redial.is_err(),
            "redial {i} completed a handshake while A refuses"
        );
        proxy.wait_count_blocking(|e| e["message"] == "closed_at_once", i.into(), T);
    }
    let q = proxy.wait_event_blocking(about("quarantined", "a"), T);
    assert_eq!(q["reason"], "connect_failures", "quarantine.failures is 3");
    let warnings = proxy.named("closed_at_once");
    assert_eq!(warnings.len(), 3);
    assert!(
        warnings
            .iter()
            .all(|w| w["level"] == "WARN" && w["backend"] == "a")
    );
    // From now on every client is served, by B.
    every_new_client_lands_on_b(&proxy, &b, 3);
}

#[test]
fn a_node_that_banned_the_proxy_is_found_by_client_traffic() {
    refused_node_is_found_by_client_traffic(&["setban", "127.0.0.1", "add"]);
}

#[test]
fn a_node_that_stopped_taking_peers_is_found_by_client_traffic() {
    refused_node_is_found_by_client_traffic(&["setnetworkactive", "false"]);
}
