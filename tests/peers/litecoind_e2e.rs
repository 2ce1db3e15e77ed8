//! End-to-end with real Litecoin Core regtest nodes: a node syncs the chain
//! from another through pin-proxy. Skips when litecoind is not installed
//! (unless `PIN_PROXY_REQUIRE_PEERS=1`). The connection also survives a
//! live upgrade of the proxy.

use std::time::Duration;

use crate::support::litecoind::Litecoind;
use crate::support::proxy::Proxy;

/// Blocks mined before syncing: a few hundred, below MWEB activation (432).
const BLOCKS: u64 = 200;

/// Bound on the sync; it takes about a second on loopback.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn litecoin_node_syncs_through_proxy() {
    let Some(a) = Litecoind::start(None) else {
        return;
    };
    a.mine(BLOCKS);

    let yaml = format!(
        "pools:\n  - name: ltc\n    listen: 127.0.0.1:0\n    backends:\n      - {}\n",
        a.p2p_addr()
    );
    let proxy = Proxy::start_blocking(&yaml);
    let Some(b) = Litecoind::start(Some(proxy.addr("ltc"))) else {
        return;
    };

    proxy.wait_event_blocking(
        |ev| ev["message"] == "connected" && ev["pool"] == "ltc",
        Duration::from_secs(10),
    );
    assert!(
        b.wait_height(BLOCKS, SYNC_TIMEOUT),
        "node B stuck at height {} of {BLOCKS} after {SYNC_TIMEOUT:?}",
        b.height()
    );
    assert_eq!(b.best_hash(), a.best_hash(), "B's tip differs from A's");
}

#[test]
fn litecoin_nodes_sync_directly() {
    // Control for the test above: the same sync without the proxy, so a
    // failure there points at the proxy rather than at the nodes.
    let Some(a) = Litecoind::start(None) else {
        return;
    };
    a.mine(BLOCKS);
    let Some(b) = Litecoind::start(Some(a.p2p_addr())) else {
        return;
    };
    assert!(
        b.wait_height(BLOCKS, SYNC_TIMEOUT),
        "node B stuck at height {} of {BLOCKS} after {SYNC_TIMEOUT:?}",
        b.height()
    );
    assert_eq!(b.best_hash(), a.best_hash(), "B's tip differs from A's");
}

/// The handshaken P2P peers of `node`: (peer id, address), sorted.
fn peers(node: &Litecoind) -> Vec<(u64, String)> {
    let info: serde_json::Value = serde_json::from_str(&node.call(&["getpeerinfo"])).unwrap();
    let mut out: Vec<(u64, String)> = info
        .as_array()
        .unwrap()
        .iter()
        // A probe's bare TCP connect never says version; a client does.
        .filter(|p| p["version"].as_u64().unwrap_or(0) > 0)
        .map(|p| {
            (
                p["id"].as_u64().unwrap(),
                p["addr"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// A node syncing through the proxy keeps its one P2P connection across a
/// live upgrade: the same peer id on both nodes, and blocks mined after the
/// upgrade arrive over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syncing_node_keeps_its_connection_across_an_upgrade() {
    let Some(a) = Litecoind::start(None) else {
        return;
    };
    a.mine(BLOCKS);
    let yaml = format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: ltc\n    listen: 127.0.0.1:0\n    \
         health: {{ probe: connect, interval: 1h }}\n    backends:\n      - {}\n",
        a.p2p_addr()
    );
    let proxy = Proxy::start(&yaml).await;
    let Some(b) = Litecoind::start(Some(proxy.addr("ltc"))) else {
        return;
    };
    assert!(
        b.wait_height(BLOCKS, SYNC_TIMEOUT),
        "B stuck at {}",
        b.height()
    );
    let (a_before, b_before) = (peers(&a), peers(&b));
    assert_eq!(a_before.len(), 1, "{a_before:?}");
    assert_eq!(b_before.len(), 1, "{b_before:?}");

    let out = tokio::process::Command::new(crate::support::proxy::binary())
        .args(["upgrade", "--admin", &proxy.admin().to_string()])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = proxy
        .wait_event(|e| e["message"] == "upgraded", Duration::from_secs(30))
        .await;
    assert_eq!(done["connections"], 1);

    a.mine(20);
    assert!(
        b.wait_height(BLOCKS + 20, SYNC_TIMEOUT),
        "B stuck at {} after the upgrade",
        b.height()
    );
    assert_eq!(b.best_hash(), a.best_hash());
    assert_eq!(peers(&a), a_before, "A's peer is the same connection");
    assert_eq!(peers(&b), b_before, "B's peer is the same connection");
}
