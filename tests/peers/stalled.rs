//! A real Litecoin Core node frozen with SIGSTOP: the kernel still accepts
//! TCP connects for it, so a `connect` probe passes, but its clients get
//! nothing, while the other node relays every block it mines. The frozen
//! one is taken out as `stalled` and its client freed. Skips when
//! litecoind is not installed (unless `PIN_PROXY_REQUIRE_PEERS=1`).

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::litecoind::{Litecoind, peer};
use crate::support::proxy::Proxy;

/// Bound on every wait.
const T: Duration = Duration::from_secs(20);

fn signal(node: &Litecoind, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &node.pid().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {}", node.pid());
}

/// Thaws the node on the way out, also when the test fails.
struct Frozen<'a>(&'a Litecoind);

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

#[test]
fn a_frozen_node_is_stalled_while_the_other_relays_blocks() {
    let Some(a) = Litecoind::start(None) else {
        return;
    };
    let Some(b) = Litecoind::start(None) else {
        return;
    };
    a.mine(1);
    let proxy = Proxy::start_blocking(&format!(
        "pools:\n  - name: ltc\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
         quarantine: {{ base: 1h, max: 1h }}\n    \
         health: {{ probe: connect, interval: 200ms, fall: 2, stall_timeout: 2s, drain_spread: 0s }}\n    \
         backends: [{{ name: a, addr: \"{}\" }}, {{ name: b, addr: \"{}\" }}]\n",
        a.p2p_addr(),
        b.p2p_addr()
    ));
    // One mwebd-like peer on each node (least used first: a, then b).
    let (mut on_a, _) = peer(proxy.addr("ltc"), T);
    let (mut on_b, _) = peer(proxy.addr("ltc"), T);
    // Their lines are written as they connect: wait for both.
    let connected = proxy.wait_count_blocking(|e| e["message"] == "connected", 2, T);
    let backends: Vec<&str> = connected
        .iter()
        .filter_map(|e| e["backend"].as_str())
        .collect();
    assert_eq!(backends, ["a", "b"], "{connected:?}");

    signal(&b, "-STOP");
    let _thaw = Frozen(&b);
    // a announces each block to its peer; b says nothing.
    on_a.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let deadline = Instant::now() + T;
    let mut relayed = 0usize;
    let mut buf = [0u8; 4096];
    let stalled = loop {
        a.mine(1);
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            if let Ok(n) = on_a.read(&mut buf) {
                relayed += n;
            }
        }
        let found = proxy
            .named("quarantined")
            .into_iter()
            .find(|e| e["backend"] == "b");
        if let Some(e) = found {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "b never stalled: {:?}",
            proxy.named("probe")
        );
    };
    assert_eq!(stalled["reason"], "stalled", "{stalled}");
    assert!(relayed > 0, "a relayed its blocks to its peer");
    assert!(
        proxy
            .named("quarantined")
            .iter()
            .all(|e| e["backend"] != "a"),
        "a keeps serving"
    );
    // The frozen node's peer is closed by the proxy, so it can reconnect.
    on_b.set_read_timeout(Some(T)).unwrap();
    let mut rest = Vec::new();
    let _ = on_b.read_to_end(&mut rest);
    proxy.wait_event_blocking(|e| e["message"] == "closed" && e["backend"] == "b", T);
    // Reconnecting, it is served by a.
    let (_again, height) = peer(proxy.addr("ltc"), T);
    assert_eq!(height, a.height());
    let all = proxy.wait_count_blocking(|e| e["message"] == "connected", 3, T);
    let last = &all[2];
    assert_eq!(last["backend"], "a", "{last}");
}
