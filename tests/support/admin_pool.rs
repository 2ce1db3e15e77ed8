//! The instance the admin tests start from: pool `p` in front of named
//! backends, behind an admin endpoint on a free port, and the common case
//! of two echo nodes once both are probed.

use std::net::SocketAddr;
use std::time::Duration;

use super::admin_http::admin_addr;
use super::nodes::Node;
use super::proxy::Proxy;

/// Bound on every wait of the admin tests.
pub const T: Duration = Duration::from_secs(10);

/// Pool `p` with `(name, addr, backup)` backends and an admin endpoint;
/// `admin_extra` is appended inside the `admin:` map.
pub fn config(backends: &[(&str, SocketAddr, bool)], admin_extra: &str) -> String {
    let list: String = backends
        .iter()
        .map(|(n, a, b)| format!("      - {{ name: {n}, addr: \"{a}\", backup: {b} }}\n"))
        .collect();
    format!(
        "admin: {{ listen: 127.0.0.1:0{admin_extra} }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends:\n{list}"
    )
}

/// A proxy over two echo nodes `a` and `b` (`b` a backup if `backup`), once
/// both start-up probes are in; its admin address.
pub async fn two_echo(backup: bool) -> (Proxy, SocketAddr, [Node; 2]) {
    let nodes = [Node::echo().await, Node::echo().await];
    let yaml = config(
        &[("a", nodes[0].addr, false), ("b", nodes[1].addr, backup)],
        "",
    );
    let proxy = Proxy::start(&yaml).await;
    proxy.wait_count(|e| e["message"] == "probe", 2, T).await;
    let admin = admin_addr(&proxy);
    (proxy, admin, nodes)
}
