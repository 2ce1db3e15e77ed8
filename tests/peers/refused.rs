//! One client's garbage is that client's matter, not the nodes': three real
//! Litecoin Core nodes drop, at once, every connection of a client that
//! sends them garbage. Nine such connections from one address quarantine
//! no node (closes from one address never reach `quarantine.failures`),
//! each node that refused the address logs `refused_by_node` and the
//! address is steered to the nodes that have not, and the honest peers
//! keep their nodes. Skips when litecoind is not installed (unless
//! `PIN_PROXY_REQUIRE_PEERS=1`).

use std::io::{Read, Write};
use std::net::IpAddr;
use std::time::Duration;

use serde_json::Value;

use crate::support::litecoind::{Litecoind, connect_from, peer};
use crate::support::p2p_client::answers_ping;
use crate::support::proxy::Proxy;

/// Bound on every wait.
const T: Duration = Duration::from_secs(20);

/// The garbage client's address.
const GARBAGE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 9));

/// An event about a client connection from `ip` (`client` is `ip:port`).
fn from(e: &Value, ip: &str) -> bool {
    e["client"]
        .as_str()
        .is_some_and(|c| c.starts_with(&format!("{ip}:")))
}

#[test]
fn garbage_from_one_address_quarantines_no_node() {
    let nodes: Vec<Litecoind> = (0..3).filter_map(|_| Litecoind::start(None)).collect();
    if nodes.len() < 3 {
        return;
    }
    for n in &nodes {
        n.mine(5);
    }
    // The defaults an operator starts with: 3 failures, a 5-minute window.
    let proxy = Proxy::start_blocking(&format!(
        "pools:\n  - name: ltc\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
         quarantine: {{ base: 5m, failures: 3 }}\n    \
         health: {{ probe: bitcoin-p2p, network: litecoin-regtest, interval: 500ms, timeout: 2s }}\n    \
         backends: [{{ name: a, addr: \"{}\" }}, {{ name: b, addr: \"{}\" }}, {{ name: c, addr: \"{}\" }}]\n",
        nodes[0].p2p_addr(),
        nodes[1].p2p_addr(),
        nodes[2].p2p_addr()
    ));
    for name in ["a", "b", "c"] {
        let probe =
            proxy.wait_event_blocking(|e| e["message"] == "probe" && e["backend"] == name, T);
        assert_eq!(probe["outcome"], "healthy", "{probe}");
    }
    // Nine honest peers, three on each node.
    let honest: Vec<_> = (0..9).map(|_| peer(proxy.addr("ltc"), T)).collect();
    proxy.wait_count_blocking(|e| e["message"] == "connected", 9, T);

    // Nine connections from one address, each 256 bytes of garbage that
    // the node drops at once; one after the other, each a new incident.
    let garbage: Vec<u8> = (0..=255).collect();
    for i in 1..=9 {
        let mut c = connect_from(GARBAGE, proxy.addr("ltc")).expect("connect from 127.0.0.9");
        c.set_read_timeout(Some(T)).unwrap();
        c.write_all(&garbage).expect("send garbage");
        let mut rest = Vec::new();
        // The node's close reaches it through the proxy (a reset is as
        // good); then it closes too, and the connection is over.
        let _ = c.read_to_end(&mut rest);
        assert!(rest.is_empty(), "the node answered garbage: {rest:?}");
        drop(c);
        // Its lines may be folded into a count (a flood's short
        // connections are); the honest peers close nothing meanwhile.
        proxy.wait_closed_blocking(i, T, |e| {
            from(e, "127.0.0.9") || e.get("suppressed").is_some()
        });
    }

    assert!(
        proxy.named("quarantined").is_empty(),
        "one address's garbage took nodes out: {:?}",
        proxy.named("quarantined")
    );
    // Each node refused it once before it had to go back to one.
    let refused = proxy.named("refused_by_node");
    for name in ["a", "b", "c"] {
        let first = refused
            .iter()
            .find(|e| e["backend"] == name)
            .unwrap_or_else(|| panic!("no refused_by_node for {name}: {refused:?}"));
        assert_eq!(
            (first["client"].as_str(), first["count"].as_u64()),
            (Some("127.0.0.9"), Some(1)),
            "{first}"
        );
        assert_eq!(first["pool"], "ltc");
    }
    // Every refusal has its line (a handful: far below where they thin
    // out), each node's counting its closes in a row from 1.
    assert_eq!(refused.len(), 9, "{refused:?}");
    for name in ["a", "b", "c"] {
        let counts: Vec<u64> = refused
            .iter()
            .filter(|e| e["backend"] == name)
            .filter_map(|e| e["count"].as_u64())
            .collect();
        let want: Vec<u64> = (1..=counts.len() as u64).collect();
        assert_eq!(counts, want, "{name}: {refused:?}");
    }
    // Steered: its first three connections went to three different nodes.
    let landed: Vec<String> = proxy
        .named("connected")
        .iter()
        .filter(|e| from(e, "127.0.0.9"))
        .filter_map(|e| e["backend"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(landed.len(), 9, "{landed:?}");
    assert_eq!(landed[..3], ["a", "b", "c"], "{landed:?}");

    // The honest peers were not drained and still talk to their nodes.
    assert!(
        proxy.named("drained").is_empty(),
        "{:?}",
        proxy.named("drained")
    );
    assert!(
        !proxy.named("closed").iter().any(|e| from(e, "127.0.0.1")),
        "an honest peer was closed"
    );
    for (mut stream, _) in honest {
        assert!(answers_ping(&mut stream, 7), "an honest peer lost its node");
    }
    // And a new honest client is served.
    let (_next, height) = peer(proxy.addr("ltc"), T);
    assert_eq!(height, 5);
}
