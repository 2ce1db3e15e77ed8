//! Selection and admission: least-used order, fail-over within one client
//! connection, all-down, allow-list, max_connections.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::nodes::{BlackHole, Node, echo_client, refused_addr};
use crate::support::proxy::Proxy;
use crate::support::{wait_until, within};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const T: Duration = Duration::from_secs(10);

fn pool(backends: &[SocketAddr], extra: &str) -> String {
    let list: Vec<String> = backends.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n{extra}    backends: [{}]\n",
        list.join(", ")
    )
}

async fn echo_roundtrip(addr: SocketAddr) {
    drop(echo_client(addr).await);
}

/// Read until EOF or error; returns the bytes received before that.
async fn read_until_closed(c: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match within("client closed", T, c.read(&mut buf)).await {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn by_conn<'a>(events: &'a [Value], conn: &Value) -> impl Iterator<Item = &'a Value> {
    events.iter().filter(move |e| &e["conn"] == conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seven_clients_spread_three_two_two_with_ties_in_config_order() {
    let nodes = [Node::hold().await, Node::hold().await, Node::hold().await];
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    let proxy = Proxy::start(&pool(&addrs, "")).await;
    // Let the start-up probes come and go so the nodes count only clients.
    proxy.wait_count(|e| e["message"] == "probe", 3, T).await;
    // All seven at once: reservation happens at selection, so concurrent
    // clients cannot pile onto the same backend.
    let clients: Vec<TcpStream> =
        futures_join_all((0..7).map(|_| TcpStream::connect(proxy.addr("p")))).await;
    proxy
        .wait_count(|e| e["message"] == "connected", 7, T)
        .await;
    wait_until("7 live at the nodes", T, || {
        nodes.iter().map(Node::live).sum::<usize>() == 7
    })
    .await;
    let live: Vec<usize> = nodes.iter().map(Node::live).collect();
    assert_eq!(live, [3, 2, 2]);
    // The next client goes to a backend with 2 (the first such in config order).
    let _eighth = TcpStream::connect(proxy.addr("p")).await.unwrap();
    wait_until("8th lands", T, || {
        nodes.iter().map(Node::live).sum::<usize>() == 8
    })
    .await;
    assert_eq!(nodes.iter().map(Node::live).collect::<Vec<_>>(), [3, 3, 2]);
    drop(clients);
}

async fn futures_join_all<F>(futs: impl Iterator<Item = F>) -> Vec<TcpStream>
where
    F: std::future::Future<Output = std::io::Result<TcpStream>> + Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap().unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusing_backend_is_skipped_within_the_same_client_connection() {
    let node = Node::echo().await;
    let proxy = Proxy::start(&pool(&[refused_addr(), node.addr], "")).await;
    echo_roundtrip(proxy.addr("p")).await;
    let failed = proxy
        .wait_event(|e| e["message"] == "connect_failed", T)
        .await;
    assert_eq!(failed["reason"], "refused");
    let connected = proxy.wait_event(|e| e["message"] == "connected", T).await;
    assert_eq!(
        failed["conn"], connected["conn"],
        "fail-over stayed in one client connection"
    );
    assert_eq!(connected["backend"], node.addr.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_backend_is_skipped_after_connect_timeout() {
    let hole = BlackHole::new();
    let node = Node::echo().await;
    let proxy = Proxy::start(&pool(
        &[hole.addr, node.addr],
        "    connect_timeout: 300ms\n",
    ))
    .await;
    let started = std::time::Instant::now();
    echo_roundtrip(proxy.addr("p")).await;
    let waited = started.elapsed();
    let failed = proxy
        .wait_event(|e| e["message"] == "connect_failed", T)
        .await;
    assert_eq!(failed["reason"], "timeout");
    assert_eq!(failed["backend"], hole.addr.to_string());
    assert!(
        waited >= Duration::from_millis(300),
        "gave up before connect_timeout: {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_backends_down_closes_the_client_and_logs_each_failure() {
    let (a, b) = (refused_addr(), refused_addr());
    let proxy = Proxy::start(&pool(&[a, b], "")).await;
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    assert!(read_until_closed(&mut c).await.is_empty());
    let closed = proxy.wait_event(|e| e["message"] == "closed", T).await;
    assert_eq!(closed["reason"], "no_backend");
    let events = proxy.events();
    let failed: Vec<&Value> = by_conn(&events, &closed["conn"])
        .filter(|e| e["message"] == "connect_failed")
        .collect();
    let backends: Vec<&Value> = failed.iter().map(|e| &e["backend"]).collect();
    assert_eq!(
        backends,
        [&Value::from(a.to_string()), &Value::from(b.to_string())]
    );
    // Both are down now; the next client still gets tried against both
    // (fail open) rather than refused outright.
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    assert!(read_until_closed(&mut c).await.is_empty());
    proxy
        .wait_count(|e| e["message"] == "connect_failed", 4, T)
        .await;
}

async fn connect_from(local: &str, to: SocketAddr) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(format!("{local}:0").parse().unwrap()).unwrap();
    sock.connect(to).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_list_refuses_others_and_serves_the_next_allowed_client() {
    // The backend greets every client: a refused one must see none of it.
    let node = Node::start(|mut s: TcpStream| async move {
        let _ = s.write_all(b"hello").await;
        let mut buf = [0u8; 16];
        while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
    let proxy = Proxy::start(&pool(&[node.addr], "    allow: [127.0.0.2/32]\n")).await;
    let addr = proxy.addr("p");
    let mut refused = connect_from("127.0.0.1", addr).await;
    assert!(
        read_until_closed(&mut refused).await.is_empty(),
        "refused client got bytes"
    );
    let rejected = proxy.wait_event(|e| e["message"] == "rejected", T).await;
    assert_eq!(rejected["reason"], "allow_list");
    assert!(
        rejected["client"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:")
    );
    let events = proxy.events();
    assert_eq!(
        by_conn(&events, &rejected["conn"])
            .filter(|e| e["message"] == "connected")
            .count(),
        0,
        "a refused client reached the backend"
    );
    let mut ok = connect_from("127.0.0.2", addr).await;
    let mut b = [0u8; 5];
    within("greeting", T, ok.read_exact(&mut b)).await.unwrap();
    assert_eq!(&b, b"hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_refuses_the_excess_and_admits_again_after_a_close() {
    let node = Node::echo().await;
    let proxy = Proxy::start(&pool(&[node.addr], "    max_connections: 2\n")).await;
    let addr = proxy.addr("p");
    let first = TcpStream::connect(addr).await.unwrap();
    let _second = TcpStream::connect(addr).await.unwrap();
    proxy
        .wait_count(|e| e["message"] == "connected", 2, T)
        .await;
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert!(read_until_closed(&mut third).await.is_empty());
    let rejected = proxy.wait_event(|e| e["message"] == "rejected", T).await;
    assert_eq!(rejected["reason"], "max_connections");
    drop(first);
    proxy.wait_event(|e| e["message"] == "closed", T).await;
    echo_roundtrip(addr).await;
}
