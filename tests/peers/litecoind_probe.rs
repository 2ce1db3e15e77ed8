//! The `bitcoin-p2p` probe against real Litecoin Core regtest nodes: it reads
//! their true heights, and a node that falls behind is found lagging and
//! drained. Skips when litecoind is not installed (unless
//! `PIN_PROXY_REQUIRE_PEERS=1`).

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::support::litecoind::{self, Litecoind};
use crate::support::proxy::Proxy;
use serde_json::Value;

/// Bound on every wait.
const T: Duration = Duration::from_secs(20);

fn pool(a: SocketAddr, b: SocketAddr) -> String {
    // Windows longer than the test: once lagging, A stays out.
    format!(
        "pools:\n  - name: ltc\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
         quarantine: {{ base: 1h, max: 1h }}\n    \
         health: {{ probe: bitcoin-p2p, network: litecoin-regtest, interval: 200ms, \
         timeout: 5s, fall: 2, max_lag_blocks: 3 }}\n    \
         backends: [{{ name: a, addr: \"{a}\" }}, {{ name: b, addr: \"{b}\" }}]\n"
    )
}

fn about<'a>(message: &'a str, backend: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |e| e["message"] == message && e["backend"] == backend
}

fn peer(proxy: SocketAddr) -> (TcpStream, u64) {
    litecoind::peer(proxy, T)
}

/// Read (and drop whatever the node sends) until the proxy closes the stream.
fn wait_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("still open after {T:?}")
            }
            // A reset is a close too.
            Err(_) => return,
        }
    }
}

#[test]
fn p2p_probe_reads_true_heights_and_drains_a_node_that_falls_behind() {
    let Some(a) = Litecoind::start(None) else {
        return;
    };
    let Some(b) = Litecoind::start(None) else {
        return;
    };
    // Different heights within max_lag_blocks: both healthy.
    a.mine(4);
    b.mine(6);
    let proxy = Proxy::start_blocking(&pool(a.p2p_addr(), b.p2p_addr()));
    for (name, node) in [("a", &a), ("b", &b)] {
        let probe = proxy.wait_event_blocking(about("probe", name), T);
        assert_eq!(probe["outcome"], "healthy", "{probe}");
        assert_eq!(probe["height"], node.height(), "{name}: {probe}");
    }
    // One peer on each node, pinned: each sees its own node's height.
    let (mut on_a, seen_a) = peer(proxy.addr("ltc"));
    let (_on_b, seen_b) = peer(proxy.addr("ltc"));
    assert_eq!((seen_a, seen_b), (4, 6));
    let conn_a = proxy.wait_event_blocking(about("connected", "a"), T)["conn"].clone();

    // B moves on by 10 blocks, A does not.
    b.mine(10);
    let lag = proxy.wait_event_blocking(|e| about("probe", "a")(e) && e["outcome"] == "lagging", T);
    assert_eq!(lag["height"], a.height());
    assert_eq!(b.height(), 16);
    let q = proxy.wait_event_blocking(about("quarantined", "a"), T);
    assert_eq!(q["reason"], "lagging");
    proxy.wait_event_blocking(about("drained", "a"), T);
    let closed = proxy.wait_event_blocking(|e| about("closed", "a")(e) && e["conn"] == conn_a, T);
    assert_eq!(closed["reason"], "drained");
    wait_closed(&mut on_a);
    // Its redial lands on B, at B's new height.
    let (_again, seen) = peer(proxy.addr("ltc"));
    assert_eq!(seen, 16);
}
