//! What a `GET /connections` costs at 9,000 connections: the time and the
//! bytes of a call with `limit=100` and with `limit=10000`, and with a
//! client filter (which counts `total` over every entry). Ignored: it
//! holds 18,000 sockets in this process and prints figures, asserting
//! none of its times. Run it alone:
//!
//! `cargo test --test e2e admin::connections_cost -- --ignored --nocapture`

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::support::admin_http::{admin_addr, request};
use crate::support::admin_wait::wait_connections;
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;

/// Connections held.
const CONNS: usize = 9_000;
/// Calls timed per case.
const CALLS: usize = 21;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "holds 18,000 sockets and prints figures; run alone with --ignored --nocapture"]
async fn connections_cost_at_9000_connections() {
    let node = Node::hold().await;
    let proxy = Proxy::start(&format!(
        "admin: {{ listen: 127.0.0.1:0 }}\nlog: {{ level: info, format: json }}\npools:\n  \
         - name: p\n    listen: 127.0.0.1:0\n    max_connections: 20000\n    \
         rebalance: {{ interval: 0s }}\n    health: {{ probe: connect, interval: 1h }}\n    \
         backends: [{{ name: a, addr: \"{}\" }}]\n",
        node.addr
    ))
    .await;
    let admin = admin_addr(&proxy);
    let mut held = Vec::with_capacity(CONNS);
    for _ in 0..CONNS {
        held.push(TcpStream::connect(proxy.addr("p")).await.unwrap());
    }
    wait_connections(
        admin,
        "limit=1",
        "every connection spliced",
        Duration::from_secs(120),
        |l| {
            let spliced = l["connections"][0]["state"] == "spliced";
            (l["total"] == CONNS && spliced).then_some(())
        },
    )
    .await;
    eprintln!(
        "GET /connections at {CONNS} connections, {CALLS} calls each (ms: median, min, max):"
    );
    for query in [
        "limit=100",
        "limit=10000",
        "client=127.0.0.1/32&limit=100",
        "client=10.0.0.0/8&limit=100",
    ] {
        let path = format!("/connections?{query}");
        let mut times = Vec::with_capacity(CALLS);
        let mut bytes = 0;
        for _ in 0..CALLS {
            let t = Instant::now();
            let answer = request(admin, "GET", &path).await;
            times.push(t.elapsed());
            assert_eq!(answer.status, 200, "{}", answer.body);
            bytes = answer.body.len();
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        eprintln!(
            "  {query:<32} {:7.2} {:7.2} {:7.2}  {bytes} bytes",
            ms(times[CALLS / 2]),
            ms(times[0]),
            ms(times[CALLS - 1])
        );
    }
    let t = Instant::now();
    let status = request(admin, "GET", "/status").await;
    eprintln!(
        "  /status (for comparison)         {:7.2} ms  {} bytes",
        t.elapsed().as_secs_f64() * 1e3,
        status.body.len()
    );
    drop(held);
}
