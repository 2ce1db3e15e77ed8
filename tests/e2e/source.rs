//! `source:` on loopback: backend connections made from a host address,
//! from the client's own address (a transparent bind; as root), from the
//! proxy's address when the families differ (`source_fallback`, counted),
//! and `source: client` refused at start (exit 3) and at reload without
//! the capability it needs. The node namespaces' version, with a real
//! litecoind banning one client, is `cargo test --test peers transparent::`.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::faults_support::require_peers;
use crate::support::admin_http::{self, Kind, admin_addr};
use crate::support::nodes::Node;
use crate::support::proxy::{Proxy, binary};

/// Bound on every wait.
const T: Duration = Duration::from_secs(20);

/// A node that tells each client the address it sees it from, one line.
async fn mirror(addr: &str) -> Node {
    let handler = |mut s: TcpStream| async move {
        let peer = s.peer_addr().expect("peer");
        let _ = s.write_all(format!("{peer}\n").as_bytes()).await;
        let mut buf = [0u8; 64];
        while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
    };
    Node::bind(addr.parse().expect("address"), handler)
        .await
        .expect("bind the node")
}

/// Connect to `to` from `from` (a loopback address) and read the address
/// the node saw.
async fn seen_by_node(from: &str, to: SocketAddr) -> (TcpStream, SocketAddr) {
    let socket = match to {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .expect("socket");
    let ip: IpAddr = from.parse().expect("IP");
    socket.bind(SocketAddr::new(ip, 0)).expect("bind client");
    let mut stream = socket.connect(to).await.expect("connect");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") {
        let n = tokio::time::timeout(T, stream.read(&mut byte))
            .await
            .expect("the node's line in time")
            .expect("read");
        assert_eq!(n, 1, "closed before the node's line: {line:?}");
        line.push(byte[0]);
    }
    let seen = String::from_utf8(line).expect("UTF-8");
    (stream, seen.trim().parse().expect("an address"))
}

fn pool(source: &str, backend: SocketAddr) -> String {
    format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         source: {source}\n    \
         backends: [{{ name: n, addr: \"{backend}\" }}]\n"
    )
}

/// Root holds `CAP_NET_ADMIN`; otherwise the transparent cases skip (fail
/// under `PIN_PROXY_REQUIRE_PEERS=1`).
fn may_be_transparent() -> bool {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None);
    if socket.and_then(|s| s.set_ip_transparent_v4(true)).is_ok() {
        return true;
    }
    assert!(
        !require_peers(),
        "PIN_PROXY_REQUIRE_PEERS=1 but this process may not set IP_TRANSPARENT (not root?)"
    );
    eprintln!("skipping: IP_TRANSPARENT not permitted (needs CAP_NET_ADMIN: run as root)");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_address_is_where_the_node_sees_every_client_from() {
    let node = mirror("127.0.0.1:0").await;
    let proxy = Proxy::start(&pool("127.0.0.9", node.addr)).await;
    for from in ["127.0.0.1", "127.0.0.2"] {
        let (_held, seen) = seen_by_node(from, proxy.addr("p")).await;
        assert_eq!(seen.ip().to_string(), "127.0.0.9", "client {from}");
        assert_ne!(seen.port(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_source_client_the_node_sees_each_clients_own_address() {
    if !may_be_transparent() {
        return;
    }
    let node = mirror("127.0.0.1:0").await;
    let proxy = Proxy::start(&pool("client", node.addr)).await;
    let mut held = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3", "127.0.0.3"] {
        let (stream, seen) = seen_by_node(from, proxy.addr("p")).await;
        assert_eq!(
            seen.ip().to_string(),
            from,
            "the node sees the client itself"
        );
        // The port is the kernel's, never the client's own.
        assert_ne!(seen.port(), stream.local_addr().expect("local").port());
        held.push((stream, seen));
    }
    assert_ne!(
        held[1].1, held[2].1,
        "two connections of one client, two ports"
    );
    let status = admin_http::status(admin_addr(&proxy)).await;
    let b = admin_http::backend(&status, "p", "n");
    assert_eq!(b["source_fallbacks"], 0, "{b}");
    assert!(proxy.named("source_fallback").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_the_other_family_is_connected_from_the_proxys_address() {
    if !may_be_transparent() {
        return;
    }
    // An IPv6 node, IPv4 clients: no IPv4 address can be the IPv6 leg's.
    let Ok(node) = Node::bind(
        "[::1]:0".parse().expect("v6"),
        |mut s: TcpStream| async move {
            let peer = s.peer_addr().expect("peer");
            let _ = s.write_all(format!("{peer}\n").as_bytes()).await;
            let mut buf = [0u8; 64];
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
        },
    )
    .await
    else {
        assert!(!require_peers(), "no IPv6 loopback");
        eprintln!("skipping: no IPv6 loopback");
        return;
    };
    let proxy = Proxy::start(&pool("client", node.addr)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let (stream, seen) = seen_by_node("127.0.0.4", proxy.addr("p")).await;
        assert_eq!(seen.ip().to_string(), "::1", "the proxy's own address");
        held.push(stream);
    }
    // Each of a few is logged (lines thin out only past 16), and counted.
    let lines = proxy
        .wait_count(|e| e["message"] == "source_fallback", 3, T)
        .await;
    assert_eq!(
        lines[0]["client"]
            .as_str()
            .map(|c| c.starts_with("127.0.0.4:")),
        Some(true)
    );
    assert_eq!(lines[0]["source"], "client");
    let counts: Vec<Option<u64>> = lines.iter().map(|e| e["count"].as_u64()).collect();
    assert_eq!(counts, [Some(1), Some(2), Some(3)]);
    let admin = admin_addr(&proxy);
    let status = admin_http::status(admin).await;
    assert_eq!(
        admin_http::backend(&status, "p", "n")["source_fallbacks"],
        3
    );
    let metrics = admin_http::metrics(admin).await;
    let labels = [("pool", "p"), ("backend", "n")];
    assert_eq!(
        metrics.value("pin_proxy_source_fallbacks_total", Kind::Counter, &labels),
        3.0
    );
}

/// `setpriv` without `CAP_NET_ADMIN` and `CAP_NET_RAW`, or `None` (with a
/// notice) where that cannot be done.
fn without_capability() -> Option<Vec<String>> {
    let setpriv = Path::new("/usr/bin/setpriv");
    if !setpriv.exists() || !may_be_transparent() {
        assert!(
            !require_peers(),
            "PIN_PROXY_REQUIRE_PEERS=1 but no /usr/bin/setpriv"
        );
        eprintln!("skipping: needs root and setpriv to drop a capability");
        return None;
    }
    Some(
        [
            "/usr/bin/setpriv",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-net_admin,-net_raw",
            "--",
        ]
        .map(str::to_owned)
        .to_vec(),
    )
}

#[test]
fn source_client_without_the_capability_exits_3_naming_it() {
    let Some(prefix) = without_capability() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        pool("client", "127.0.0.1:1".parse().expect("addr")),
    )
    .expect("write");
    let out = Command::new(&prefix[0])
        .args(&prefix[1..])
        .args([binary(), "run", "-c"])
        .arg(&config)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    for needed in ["pool p", "CAP_NET_ADMIN", "README \"Transparent source\""] {
        assert!(stderr.contains(needed), "{needed} missing from: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_source_client_without_the_capability_is_refused() {
    let Some(prefix) = without_capability() else {
        return;
    };
    let node = mirror("127.0.0.1:0").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = dir.path().join("pin-proxy");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec {} {} \"$@\"\n", prefix.join(" "), binary()),
    )
    .expect("write wrapper");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let proxy = Proxy::start_from(&wrapper, &pool("proxy", node.addr), &[]).await;
    let failed = proxy.reload(&pool("client", node.addr)).await;
    assert_eq!(failed["message"], "reload_failed", "{failed}");
    let err = failed["err"].as_str().unwrap_or_default();
    assert!(
        err.contains("CAP_NET_ADMIN") && err.contains("Transparent source"),
        "{err}"
    );
    // Nothing changed: clients still come from the proxy's own address.
    let (_held, seen) = seen_by_node("127.0.0.5", proxy.addr("p")).await;
    assert_eq!(seen.ip().to_string(), "127.0.0.1");
}
