//! Spread drains through the real binary and real sockets: the clients of a
//! backend quarantined by hand see their connections closed one at a time
//! over `health.drain_spread`, oldest first, and nobody else's.
//!
//! Real time, so the timing bounds are loose (a loaded 2-core machine): the
//! rule under test is "spread, not one burst", which they still tell apart.

use std::time::Duration;

use crate::support::admin_http::{admin_addr, request};
use crate::support::nodes::{Node, echo_client};
use crate::support::proxy::Proxy;
use crate::support::{wait_until, within};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

const T: Duration = Duration::from_secs(20);
const CLIENTS: usize = 50;
const SPREAD: Duration = Duration::from_secs(5);

fn about(message: &'static str, backend: &'static str) -> impl Fn(&Value) -> bool {
    move |e| e["message"] == message && e["backend"] == backend
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_backends_clients_are_closed_over_the_spread_oldest_first() {
    let (a, b) = (Node::echo().await, Node::echo().await);
    // Probes an hour apart: only the start-up probe's connect reaches the
    // nodes, so their live counts are the clients.
    let yaml = format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         rebalance: {{ interval: 0s }}\n    health: {{ drain_spread: 5s, interval: 1h }}\n    \
         backends: [{{ name: a, addr: \"{}\" }}, {{ name: b, addr: \"{}\" }}]\n",
        a.addr, b.addr
    );
    let proxy = Proxy::start(&yaml).await;
    let admin = admin_addr(&proxy);

    // One at a time, so selection alternates a, b, a, ... and the ids grow
    // in this order.
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(echo_client(proxy.addr("p")).await);
    }
    assert_eq!((a.live(), b.live()), (CLIENTS / 2, CLIENTS / 2));

    // Each client notes when the proxy closes it.
    let (tx, mut closes) = mpsc::unbounded_channel();
    let t0 = Instant::now();
    for (i, mut s) in clients.into_iter().enumerate() {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 64];
            // EOF or a reset: either is the proxy closing it.
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            // The receiver is gone only once the test ended.
            let _ = tx.send((i, t0.elapsed()));
        });
    }
    let answer = request(admin, "POST", "/pools/p/backends/a/quarantine?for=10m").await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    let mut seen = Vec::new();
    within("a's clients closed", T, async {
        while seen.len() < CLIENTS / 2 {
            seen.push(closes.recv().await.expect("client tasks alive"));
        }
    })
    .await;
    let end = proxy
        .wait_event(|e| about("drained", "a")(e) && e["phase"] == "end", T)
        .await;

    // Spread: the first at once, the last near 4.8 s (25 over 5 s), and no
    // burst; the bounds allow for a loaded machine.
    let times: Vec<Duration> = seen.iter().map(|(_, at)| *at).collect();
    let (first, last) = (times[0], times[times.len() - 1]);
    assert!(
        first < Duration::from_secs(1),
        "first close at {first:?}: {times:?}"
    );
    assert!(
        last >= Duration::from_secs(4) && last <= SPREAD.mul_f64(1.5),
        "last close at {last:?}: {times:?}"
    );
    let mut buckets = std::collections::BTreeMap::<u128, usize>::new();
    for at in &times {
        *buckets.entry(at.as_millis() / 200).or_default() += 1;
    }
    let busiest = buckets.values().max().copied().unwrap_or(0);
    assert!(busiest <= 5, "{busiest} closes in one 200 ms: {times:?}");

    // Oldest first: a's clients are the even ones, closed in their order.
    let order: Vec<usize> = seen.iter().map(|(i, _)| *i).collect();
    let expected: Vec<usize> = (0..CLIENTS).step_by(2).collect();
    assert_eq!(order, expected, "not closed oldest first");

    // B's clients were never touched.
    let is_drained = |e: &Value| e["message"] == "closed" && e["reason"] == "drained";
    let drained = proxy.wait_count(is_drained, CLIENTS / 2, T).await;
    assert!(drained.iter().all(|e| e["backend"] == "a"), "{drained:?}");
    wait_until("a's node left with no client", T, || a.live() == 0).await;
    assert!(closes.try_recv().is_err(), "a client of b was closed");
    assert_eq!(b.live(), CLIENTS / 2);
    let events = proxy.events();
    let start = events
        .iter()
        .find(|e| about("drained", "a")(e) && e["phase"] == "start")
        .expect("a drained start event");
    assert_eq!(
        (&start["connections"], &start["spread_ms"], &start["reason"]),
        (
            &Value::from(CLIENTS / 2),
            &Value::from(5000),
            &Value::from("quarantined")
        )
    );
    assert_eq!(end["connections"], CLIENTS / 2);
    let closed_b = |e: &&Value| e["message"] == "closed" && e["backend"] == "b";
    assert_eq!(events.iter().filter(closed_b).count(), 0);
    assert_eq!(events.iter().filter(|e| is_drained(e)).count(), CLIENTS / 2);
}
