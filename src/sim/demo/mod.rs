//! `pin-proxy demo`: three simulated Litecoin nodes, a pool in front of them
//! and a handful of P2P clients, all on loopback, put through a scripted
//! node failure, recovery and lag while the proxy's own log tells the story.
//!
//! - `client`: the demo's P2P clients (handshake, hold, redial).
//! - `story`: the scripted steps and the state each one waits for.
//! - `summary`: the closing table of clients, nodes and step timings.

mod client;
mod story;
mod summary;

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::oneshot;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::Config;
use crate::probe::wire::Magic;
use crate::runtime::server::Server;
use crate::sim::simnode::SimNode;

/// litecoin-regtest message start in wire order, as the pool's `network` says.
const MAGIC: Magic = [0xfa, 0xbf, 0xb5, 0xda];
/// The pool's name in logs.
const POOL: &str = "ltc-demo";
/// The simulated nodes, in config order.
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
/// Height every node starts at.
const START_HEIGHT: u64 = 1000;
/// One block on every node that is not frozen.
const BLOCK_TIME: Duration = Duration::from_secs(1);
/// Blocks a node may trail the best one (the pool's `max_lag_blocks`).
const MAX_LAG: u64 = 3;
/// The whole story must end within this, whatever happens.
const STORY_BUDGET: Duration = Duration::from_secs(75);
/// Budget for each part of the teardown.
const TEARDOWN_BUDGET: Duration = Duration::from_secs(5);

/// One simulated node and whether its chain is frozen (the lag scenario).
struct DemoNode {
    name: &'static str,
    sim: SimNode,
    frozen: AtomicBool,
}

/// Run the demo to its end: set up, play the story, print the summary.
///
/// # Errors
/// When the demo cannot set itself up, or a step of the story does not reach
/// the state it waits for in time (the summary is printed either way).
pub async fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let nodes = Arc::new(start_nodes().await?);
    let config = Config::parse(&pool_yaml(&nodes), Path::new("<demo>"))?;
    let server = Server::bind(config)?;
    let pool = server
        .pools()
        .into_iter()
        .next()
        .context("demo pool was not created")?;
    let listen = pool
        .listen()
        .first()
        .copied()
        .context("demo pool is not listening")?;
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        // A dropped sender means the demo is over as well.
        let _ = stopped.await;
    }));

    let token = CancellationToken::new();
    let tasks = TaskTracker::new();
    tasks.spawn(chain(nodes.clone(), token.clone()));
    let demo = story::Demo {
        pool,
        nodes,
        clients: client::Clients::default(),
        listen,
        token: token.clone(),
        tasks: tasks.clone(),
    };
    let mut timeline = Vec::new();
    let outcome = match tokio::time::timeout(STORY_BUDGET, story::play(&demo, &mut timeline)).await
    {
        Ok(result) => result,
        Err(_) => Err(anyhow::anyhow!(
            "demo: story did not finish within {STORY_BUDGET:?}"
        )),
    };
    let summary =
        summary::Summary::take(&demo, timeline, started.elapsed(), outcome.as_ref().err());

    token.cancel();
    tasks.close();
    if tokio::time::timeout(TEARDOWN_BUDGET, tasks.wait())
        .await
        .is_err()
    {
        warn!(tasks = tasks.len(), "demo_teardown_slow");
    }
    // The server may already be gone if it failed; nothing to stop then.
    let _ = stop.send(());
    match tokio::time::timeout(TEARDOWN_BUDGET, serving).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => warn!(err = %err, "demo_server_failed"),
        Err(_) => warn!("demo_server_slow_to_stop"),
    }
    for node in demo.nodes.iter() {
        node.sim.stop().await;
    }
    info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "demo_finished"
    );
    // Cosmetic only: let the log writer thread print the teardown lines
    // first so the summary comes last on the terminal.
    tokio::time::sleep(Duration::from_millis(200)).await;
    print_summary(&summary.render())?;
    outcome
}

/// Start every node on a free loopback port.
async fn start_nodes() -> anyhow::Result<Vec<DemoNode>> {
    let bind: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut nodes = Vec::with_capacity(NODES.len());
    for name in NODES {
        let sim = SimNode::start(bind, MAGIC, START_HEIGHT)
            .await
            .with_context(|| format!("demo: start {name} on {bind}"))?;
        nodes.push(DemoNode {
            name,
            sim,
            frozen: AtomicBool::new(false),
        });
    }
    Ok(nodes)
}

/// The pool: short intervals so each rule acts within a second or two.
fn pool_yaml(nodes: &[DemoNode]) -> String {
    let backends: String = nodes
        .iter()
        .map(|n| {
            format!(
                "      - {{ name: {}, addr: \"{}\" }}\n",
                n.name,
                n.sim.addr()
            )
        })
        .collect();
    format!(
        "pools:
  - name: {POOL}
    listen: 127.0.0.1:0
    connect_timeout: 1s
    rebalance: {{ interval: 1s, min_imbalance: 2 }}
    quarantine: {{ base: 2s, max: 8s, failures: 3 }}
    health:
      probe: bitcoin-p2p
      network: litecoin-regtest
      interval: 500ms
      timeout: 300ms
      max_lag_blocks: {MAX_LAG}
      fall: 2
      rise: 1
      drain: true
      drain_spread: 1s
    backends:
{backends}"
    )
}

/// The chain: one block per [`BLOCK_TIME`] on every node not frozen. A
/// stopped node keeps "syncing" too, so it comes back at the tip, as a real
/// node restarted after a short outage would within seconds.
async fn chain(nodes: Arc<Vec<DemoNode>>, token: CancellationToken) {
    let mut tick = tokio::time::interval_at(Instant::now() + BLOCK_TIME, BLOCK_TIME);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        for node in nodes.iter().filter(|n| !n.frozen.load(Ordering::Relaxed)) {
            node.sim.set_height(node.sim.height() + 1);
        }
    }
}

/// Write the summary in one piece so no log line lands inside the table.
fn print_summary(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("demo: print the summary")
}
