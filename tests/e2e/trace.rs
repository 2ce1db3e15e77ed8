//! A scripted run whose outside answers are written down, normalized, for
//! before/after comparisons of a change meant to change no behaviour:
//! every log event, `/status` and `/metrics` at each step, and every admin
//! answer, over drains, a release, three reloads and one live upgrade.
//!
//! `PIN_PROXY_TRACE=FILE cargo test --test e2e trace -- --ignored` writes
//! the transcript; run it on both trees and `diff` the files. Times,
//! durations, ports and process ids are replaced by placeholders; events
//! that come on a timer (probes) are left out, and the events of each
//! step are sorted, so two runs of one tree give the same file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::support::admin_http::request;
use crate::support::admin_wait::wait_status;
use crate::support::nodes::{Node, echo_client};
use crate::support::proxy::Proxy;
use crate::support::upgrade::{Bin, upgrade_ok};

const T: Duration = Duration::from_secs(30);

/// Events that come on a timer or race the script, not from its steps.
const TIMED: &[&str] = &["probe", "probe_failed", "probe_ok", "health", "tick"];

/// True for an event of the script's: not a timer's, nor a `GET` of the
/// script's own polling.
fn scripted(e: &Value) -> bool {
    let message = e["message"].as_str().unwrap_or("");
    !TIMED.contains(&message) && (message != "admin_request" || e["method"] != "GET")
}

/// Replaces what differs between runs of one tree with placeholders.
struct Normal {
    names: BTreeMap<String, String>,
}

impl Normal {
    fn addr(&mut self, addr: SocketAddr, name: &str) {
        self.names.insert(addr.to_string(), name.to_owned());
        self.names
            .insert(addr.port().to_string(), format!("{name}-port"));
    }

    fn text(&self, s: &str) -> String {
        let mut out = s.to_owned();
        for (from, to) in self.names.iter().rev() {
            if from.contains(':') || from.starts_with('/') {
                out = out.replace(from.as_str(), to);
            }
        }
        // Client addresses and times are different in every run.
        let mut cleaned = String::new();
        for word in split_keep(&out) {
            cleaned.push_str(&word_normal(&word));
        }
        cleaned
    }

    fn value(&self, key: &str, v: &Value) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "timestamp" | "pid" | "fields"))
                    .map(|(k, v)| (k.clone(), self.value(k, v)))
                    .collect(),
            ),
            Value::Array(list) => Value::Array(list.iter().map(|v| self.value(key, v)).collect()),
            Value::String(s) => Value::String(self.text(s)),
            Value::Number(_) if timed_key(key) => Value::String("<n>".into()),
            other => other.clone(),
        }
    }
}

/// Keys whose numbers are times, durations or ids of the run.
fn timed_key(key: &str) -> bool {
    key.ends_with("_ms")
        || key.ends_with("_secs")
        || key.ends_with("_at")
        || key.contains("latency")
        || key.contains("uptime")
        || key.starts_with("rss")
        || matches!(key, "pid" | "generation_pid" | "elapsed" | "age" | "since")
}

/// `s` cut into runs of address/time characters and the rest.
fn split_keep(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut word = String::new();
    let wordy = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-' | '+');
    for c in s.chars() {
        if wordy(c) {
            word.push(c);
        } else {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            out.push(c.to_string());
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// A client address or a time becomes a placeholder.
fn word_normal(w: &str) -> String {
    if w.starts_with("127.0.0.1:") && w[10..].chars().all(|c| c.is_ascii_digit()) {
        return "<client>".into();
    }
    let b = w.as_bytes();
    if b.len() >= 20 && b[4] == b'-' && b[7] == b'-' && b[10] == b'T' {
        return "<time>".into();
    }
    w.to_owned()
}

/// The metrics text without timings and process figures, numbers of
/// timed series as placeholders.
fn metrics_normal(n: &Normal, text: &str) -> String {
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let series = line.split([' ', '{']).next().unwrap_or("");
        if series.starts_with("process_")
            || series.contains("seconds")
            || series.contains("latency")
            || series.contains("uptime")
            || series.contains("_bytes")
        {
            continue;
        }
        let line = n.text(line);
        // Probes run on a timer: how many ran is not the script's.
        let line = match line.rsplit_once(' ') {
            Some((series, _)) if series.starts_with("pin_proxy_probes_total") => {
                format!("{series} <n>")
            }
            _ => line,
        };
        lines.push(line);
    }
    lines.sort();
    lines.join("\n")
}

struct Transcript {
    normal: Normal,
    out: String,
    seen: usize,
}

impl Transcript {
    /// The events since the last step, sorted; then `/status` and
    /// `/metrics`.
    async fn step(&mut self, proxy: &Proxy, name: &str) {
        let events = proxy.events();
        let mut lines: Vec<String> = events[self.seen..]
            .iter()
            .filter(|e| scripted(e))
            .map(|e| self.normal.value("", e).to_string())
            .collect();
        self.seen = events.len();
        lines.sort();
        let _ = writeln!(self.out, "== {name}: events");
        for l in lines {
            let _ = writeln!(self.out, "{l}");
        }
        let status = request(proxy.admin(), "GET", "/status").await.json();
        let _ = writeln!(
            self.out,
            "== {name}: /status\n{}",
            serde_json::to_string_pretty(&self.normal.value("", &status)).unwrap()
        );
        let metrics = request(proxy.admin(), "GET", "/metrics").await.body;
        let _ = writeln!(
            self.out,
            "== {name}: /metrics\n{}",
            metrics_normal(&self.normal, &metrics)
        );
    }

    async fn admin(&mut self, proxy: &Proxy, method: &str, path: &str) -> Value {
        let answer = request(proxy.admin(), method, path).await;
        let mut body: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
        // The drain runs while the answer is written: how far it got races.
        if let Some(live) = body.pointer_mut("/backend/connections") {
            *live = Value::String("<n>".into());
        }
        let _ = writeln!(
            self.out,
            "== {method} {path}: {} {}",
            answer.status,
            self.normal.value("", &body)
        );
        body
    }
}

fn config(nodes: &[(&str, SocketAddr)], max: usize) -> String {
    let list: Vec<String> = nodes
        .iter()
        .map(|(name, a)| format!("{{ name: {name}, addr: \"{a}\" }}"))
        .collect();
    format!(
        "admin: {{ listen: 127.0.0.1:0 }}\n\
         log: {{ level: debug, format: json }}\n\
         pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         max_connections: {max}\n    \
         rebalance: {{ interval: 0s }}\n    \
         health: {{ probe: connect, interval: 500ms, drain_spread: 0s }}\n    \
         backends: [{}]\n",
        list.join(", ")
    )
}

/// State and connections of backend `name` of the first pool in
/// `status`; `gone` when it is not there.
fn backend_state(status: &Value, name: &str) -> (String, u64) {
    let b = status["pools"][0]["backends"]
        .as_array()
        .and_then(|l| l.iter().find(|b| b["name"] == name).cloned())
        .unwrap_or(Value::Null);
    (
        b["state"].as_str().unwrap_or("gone").to_owned(),
        b["connections"].as_u64().unwrap_or(0),
    )
}

async fn wait_state(proxy: &Proxy, name: &str, want: &str) {
    wait_status(proxy.admin(), &format!("{name} {want}"), T, |s| {
        (backend_state(s, name).0 == want).then_some(())
    })
    .await;
}

/// Wait until the pool holds `n` spliced connections.
async fn wait_active(proxy: &Proxy, n: u64) {
    wait_status(proxy.admin(), &format!("{n} connections"), T, |s| {
        let active: u64 = s["pools"][0]["backends"].as_array().map_or(0, |l| {
            l.iter().filter_map(|b| b["connections"].as_u64()).sum()
        });
        (active == n).then_some(())
    })
    .await;
}

/// True once a client's connection was closed by the proxy.
async fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_millis(1), s.read(&mut b)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes a transcript for before/after comparisons: PIN_PROXY_TRACE=FILE"]
async fn scripted_run_transcript() {
    let Ok(path) = std::env::var("PIN_PROXY_TRACE") else {
        eprintln!("PIN_PROXY_TRACE not set: nothing to write");
        return;
    };
    let (a, b, c, d) = (
        Node::echo().await,
        Node::echo().await,
        Node::echo().await,
        Node::echo().await,
    );
    let mut t = Transcript {
        normal: Normal {
            names: BTreeMap::new(),
        },
        out: String::new(),
        seen: 0,
    };
    for (node, name) in [
        (&a, "node-a"),
        (&b, "node-b"),
        (&c, "node-c"),
        (&d, "node-d"),
    ] {
        t.normal.addr(node.addr, name);
    }
    let three = [("a", a.addr), ("b", b.addr), ("c", c.addr)];
    let bin = Bin::new();
    t.normal
        .names
        .insert(bin.path().display().to_string(), "<bin>".into());
    let mut proxy = Proxy::start_from(bin.path(), &config(&three, 64), &[]).await;
    t.normal.addr(proxy.addr("p"), "listen");
    t.normal.addr(proxy.admin(), "admin");
    for name in ["a", "b", "c"] {
        wait_state(&proxy, name, "healthy").await;
    }
    t.step(&proxy, "started").await;

    // Six clients, one at a time: two on each node.
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(echo_client(proxy.addr("p")).await);
    }
    wait_active(&proxy, 6).await;
    proxy
        .wait_count(|e| e["message"] == "connected", 6, T)
        .await;
    t.step(&proxy, "six clients").await;

    t.admin(&proxy, "POST", "/pools/p/backends/b/quarantine?for=1h")
        .await;
    wait_status(proxy.admin(), "b drained", T, |s| {
        (backend_state(s, "b").1 == 0).then_some(())
    })
    .await;
    let mut kept = Vec::new();
    for mut s in clients {
        if !closed(&mut s).await {
            kept.push(s);
        }
    }
    t.step(&proxy, "b quarantined and drained").await;

    t.admin(&proxy, "POST", "/pools/p/backends/b/release").await;
    wait_state(&proxy, "b", "healthy").await;
    t.step(&proxy, "b released").await;

    let four = [("a", a.addr), ("b", b.addr), ("c", c.addr), ("d", d.addr)];
    proxy.reload(&config(&four, 64)).await;
    wait_state(&proxy, "d", "healthy").await;
    t.step(&proxy, "reload 1: d added").await;

    let without_c = [("a", a.addr), ("b", b.addr), ("d", d.addr)];
    proxy.reload(&config(&without_c, 64)).await;
    wait_state(&proxy, "c", "gone").await;
    // c's two clients are drained.
    wait_active(&proxy, 2).await;
    let mut open = Vec::new();
    for mut s in kept {
        if !closed(&mut s).await {
            open.push(s);
        }
    }
    let mut kept = open;
    t.step(&proxy, "reload 2: c removed").await;

    proxy.reload(&config(&without_c, 32)).await;
    t.step(&proxy, "reload 3: max_connections 32").await;

    for _ in 0..2 {
        kept.push(echo_client(proxy.addr("p")).await);
    }
    wait_active(&proxy, kept.len() as u64).await;
    proxy
        .wait_count(|e| e["message"] == "connected", 8, T)
        .await;
    t.step(&proxy, "two more clients").await;

    let upgraded = upgrade_ok(&proxy).await;
    proxy
        .wait_event(|e| e["message"] == "ready" && e["generation"] == 1, T)
        .await;
    proxy.wait_event(|e| e["message"] == "adopted", T).await;
    // The old process's last words.
    proxy
        .wait_event(|e| e["message"] == "admin_stopped", T)
        .await;
    let _ = writeln!(t.out, "== upgraded: {}", t.normal.value("", &upgraded));
    t.step(&proxy, "upgraded").await;

    drop(kept);
    wait_active(&proxy, 0).await;
    proxy.signal("TERM");
    proxy.wait_exit(T).await.expect("exits");
    let events = proxy.all_events(T).await;
    let mut lines: Vec<String> = events[t.seen..]
        .iter()
        .filter(|e| scripted(e))
        .map(|e| t.normal.value("", e).to_string())
        .collect();
    lines.sort();
    let _ = writeln!(t.out, "== stopped: events");
    for l in lines {
        let _ = writeln!(t.out, "{l}");
    }
    std::fs::write(&path, &t.out).expect("write the transcript");
    println!("transcript: {} lines in {path}", t.out.lines().count());
}
