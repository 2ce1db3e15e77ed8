//! The stall tests' harness: a pool of two backends with stall keys, and
//! what they check on it (the `stalled` verdict's detail, enough probes
//! passed, everyone kept).

use std::net::SocketAddr;
use std::time::Duration;

use super::admin_http::{Kind, backend, status};
use super::admin_wait::wait_metrics;
use super::proxy::Proxy;

/// Bound on every wait.
const T: Duration = Duration::from_secs(10);

/// A pool of `a` and `b` probed every 100 ms, with `stall` (the stall
/// keys) in its `health`.
pub fn config_with(a: SocketAddr, b: SocketAddr, stall: &str) -> String {
    format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         rebalance: {{ interval: 0s }}\n    quarantine: {{ base: 1h, max: 1h }}\n    \
         health: {{ probe: connect, interval: 100ms, fall: 2, {stall}, drain_spread: 0s }}\n    \
         backends: [{{ name: a, addr: \"{a}\" }}, {{ name: b, addr: \"{b}\" }}]\n"
    )
}

/// Nobody was quarantined: `a` and `b` are healthy with `n` connections each.
pub async fn everyone_kept(proxy: &Proxy, n: u64) {
    assert!(
        proxy.named("quarantined").is_empty(),
        "{:?}",
        proxy.named("quarantined")
    );
    let st = status(proxy.admin()).await;
    for name in ["a", "b"] {
        let b = backend(&st, "p", name);
        assert_eq!(b["state"], "healthy", "{b}");
        assert_eq!(b["connections"], n, "{b}");
    }
}

/// Once `name` is quarantined as `stalled`: the `detail` of the probe
/// event that said so.
pub async fn stalled_detail(proxy: &Proxy, name: &str) -> String {
    let taken = proxy
        .wait_event(|e| e["message"] == "quarantined" && e["backend"] == name, T)
        .await;
    assert_eq!(taken["reason"], "stalled", "{taken}");
    let probe = proxy
        .named("probe")
        .into_iter()
        .find(|e| e["backend"] == name && e["outcome"] == "stalled")
        .expect("a probe event says stalled");
    probe["detail"].as_str().unwrap_or_default().to_owned()
}

/// Until `/metrics` counts `n` healthy probes of `name`.
pub async fn wait_probes(proxy: &Proxy, name: &str, n: u64) {
    let labels = [("pool", "p"), ("backend", name), ("outcome", "healthy")];
    let what = format!("{n} healthy probes of {name}");
    wait_metrics(proxy.admin(), &what, T, |m| {
        let count = m.get("pin_proxy_probes_total", Kind::Counter, &labels);
        (count.unwrap_or(0.0) >= n as f64).then_some(())
    })
    .await;
}
