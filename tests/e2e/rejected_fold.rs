//! A flood of refused clients does not flood the log: a few `rejected` lines
//! per second and pool and reason, then one summary line a second with the
//! number left out, and every refusal accounted for.

use std::time::{Duration, Instant};

use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::within;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(10);
const FLOOD: usize = 2_000;
const PARALLEL: usize = 32;
/// Lines shown in full per second (the proxy's folding limit).
const LIMIT: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refused_clients_is_folded_into_counts() {
    let node = Node::echo().await;
    // Loopback clients are outside the allow-list: every one is refused.
    let proxy = Proxy::start(&format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    allow: [10.0.0.0/8]\n    \
         backends: [\"{}\"]\n",
        node.addr
    ))
    .await;
    let addr = proxy.addr("p");
    let started = Instant::now();
    let workers: Vec<_> = (0..PARALLEL)
        .map(|w| {
            tokio::spawn(async move {
                for _ in (w..FLOOD).step_by(PARALLEL) {
                    let mut c = TcpStream::connect(addr).await.unwrap();
                    let mut b = [0u8; 1];
                    // Closed at once: EOF or a reset, never data.
                    let n = within("refused client closed", T, c.read(&mut b)).await;
                    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    // Every refusal is in the log, shown or counted in a summary.
    let deadline = Instant::now() + T;
    let (shown, summaries) = loop {
        let rejected = proxy.named("rejected");
        let (summaries, shown): (Vec<_>, Vec<_>) = rejected
            .into_iter()
            .partition(|e| e.get("suppressed").is_some());
        let counted: u64 = summaries
            .iter()
            .map(|e| e["suppressed"].as_u64().unwrap())
            .sum();
        if shown.len() as u64 + counted == FLOOD as u64 {
            break (shown, summaries);
        }
        assert!(
            Instant::now() < deadline,
            "{} shown + {counted} counted of {FLOOD}",
            shown.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let seconds = started.elapsed().as_secs() as usize + 2;
    assert!(
        shown.len() <= LIMIT * seconds,
        "{} lines in full over about {seconds}s",
        shown.len()
    );
    assert!(
        !summaries.is_empty() && summaries.len() <= seconds,
        "{} summary lines over about {seconds}s",
        summaries.len()
    );
    assert!(
        summaries
            .iter()
            .all(|e| e["pool"] == "p" && e["reason"] == "allow_list"),
        "{summaries:?}"
    );
    println!(
        "FIGURE rejected: {FLOOD} refused clients in {:?} logged as {} lines + {} summaries",
        started.elapsed(),
        shown.len(),
        summaries.len()
    );
}
