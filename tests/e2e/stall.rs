//! Stalled backends through the real binary: nodes that send each client a
//! byte every 200 ms; one stops sending (still accepting, still passing
//! its probes) and is taken out as `stalled`, its client closed so it can
//! go to the other; a pool where nobody sends keeps everyone. And the
//! per-source limit: a third client from one address is turned away while
//! another address is served.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::admin_http::{backend, status};
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::stall::{config_with, everyone_kept, stalled_detail, wait_probes};
use crate::support::within;

const T: Duration = Duration::from_secs(10);

/// A node that writes one byte to each client every 200 ms while `sending`.
async fn ticker(sending: Arc<AtomicBool>) -> Node {
    Node::start(move |mut s: TcpStream| {
        let sending = sending.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tick.tick().await;
                if sending.load(Ordering::SeqCst) && s.write_all(b".").await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

fn config(a: SocketAddr, b: SocketAddr, stall: &str) -> String {
    config_with(a, b, &format!("stall_timeout: {stall}"))
}

/// One client on each backend, in config order (least used first).
async fn one_on_each(proxy: &Proxy) -> (TcpStream, TcpStream) {
    let first = TcpStream::connect(proxy.addr("p")).await.unwrap();
    proxy
        .wait_event(|e| e["message"] == "connected" && e["backend"] == "a", T)
        .await;
    let second = TcpStream::connect(proxy.addr("p")).await.unwrap();
    proxy
        .wait_event(|e| e["message"] == "connected" && e["backend"] == "b", T)
        .await;
    (first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_stops_sending_is_stalled_and_its_client_freed() {
    let (a_sends, b_sends) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(true)),
    );
    let (a, b) = (ticker(a_sends.clone()).await, ticker(b_sends).await);
    let proxy = Proxy::start(&config(a.addr, b.addr, "1s")).await;
    let (mut on_a, mut on_b) = one_on_each(&proxy).await;
    let mut byte = [0u8; 1];
    within("a byte from a", T, on_a.read_exact(&mut byte))
        .await
        .unwrap();
    within("a byte from b", T, on_b.read_exact(&mut byte))
        .await
        .unwrap();

    a_sends.store(false, Ordering::SeqCst);
    let detail = stalled_detail(&proxy, "a").await;
    assert!(detail.contains("while b sent"), "{detail}");
    let st = status(proxy.admin()).await;
    assert_eq!(backend(&st, "p", "a")["state"], "stalled");
    assert_eq!(backend(&st, "p", "b")["state"], "healthy");
    // a's client is closed by the proxy (drained), b's stays.
    let mut rest = Vec::new();
    within("a's client closed", T, on_a.read_to_end(&mut rest))
        .await
        .unwrap();
    proxy
        .wait_event(|e| e["message"] == "closed" && e["backend"] == "a", T)
        .await;
    within("b still sends", T, on_b.read_exact(&mut byte))
        .await
        .unwrap();
    // The next client goes to b.
    let _next = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let n = proxy.named("connected").len();
    proxy
        .wait_count(|e| e["message"] == "connected", n.max(3), T)
        .await;
    let last = proxy.named("connected").pop().unwrap();
    assert_eq!(last["backend"], "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_where_nobody_sends_keeps_everyone() {
    let quiet = || Arc::new(AtomicBool::new(false));
    let (a, b) = (ticker(quiet()).await, ticker(quiet()).await);
    let proxy = Proxy::start(&config(a.addr, b.addr, "300ms")).await;
    let (_on_a, _on_b) = one_on_each(&proxy).await;
    // Many probes of each, well past the timeout (100 ms apart: 3 s).
    wait_probes(&proxy, "a", 30).await;
    wait_probes(&proxy, "b", 30).await;
    everyone_kept(&proxy, 1).await;
}

/// A client bound to `from` (a loopback address) connected to `to`.
async fn client_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_gets_at_most_its_share() {
    let node = Node::echo().await;
    let proxy = Proxy::start(&format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    max_connections_per_source: 2\n    \
         backends: [\"{}\"]\n",
        node.addr
    ))
    .await;
    let to = proxy.addr("p");
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = client_from("127.0.0.1", to).await;
        c.write_all(b"x").await.unwrap();
        let mut b = [0u8; 1];
        within("echo", T, c.read_exact(&mut b)).await.unwrap();
        held.push(c);
    }
    let mut third = client_from("127.0.0.1", to).await;
    let rejected = proxy.wait_event(|e| e["message"] == "rejected", T).await;
    assert_eq!(rejected["reason"], "per_source", "{rejected}");
    let mut rest = Vec::new();
    let n = within("the third is closed", T, third.read_to_end(&mut rest)).await;
    assert!(n.is_err() || rest.is_empty(), "{n:?}");
    // Another address is served; and a freed place is taken again.
    let mut other = client_from("127.0.0.2", to).await;
    other.write_all(b"y").await.unwrap();
    let mut b = [0u8; 1];
    within("echo for another address", T, other.read_exact(&mut b))
        .await
        .unwrap();
    drop(held.pop());
    proxy
        .wait_event(
            |e| {
                e["message"] == "closed"
                    && e["client"]
                        .as_str()
                        .is_some_and(|c| c.starts_with("127.0.0.1:"))
            },
            T,
        )
        .await;
    let mut again = client_from("127.0.0.1", to).await;
    again.write_all(b"z").await.unwrap();
    within("echo once a place is free", T, again.read_exact(&mut b))
        .await
        .unwrap();
}
