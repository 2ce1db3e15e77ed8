//! `health.stall_rule` through the real binary, with request/response
//! backends (echo): three quiet clients on `a`, three busy ones on `b`.
//! Under `push` (the default) `a` is `stalled`, as any silence counts;
//! under `request` the quiet clients owe nothing and `a` keeps them. A
//! backend that stops answering requests is still `stalled` under
//! `request`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::nodes::{Node, echo_client};
use crate::support::proxy::Proxy;
use crate::support::stall::{config_with, everyone_kept, stalled_detail, wait_probes};
use crate::support::within;

const T: Duration = Duration::from_secs(10);

/// An echo node that answers only while `answering` (else it reads and
/// drops: a server that stopped answering requests).
async fn answerer(answering: Arc<AtomicBool>) -> Node {
    Node::start(move |mut s: TcpStream| {
        let answering = answering.clone();
        async move {
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                if answering.load(Ordering::SeqCst) && s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

fn config(a: SocketAddr, b: SocketAddr, rule: &str) -> String {
    config_with(a, b, &format!("stall_timeout: 1s, stall_rule: {rule}"))
}

/// Six clients, each answered once (least used first: a, b, a, b, a, b).
async fn clients(proxy: &Proxy) -> (Vec<TcpStream>, Vec<TcpStream>) {
    let (mut on_a, mut on_b) = (Vec::new(), Vec::new());
    for i in 0..6 {
        let c = echo_client(proxy.addr("p")).await;
        if i % 2 == 0 {
            on_a.push(c)
        } else {
            on_b.push(c)
        }
    }
    let connected = proxy
        .wait_count(|e| e["message"] == "connected", 6, T)
        .await;
    let order: Vec<&str> = connected
        .iter()
        .filter_map(|e| e["backend"].as_str())
        .collect();
    assert_eq!(order, ["a", "b", "a", "b", "a", "b"]);
    (on_a, on_b)
}

/// Keep `c` asking: a byte every 100 ms, each waiting for its answer.
fn busy(mut c: TcpStream) {
    tokio::spawn(async move {
        let mut b = [0u8; 1];
        while c.write_all(b"?").await.is_ok() && c.read_exact(&mut b).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_clients_stall_their_backend_under_push_only() {
    let answering = Arc::new(AtomicBool::new(true));
    let (a, b) = (answerer(answering.clone()).await, answerer(answering).await);

    {
        let proxy = Proxy::start(&config(a.addr, b.addr, "push")).await;
        let (_quiet, on_b) = clients(&proxy).await;
        on_b.into_iter().for_each(busy);
        stalled_detail(&proxy, "a").await;
    }

    let proxy = Proxy::start(&config(a.addr, b.addr, "request")).await;
    let (mut quiet, on_b) = clients(&proxy).await;
    on_b.into_iter().for_each(busy);
    // 40 probes of a, 100 ms apart: four times the stall timeout.
    wait_probes(&proxy, "a", 40).await;
    everyone_kept(&proxy, 3).await;
    // The quiet clients were kept and are answered when they ask.
    for c in &mut quiet {
        c.write_all(b"!").await.unwrap();
        let mut b = [0u8; 1];
        within("an answer from a", T, c.read_exact(&mut b))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_request_a_backend_that_stops_answering_is_stalled() {
    let a_answers = Arc::new(AtomicBool::new(true));
    let a = answerer(a_answers.clone()).await;
    let b = answerer(Arc::new(AtomicBool::new(true))).await;
    let proxy = Proxy::start(&config(a.addr, b.addr, "request")).await;
    let (on_a, on_b) = clients(&proxy).await;
    on_a.into_iter().chain(on_b).for_each(busy);
    a_answers.store(false, Ordering::SeqCst);
    let detail = stalled_detail(&proxy, "a").await;
    assert!(
        detail.contains("3 connections waited for an answer for 1s while b sent"),
        "{detail}"
    );
    assert!(
        proxy
            .named("quarantined")
            .iter()
            .all(|e| e["backend"] != "b")
    );
}
