//! The `Host` rule against DNS rebinding: a request naming another site in
//! `Host` (what a rebinding page's requests carry, `Origin` matching) gets
//! 421 on every route and changes nothing; the endpoint's own address,
//! `localhost` through a tunnel's port, loopback addresses, requests
//! without `Host`, and the names of `admin.hosts` are served.

use std::net::SocketAddr;

use tokio::net::TcpStream;

use crate::support::admin_http::{Answer, admin_addr, backend, send, status};
use crate::support::admin_pool::{T, config, two_echo};
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;

/// `method path` on a fresh connection, with `head` as the header lines
/// (each ending in CRLF).
async fn raw(admin: SocketAddr, method: &str, path: &str, head: &str) -> Answer {
    let stream = TcpStream::connect(admin).await.expect("connect to admin");
    let request =
        format!("{method} {path} HTTP/1.1\r\n{head}Connection: close\r\nContent-Length: 0\r\n\r\n");
    send(stream, &request).await
}

/// As a browser sends it from the page at `http://{host}`.
fn browser(host: &str) -> String {
    format!("Host: {host}\r\nOrigin: http://{host}\r\nSec-Fetch-Site: same-origin\r\n")
}

const ROUTES: [(&str, &str); 8] = [
    ("GET", "/"),
    ("GET", "/status"),
    ("GET", "/metrics"),
    ("GET", "/healthz"),
    ("POST", "/pools/p/backends/a/quarantine?for=10m"),
    ("POST", "/pools/p/backends/a/release"),
    ("POST", "/reload"),
    ("POST", "/upgrade"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebinding_page_is_misdirected_on_every_route_and_changes_nothing() {
    let (proxy, admin, _nodes) = two_echo(false).await;
    let evil = format!("evil.example:{}", admin.port());
    for (method, path) in ROUTES {
        let answer = raw(admin, method, path, &browser(&evil)).await;
        assert_eq!(answer.status, 421, "{method} {path}: {}", answer.body);
        let want = format!("Host {evil} is not a name of this admin endpoint");
        assert!(answer.error().contains(&want), "{}", answer.error());
    }
    let a = backend(&status(admin).await, "p", "a").clone();
    assert!(a["quarantine"].is_null() && a["state"] == "healthy", "{a}");
    assert!(proxy.named("reloaded").is_empty() && proxy.named("upgrade_started").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_own_names_tunnels_and_admin_hosts_are_served() {
    let nodes = [Node::echo().await, Node::echo().await];
    let yaml = config(
        &[("a", nodes[0].addr, false), ("b", nodes[1].addr, false)],
        ", hosts: [Proxy.Example]",
    );
    let proxy = Proxy::start(&yaml).await;
    proxy.wait_count(|e| e["message"] == "probe", 2, T).await;
    let admin = admin_addr(&proxy);
    let quarantine = "/pools/p/backends/a/quarantine?for=10m";
    let release = "/pools/p/backends/a/release";
    for host in [
        admin.to_string(),
        // `ssh -L 8080:127.0.0.1:9900`: the browser names the tunnel's end.
        "localhost:8080".to_owned(),
        "127.0.0.1:8080".to_owned(),
        format!("[::1]:{}", admin.port()),
        format!("proxy.example:{}", admin.port()),
        "PROXY.EXAMPLE".to_owned(),
    ] {
        for path in [quarantine, release] {
            let answer = raw(admin, "POST", path, &browser(&host)).await;
            assert_eq!(answer.status, 200, "{host} {path}: {}", answer.body);
        }
        let answer = raw(admin, "GET", "/status", &format!("Host: {host}\r\n")).await;
        assert_eq!(answer.status, 200, "{host}: {}", answer.body);
    }
    // HTTP/1.0 without Host: a health check or a script, not a browser.
    let stream = TcpStream::connect(admin).await.expect("connect to admin");
    let answer = send(stream, "GET /healthz HTTP/1.0\r\n\r\n").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let answer = raw(admin, "GET", "/status", "Host: other.example\r\n").await;
    assert_eq!(answer.status, 421, "{}", answer.body);
}
