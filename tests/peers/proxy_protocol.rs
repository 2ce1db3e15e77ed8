//! Behind a real HAProxy sending PROXY headers (`send-proxy-v2` and
//! `send-proxy`): the client the header names is the client for `allow`,
//! the per-source limit and the logs (`client`, plus `via`: HAProxy's own
//! address); an untrusted source's `PROXY ...` bytes are its data; a
//! trusted source that says nothing is closed after `timeout`.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::admin_http::{self, Kind, admin_addr};
use crate::support::haproxy::{HaProxy, Header};
use crate::support::litecoind::{self, Litecoind};
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;

/// Bound on every wait.
const T: Duration = Duration::from_secs(20);

/// A client connection to `to` from the loopback address `from`.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    let ip: IpAddr = from.parse().unwrap();
    socket.bind(SocketAddr::new(ip, 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// Send `bytes` and read them back from the echo node behind.
async fn echoes(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).await.unwrap();
    let mut back = vec![0u8; bytes.len()];
    tokio::time::timeout(T, stream.read_exact(&mut back))
        .await
        .expect("echo in time")
        .unwrap();
    assert_eq!(back, bytes);
}

/// True once the proxy closed `stream` (EOF or reset) without a byte.
async fn closed_unread(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 16];
    matches!(
        tokio::time::timeout(T, stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

fn ip_of(field: &Value) -> String {
    let addr: SocketAddr = field.as_str().unwrap().parse().unwrap();
    addr.ip().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_haproxy_the_header_names_the_client_everywhere() {
    let node = Node::echo().await;
    let yaml = format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         allow: [127.0.0.1/32, 127.0.0.2/32, 127.0.0.3/32, 127.0.0.6/32]\n    \
         max_connections_per_source: 1\n    \
         proxy_protocol: {{ from: [127.0.0.1/32], timeout: 500ms }}\n    \
         backends: [\"{}\"]\n",
        node.addr
    );
    let proxy = Proxy::start(&yaml).await;
    let Some(ha) = HaProxy::start(&[(proxy.addr("p"), Header::V2), (proxy.addr("p"), Header::V1)])
    else {
        return;
    };
    for (front, allowed, other) in [(0, "127.0.0.2", "127.0.0.4"), (1, "127.0.0.3", "127.0.0.5")] {
        let accepted_before = proxy.named("accepted").len();
        let mut client = connect_from(allowed, ha.front(front)).await;
        echoes(&mut client, b"through haproxy").await;
        let accepted = proxy
            .wait_count(|e| e["message"] == "accepted", accepted_before + 1, T)
            .await;
        let accepted = accepted.last().unwrap().clone();
        assert_eq!(ip_of(&accepted["client"]), allowed, "{accepted}");
        assert_eq!(ip_of(&accepted["via"]), "127.0.0.1", "{accepted}");

        // Its address holds its one place: a second client from it is
        // refused, by the client's address, not HAProxy's.
        let rejected_before = proxy.named("rejected").len();
        let mut second = connect_from(allowed, ha.front(front)).await;
        assert!(closed_unread(&mut second).await);
        let rejected = proxy
            .wait_count(|e| e["message"] == "rejected", rejected_before + 1, T)
            .await;
        let rejected = rejected.last().unwrap().clone();
        assert_eq!(rejected["reason"], "per_source", "{rejected}");
        assert_eq!(ip_of(&rejected["client"]), allowed);
        assert_eq!(ip_of(&rejected["via"]), "127.0.0.1");

        // A client outside `allow` is refused, though HAProxy's own
        // address is in it.
        let mut outside = connect_from(other, ha.front(front)).await;
        assert!(closed_unread(&mut outside).await);
        let rejected = proxy
            .wait_count(|e| e["message"] == "rejected", rejected_before + 2, T)
            .await;
        let rejected = rejected.last().unwrap().clone();
        assert_eq!(rejected["reason"], "allow_list", "{rejected}");
        assert_eq!(ip_of(&rejected["client"]), other);
        drop(client);
        let closed = proxy
            .wait_event(
                |e| {
                    e["message"] == "closed"
                        && e["client"]
                            .as_str()
                            .is_some_and(|c| c.starts_with(&format!("{allowed}:")))
                },
                T,
            )
            .await;
        assert_eq!(ip_of(&closed["via"]), "127.0.0.1", "{closed}");
    }

    // A source not in `from`: `PROXY ...` is its data, spliced as is.
    let mut untrusted = connect_from("127.0.0.6", proxy.addr("p")).await;
    echoes(
        &mut untrusted,
        b"PROXY TCP4 192.0.2.1 192.0.2.2 1111 2222\r\nhello",
    )
    .await;

    // A trusted source that says nothing is closed after `timeout`.
    let rejected_before = proxy.named("rejected").len();
    let mut silent = connect_from("127.0.0.1", proxy.addr("p")).await;
    assert!(closed_unread(&mut silent).await);
    let rejected = proxy
        .wait_count(|e| e["message"] == "rejected", rejected_before + 1, T)
        .await;
    let rejected = rejected.last().unwrap().clone();
    assert_eq!(rejected["reason"], "proxy_protocol", "{rejected}");
    assert_eq!(ip_of(&rejected["client"]), "127.0.0.1");
    assert!(rejected.get("via").is_none(), "{rejected}");
}

/// The node's refusals are judged by the client the header names: garbage
/// from one client behind HAProxy takes no node out (all of HAProxy's
/// connections come from one address, so judged by that address, three
/// would); the same from three clients does.
#[test]
fn behind_haproxy_one_clients_garbage_takes_no_node_out_three_clients_do() {
    let Some(node) = Litecoind::start(None) else {
        return;
    };
    node.mine(3);
    let proxy = Proxy::start_blocking(&format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: ltc\n    listen: 127.0.0.1:0\n    \
         rebalance: {{ interval: 0s }}\n    proxy_protocol: {{ from: [127.0.0.1/32] }}\n    \
         quarantine: {{ base: 5m, failures: 3 }}\n    \
         health: {{ probe: bitcoin-p2p, network: litecoin-regtest, interval: 500ms, timeout: 2s }}\n    \
         backends: [{{ name: a, addr: \"{}\" }}]\n",
        node.p2p_addr()
    ));
    let probe = proxy.wait_event_blocking(|e| e["message"] == "probe", T);
    assert_eq!(probe["outcome"], "healthy", "{probe}");
    let Some(ha) = HaProxy::start(&[(proxy.addr("ltc"), Header::V2)]) else {
        return;
    };
    let garbage: Vec<u8> = (0..=255).collect();
    let send_garbage = |from: &str| {
        let ip: IpAddr = from.parse().unwrap();
        let mut c = litecoind::connect_from(ip, ha.front(0)).expect("connect through haproxy");
        c.set_read_timeout(Some(T)).unwrap();
        c.write_all(&garbage).expect("send garbage");
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        assert!(rest.is_empty(), "the node answered garbage: {rest:?}");
    };
    let client_is = |e: &Value, ip: &str| {
        e["client"]
            .as_str()
            .is_some_and(|c| c == ip || c.starts_with(&format!("{ip}:")))
    };
    for i in 1..=6 {
        send_garbage("127.0.0.5");
        proxy.wait_closed_blocking(i, T, |e| {
            client_is(e, "127.0.0.5") || e.get("suppressed").is_some()
        });
    }
    assert!(
        proxy.named("quarantined").is_empty(),
        "one client's garbage took the node out: {:?}",
        proxy.named("quarantined")
    );
    let refused = proxy.wait_event_blocking(|e| e["message"] == "refused_by_node", T);
    assert_eq!(refused["client"], "127.0.0.5", "{refused}");
    // Every refusal is counted, logged or not.
    let admin = admin_addr(&proxy);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = rt.block_on(admin_http::status(admin));
    assert_eq!(
        admin_http::backend(&status, "ltc", "a")["refused_by_node"],
        6
    );
    let metrics = rt.block_on(admin_http::metrics(admin));
    let labels = [("pool", "ltc"), ("backend", "a")];
    assert_eq!(
        metrics.value("pin_proxy_refused_by_node_total", Kind::Counter, &labels),
        6.0
    );

    for from in ["127.0.0.6", "127.0.0.7", "127.0.0.8"] {
        send_garbage(from);
    }
    let q = proxy.wait_event_blocking(|e| e["message"] == "quarantined", T);
    assert_eq!(
        (&q["backend"], &q["reason"]),
        (&Value::from("a"), &Value::from("connect_failures"))
    );
}

/// With `source: client` behind HAProxy, the node sees the client the
/// header names, not HAProxy and not the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_haproxy_source_client_connects_from_the_headers_client() {
    if socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .and_then(|s| s.set_ip_transparent_v4(true))
        .is_err()
    {
        assert!(
            !litecoind_required(),
            "IP_TRANSPARENT not permitted (not root?)"
        );
        eprintln!("skipping: IP_TRANSPARENT not permitted (needs CAP_NET_ADMIN: run as root)");
        return;
    }
    let node = Node::start(|mut s: TcpStream| async move {
        let peer = s.peer_addr().unwrap();
        let _ = s.write_all(format!("{peer}\n").as_bytes()).await;
        let mut buf = [0u8; 64];
        while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
    let yaml = format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    source: client\n    \
         proxy_protocol: {{ from: [127.0.0.1/32] }}\n    backends: [\"{}\"]\n",
        node.addr
    );
    let proxy = Proxy::start(&yaml).await;
    let Some(ha) = HaProxy::start(&[(proxy.addr("p"), Header::V2), (proxy.addr("p"), Header::V1)])
    else {
        return;
    };
    for (front, from) in [(0, "127.0.0.6"), (1, "127.0.0.7")] {
        let mut client = connect_from(from, ha.front(front)).await;
        let mut line = vec![0u8; 64];
        let n = tokio::time::timeout(T, client.read(&mut line))
            .await
            .expect("the node's line in time")
            .unwrap();
        let seen: SocketAddr = std::str::from_utf8(&line[..n])
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(seen.ip().to_string(), from, "front {front}");
    }
}

fn litecoind_required() -> bool {
    std::env::var("PIN_PROXY_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}
