//! The scripted story: each step is announced in the log (`demo`), acts on
//! a node, then waits (bounded) until the pool and the clients reach the
//! state the contract promises (`demo_reached`). A step that times out logs
//! `demo_timeout` with what it saw and ends the story with an error.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info};

use super::client::{Clients, Dialer};
use super::{DemoNode, NODES};
use crate::ops::status::BackendStatus;
use crate::pool::health::State;
use crate::pool::registry::Pool;
use crate::pool::snapshot::PoolSnapshot;

/// How many clients the demo runs.
const CLIENTS: usize = 6;
/// How often a wait looks at the pool.
const POLL: Duration = Duration::from_millis(50);
/// Budget for a wait: several probe intervals and rebalance ticks, plus a
/// quarantine window, with room for a slow machine.
const WAIT: Duration = Duration::from_secs(15);
/// How long the last step watches a balanced pool to see nothing move.
const STEADY: Duration = Duration::from_secs(3);

/// Everything the story acts on.
pub(crate) struct Demo {
    /// The demo's only pool.
    pub pool: Arc<Pool>,
    /// The simulated nodes, in config order.
    pub nodes: Arc<Vec<DemoNode>>,
    /// The clients' views.
    pub clients: Clients,
    /// The pool's listen address.
    pub listen: SocketAddr,
    /// Cancelled at teardown.
    pub token: CancellationToken,
    /// Where the clients run.
    pub tasks: TaskTracker,
}

/// One state the story reached.
#[derive(Debug, Clone)]
pub(crate) struct Reached {
    /// The step that waited for it.
    pub step: &'static str,
    /// What was reached.
    pub what: &'static str,
    /// When, since the story began.
    pub at: Duration,
    /// Since the step was announced.
    pub took: Duration,
}

/// The pool and the clients at one moment.
pub(crate) struct View {
    /// Every backend, in config order.
    pub backends: Vec<BackendStatus>,
    /// Per client (in order): the backend it is connected through, if it
    /// finished its handshake and the pool still holds its connection.
    pub placed: Vec<Option<String>>,
    /// The pool snapshot both of the above were read from.
    pub pool: PoolSnapshot,
}

impl View {
    /// Look at the pool and the clients now.
    pub fn take(demo: &Demo) -> View {
        let clients = demo.clients.snapshot();
        let pool = demo.pool.view().snapshot();
        let placed = clients
            .iter()
            .map(|c| match (c.up, c.local) {
                (true, Some(local)) => super::client::backend_of(&pool, local),
                _ => None,
            })
            .collect();
        View {
            backends: pool.backends.iter().map(BackendStatus::from).collect(),
            placed,
            pool,
        }
    }

    fn backend(&self, name: &str) -> Option<&BackendStatus> {
        self.backends.iter().find(|b| b.name == name)
    }

    /// Clients connected through backend `name`.
    pub fn on(&self, name: &str) -> usize {
        self.placed
            .iter()
            .filter(|p| p.as_deref() == Some(name))
            .count()
    }

    fn all_placed(&self) -> bool {
        self.placed.len() == CLIENTS && self.placed.iter().all(Option::is_some)
    }

    fn balanced(&self) -> bool {
        self.all_placed()
            && NODES
                .iter()
                .all(|n| self.on(n) == CLIENTS / NODES.len() && self.is(n, State::Healthy))
    }

    fn is(&self, name: &str, state: State) -> bool {
        self.backend(name).is_some_and(|b| b.state == state)
    }

    fn quarantined(&self, name: &str) -> bool {
        self.backend(name).is_some_and(|b| b.quarantine.is_some())
    }

    fn strikes(&self, name: &str) -> u32 {
        self.backend(name).map_or(0, |b| b.strikes)
    }

    /// Released: back to healthy, no quarantine left.
    fn back(&self, name: &str) -> bool {
        self.is(name, State::Healthy) && !self.quarantined(name)
    }

    /// One line for logs and errors: `node-a=healthy/2 node-b=down/0 ...`.
    pub fn brief(&self) -> String {
        let mut out: Vec<String> = self
            .backends
            .iter()
            .map(|b| format!("{}={}/{}", b.name, b.state, self.on(&b.name)))
            .collect();
        let unplaced = self.placed.iter().filter(|p| p.is_none()).count();
        out.push(format!("unplaced={unplaced}"));
        out.join(" ")
    }
}

/// Announces steps and waits for states, keeping the timeline.
struct Script<'a> {
    demo: &'a Demo,
    timeline: &'a mut Vec<Reached>,
    began: Instant,
    step: &'static str,
    step_began: Instant,
}

impl Script<'_> {
    fn announce(&mut self, step: &'static str, detail: &str) {
        self.step = step;
        self.step_began = Instant::now();
        info!(step, detail, "demo");
    }

    /// Poll until `cond` holds, for at most [`WAIT`].
    async fn wait(
        &mut self,
        what: &'static str,
        cond: impl Fn(&View) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + WAIT;
        loop {
            let view = View::take(self.demo);
            let now = Instant::now();
            if cond(&view) {
                let reached = Reached {
                    step: self.step,
                    what,
                    at: now - self.began,
                    took: now - self.step_began,
                };
                info!(
                    step = reached.step, reached = what, took_ms = reached.took.as_millis() as u64,
                    pool = %view.brief(), "demo_reached"
                );
                self.timeline.push(reached);
                return Ok(());
            }
            if now >= deadline {
                error!(step = self.step, waiting_for = what, pool = %view.brief(), "demo_timeout");
                anyhow::bail!(
                    "demo step {:?}: no {what:?} after {WAIT:?} (pool: {})",
                    self.step,
                    view.brief()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn node(&self, name: &str) -> anyhow::Result<&DemoNode> {
        self.demo
            .nodes
            .iter()
            .find(|n| n.name == name)
            .with_context(|| format!("demo has no node {name}"))
    }
}

/// Play the story, appending each state reached to `timeline`.
///
/// # Errors
/// The first step that did not reach its state in time.
pub(crate) async fn play(demo: &Demo, timeline: &mut Vec<Reached>) -> anyhow::Result<()> {
    let now = Instant::now();
    let mut s = Script {
        demo,
        timeline,
        began: now,
        step: "",
        step_began: now,
    };

    s.announce("start", "3 nodes, a pool probing them, 6 clients");
    s.wait("every node probed healthy", |v| {
        NODES.iter().all(|n| v.is(n, State::Healthy))
    })
    .await?;
    let dialer = Dialer {
        proxy: demo.listen,
        pool: demo.pool.clone(),
        clients: demo.clients.clone(),
    };
    for i in 1..=CLIENTS {
        demo.tasks
            .spawn(dialer.clone().run(format!("c{i}"), demo.token.clone()));
    }
    s.wait("clients spread 2/2/2", View::balanced).await?;

    s.announce(
        "stop node-b",
        "node-b dies: its clients fail over, probes keep it out",
    );
    s.node("node-b")?.sim.stop().await;
    s.wait("node-b's clients reconnected elsewhere", |v| {
        v.all_placed() && v.on("node-b") == 0
    })
    .await?;
    s.wait("node-b quarantined", |v| v.quarantined("node-b"))
        .await?;
    // Still down when the window ends: the next window is twice as long.
    s.wait("node-b quarantined again, window doubled", |v| {
        v.quarantined("node-b") && v.strikes("node-b") >= 2
    })
    .await?;

    s.announce(
        "restart node-b",
        "node-b is back: probes let it in, rebalance refills it",
    );
    s.node("node-b")?
        .sim
        .restart()
        .await
        .context("demo: restart node-b")?;
    s.wait("node-b released", |v| v.back("node-b")).await?;
    s.wait("rebalanced to 2/2/2", View::balanced).await?;

    s.announce(
        "freeze node-c",
        "node-c stops following the chain and falls behind",
    );
    s.node("node-c")?.frozen.store(true, Ordering::Relaxed);
    s.wait("node-c lagging and quarantined", |v| {
        v.is("node-c", State::Lagging) && v.quarantined("node-c")
    })
    .await?;
    s.wait("node-c drained, its clients elsewhere", |v| {
        v.all_placed() && v.on("node-c") == 0
    })
    .await?;

    s.announce(
        "catch up node-c",
        "node-c syncs to the tip and follows the chain again",
    );
    let tip = demo.nodes.iter().map(|n| n.sim.height()).max().unwrap_or(0);
    let c = s.node("node-c")?;
    c.sim.set_height(tip);
    c.frozen.store(false, Ordering::Relaxed);
    s.wait("node-c released", |v| v.back("node-c")).await?;
    s.wait("rebalanced to 2/2/2", View::balanced).await?;

    s.announce("steady", "a balanced pool: nothing moves");
    let moves = demo.pool.view().overview().rebalance_moves;
    let quiet_until = Instant::now() + STEADY;
    s.wait("no move for a while", |v| {
        Instant::now() >= quiet_until && v.balanced() && v.pool.rebalance_moves == moves
    })
    .await?;
    Ok(())
}
