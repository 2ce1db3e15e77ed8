//! The demo's closing summary: where each client is, what each node holds,
//! and how long each step of the story took. Rendering is a pure function.

use std::fmt::Write;
use std::time::Duration;

use super::story::{Demo, Reached, View};

/// One client's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientRow {
    name: String,
    local: String,
    node: String,
    dials: u32,
    height: String,
}

/// One node's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeRow {
    name: String,
    addr: String,
    state: String,
    height: u64,
    clients: usize,
    quarantines: u64,
}

/// Everything the summary prints.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    clients: Vec<ClientRow>,
    nodes: Vec<NodeRow>,
    moves: u64,
    timeline: Vec<Reached>,
    elapsed: Duration,
    failure: Option<String>,
}

impl Summary {
    /// Copy out the final state of `demo`.
    pub fn take(
        demo: &Demo,
        timeline: Vec<Reached>,
        elapsed: Duration,
        failure: Option<&anyhow::Error>,
    ) -> Summary {
        let view = View::take(demo);
        let clients = demo
            .clients
            .snapshot()
            .into_iter()
            .zip(&view.placed)
            .map(|(c, placed)| ClientRow {
                name: c.name,
                local: c.local.map_or_else(|| "-".to_owned(), |a| a.to_string()),
                node: placed.clone().unwrap_or_else(|| "(none)".to_owned()),
                dials: c.dials,
                height: c.height.map_or_else(|| "-".to_owned(), |h| h.to_string()),
            })
            .collect();
        let quarantines: Vec<(String, u64)> = view
            .pool
            .backends
            .iter()
            .map(|b| (b.name.clone(), b.counters.quarantines.values().sum()))
            .collect();
        let nodes = demo
            .nodes
            .iter()
            .map(|n| {
                let status = view.backends.iter().find(|b| b.name == n.name);
                NodeRow {
                    name: n.name.to_owned(),
                    addr: n.sim.addr().to_string(),
                    state: status.map_or_else(|| "?".to_owned(), |b| b.state.to_string()),
                    height: n.sim.height(),
                    clients: view.on(n.name),
                    quarantines: quarantines
                        .iter()
                        .find(|(name, _)| name == n.name)
                        .map_or(0, |(_, q)| *q),
                }
            })
            .collect();
        Summary {
            clients,
            nodes,
            moves: view.pool.rebalance_moves,
            timeline,
            elapsed,
            failure: failure.map(|e| format!("{e:#}")),
        }
    }

    /// The summary as text, ending with a newline.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) -> std::fmt::Result {
        writeln!(out, "\n== pin-proxy demo summary ==")?;
        writeln!(
            out,
            "clients (each spliced to one node for its whole connection):"
        )?;
        writeln!(
            out,
            "  {:<7} {:<22} {:<8} {:>5} {:>7} {:>7}",
            "client", "address", "node", "dials", "redials", "height"
        )?;
        for c in &self.clients {
            writeln!(
                out,
                "  {:<7} {:<22} {:<8} {:>5} {:>7} {:>7}",
                c.name,
                c.local,
                c.node,
                c.dials,
                c.dials.saturating_sub(1),
                c.height
            )?;
        }
        writeln!(out, "nodes:")?;
        writeln!(
            out,
            "  {:<7} {:<22} {:<12} {:>7} {:>7} {:>11}",
            "node", "address", "state", "height", "clients", "quarantines"
        )?;
        for n in &self.nodes {
            writeln!(
                out,
                "  {:<7} {:<22} {:<12} {:>7} {:>7} {:>11}",
                n.name, n.addr, n.state, n.height, n.clients, n.quarantines
            )?;
        }
        let per_node: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}={}", n.name, n.clients))
            .collect();
        writeln!(out, "connections per node: {}", per_node.join(" "))?;
        writeln!(out, "rebalance moves: {}", self.moves)?;
        writeln!(out, "timeline:")?;
        writeln!(out, "  {:>7} {:>7}  {:<16} reached", "at", "took", "step")?;
        for r in &self.timeline {
            writeln!(
                out,
                "  {:>7} {:>7}  {:<16} {}",
                secs(r.at),
                secs(r.took),
                r.step,
                r.what
            )?;
        }
        match &self.failure {
            None => writeln!(out, "demo finished in {}: ok", secs(self.elapsed)),
            Some(err) => writeln!(out, "demo FAILED after {}: {err}", secs(self.elapsed)),
        }
    }
}

/// `12.3s`.
fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_client_node_and_step() {
        let summary = Summary {
            clients: vec![ClientRow {
                name: "c1".into(),
                local: "127.0.0.1:40000".into(),
                node: "node-a".into(),
                dials: 3,
                height: "1012".into(),
            }],
            nodes: vec![NodeRow {
                name: "node-a".into(),
                addr: "127.0.0.1:30000".into(),
                state: "healthy".into(),
                height: 1015,
                clients: 1,
                quarantines: 2,
            }],
            moves: 4,
            timeline: vec![Reached {
                step: "stop node-b",
                what: "node-b quarantined",
                at: Duration::from_millis(5240),
                took: Duration::from_millis(1140),
            }],
            elapsed: Duration::from_millis(27_340),
            failure: None,
        };
        let text = summary.render();
        for want in [
            "== pin-proxy demo summary ==",
            "  c1      127.0.0.1:40000        node-a       3       2    1012",
            "  node-a  127.0.0.1:30000        healthy         1015       1           2",
            "connections per node: node-a=1",
            "rebalance moves: 4",
            "     5.2s    1.1s  stop node-b      node-b quarantined",
            "demo finished in 27.3s: ok",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
    }
}
