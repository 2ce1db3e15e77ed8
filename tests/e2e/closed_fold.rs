//! A flood of clients that connect and reset at once does not flood the
//! log: their `closed` lines are folded per pool and reason (a few in full
//! a second, then one summary line a second with the number left out),
//! every one is accounted for, also when each sends a byte before its
//! reset, and a connection that carried bytes for longer than a second
//! still gets its own full line.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::within;

const T: Duration = Duration::from_secs(20);
const FLOOD: usize = 1_000;
const PARALLEL: usize = 32;
/// Lines shown in full per second, pool and reason (the proxy's limit).
const LIMIT: usize = 20;

/// The `closed` lines so far: (shown in full, summaries).
fn closed_lines(events: &[Value]) -> (Vec<Value>, Vec<Value>) {
    events
        .iter()
        .filter(|e| e["message"] == "closed")
        .cloned()
        .partition(|e| e.get("suppressed").is_none())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_and_reset_flood_is_folded_into_counts() {
    flood_is_folded(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_that_sends_a_byte_and_resets_is_folded_too() {
    flood_is_folded(b"x").await;
}

/// `FLOOD` clients each send `payload`, read its echo and reset.
async fn flood_is_folded(payload: &'static [u8]) {
    let node = Node::echo().await;
    let proxy = Proxy::start(&format!(
        "log: {{ level: info, format: json }}\n\
         pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends: [\"{}\"]\n",
        node.addr
    ))
    .await;
    let addr = proxy.addr("p");
    // A real client, held open across the flood.
    let mut held = TcpStream::connect(addr).await.unwrap();
    held.write_all(b"hello").await.unwrap();
    let mut b = [0u8; 5];
    within("echo", T, held.read_exact(&mut b)).await.unwrap();
    let started = Instant::now();
    let workers: Vec<_> = (0..PARALLEL)
        .map(|w| {
            tokio::spawn(async move {
                for _ in (w..FLOOD).step_by(PARALLEL) {
                    let mut c = TcpStream::connect(addr).await.unwrap();
                    if !payload.is_empty() {
                        c.write_all(payload).await.unwrap();
                        let mut echo = vec![0u8; payload.len()];
                        within("flood echo", T, c.read_exact(&mut echo))
                            .await
                            .unwrap();
                    }
                    // Reset, not FIN: what a flood tool does.
                    socket2::SockRef::from(&c)
                        .set_linger(Some(Duration::ZERO))
                        .unwrap();
                    drop(c);
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    // Every flood connection is in the log, shown or counted; a summary
    // comes a window after the flood's first lines, so the held client
    // has lived longer than a second by then.
    let (shown, summaries) = proxy
        .wait_log("every flood connection accounted for", T, |events| {
            let (shown, summaries) = closed_lines(events);
            let counted: u64 = summaries
                .iter()
                .map(|e| e["suppressed"].as_u64().unwrap_or(0))
                .sum();
            // The held client is the first connection and not closed yet.
            (shown.len() as u64 + counted == FLOOD as u64 && !summaries.is_empty())
                .then_some((shown, summaries))
        })
        .await;
    let seconds = started.elapsed().as_secs() as usize + 2;
    let reasons: std::collections::BTreeSet<&str> = shown
        .iter()
        .chain(&summaries)
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert!(
        shown.len() <= LIMIT * seconds * reasons.len(),
        "{} lines in full over about {seconds}s for reasons {reasons:?}",
        shown.len()
    );
    assert!(
        summaries.iter().all(|e| e["pool"] == "p"
            && e.get("conn").is_none()
            && e["suppressed"].as_u64() > Some(0)),
        "{summaries:?}"
    );
    assert!(
        summaries.len() <= seconds * reasons.len(),
        "{} summaries",
        summaries.len()
    );
    // The held client carried bytes: its own full line.
    drop(held);
    let line = proxy
        .wait_event(
            |e| e["message"] == "closed" && e["bytes_up"] == 5 && e["bytes_down"] == 5,
            T,
        )
        .await;
    assert!(line["duration_ms"].as_u64() >= Some(1000), "{line}");
    assert_eq!(line["reason"], "client_closed", "{line}");
    println!(
        "FIGURE closed: {FLOOD} connect-and-reset clients sending {} bytes in {:?} logged as {} lines + {} summaries",
        payload.len(),
        started.elapsed(),
        shown.len(),
        summaries.len()
    );
}
