//! End-to-end with real Litecoin Core regtest nodes: a node syncs the chain
//! from another through pin-proxy. Skips when litecoind is not installed
//! (unless `PIN_PROXY_REQUIRE_PEERS=1`).

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
