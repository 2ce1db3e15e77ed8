//! The Grafana dashboard (`deploy/grafana/pin-proxy.json`) and the
//! Prometheus alert rules (`deploy/prometheus/pin-proxy.rules.yml`): the
//! dashboard imports anywhere (a `${DS_PROMETHEUS}` input, a `$pool`
//! variable) and shows every metric; each alert has a summary and a
//! description; promtool accepts the rules, passes their unit tests and
//! parses every dashboard query; and every metric either names is served by
//! a live `/metrics` of the real binary.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pin_proxy::sim::simnode::SimNode;
use serde_json::Value;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::admin_http::{Kind, request};
use crate::support::admin_wait::wait_metrics;
use crate::support::litecoind::peers_available;
use crate::support::nodes::{Node, echo_client, refused_addr};
use crate::support::proxy::Proxy;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn path(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

fn dashboard() -> Value {
    let file = path("deploy/grafana/pin-proxy.json");
    let text = fs::read_to_string(&file).expect("read the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        all.push(p);
        if let Some(nested) = p["panels"].as_array() {
            all.extend(nested);
        }
    }
    all
}

/// The PromQL of every panel target.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    panels(dashboard)
        .iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
        .map(|t| {
            t["expr"]
                .as_str()
                .expect("a target without expr")
                .to_owned()
        })
        .collect()
}

/// (alert, expr, annotations) of every rule.
fn rules() -> Vec<(String, String, serde_yaml::Value)> {
    let text =
        fs::read_to_string(path("deploy/prometheus/pin-proxy.rules.yml")).expect("read the rules");
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("the rules are YAML");
    let mut found = Vec::new();
    for group in doc["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let field = |k: &str| rule[k].as_str().unwrap_or_default().to_owned();
            found.push((field("alert"), field("expr"), rule["annotations"].clone()));
        }
    }
    found
}

/// The `pin_proxy_*` names in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("pin_proxy_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The metrics README.md lists under "Metrics".
const METRICS: [&str; 18] = [
    "pin_proxy_active_connections",
    "pin_proxy_connections_total",
    "pin_proxy_connect_failures_total",
    "pin_proxy_bytes_total",
    "pin_proxy_backend_usable",
    "pin_proxy_backend_height",
    "pin_proxy_probes_total",
    "pin_proxy_rebalance_moves_total",
    "pin_proxy_quarantines_total",
    "pin_proxy_discovered_members",
    "pin_proxy_discovery_lookups_total",
    "pin_proxy_rejected_total",
    "pin_proxy_closed_total",
    "pin_proxy_pool_connections",
    "pin_proxy_pool_max_connections",
    "pin_proxy_build_info",
    "pin_proxy_connection_budget",
    "pin_proxy_connection_budget_used",
];

/// Metrics of the process, not of a pool: their queries have no `pool`
/// filter.
const PROCESS_METRICS: [&str; 3] = [
    "pin_proxy_build_info",
    "pin_proxy_connection_budget",
    "pin_proxy_connection_budget_used",
];

#[test]
fn dashboard_imports_anywhere_and_shows_every_metric() {
    let d = dashboard();
    let inputs = d["__inputs"].as_array().expect("__inputs");
    assert!(
        inputs
            .iter()
            .any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"),
        "{inputs:?}"
    );
    let ds = |v: &Value| v["uid"] == "${DS_PROMETHEUS}" && v["type"] == "prometheus";
    let vars = d["templating"]["list"].as_array().expect("templating");
    let pool = vars.iter().find(|v| v["name"] == "pool").expect("$pool");
    assert!(ds(&pool["datasource"]), "{pool}");
    assert!(
        pool["query"].to_string().contains("label_values("),
        "{pool}"
    );

    let mut shown = BTreeSet::new();
    for p in panels(&d).into_iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().expect("title");
        assert!(ds(&p["datasource"]), "{title}: {}", p["datasource"]);
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}");
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            assert!(ds(&t["datasource"]), "{title}");
            let names = metric_names(expr);
            let of_process = names.iter().all(|n| PROCESS_METRICS.contains(&n.as_str()));
            assert!(
                of_process || expr.contains("pool=~\"$pool\""),
                "{title}: {expr}"
            );
            shown.extend(names);
        }
    }
    for metric in METRICS {
        assert!(shown.contains(metric), "no panel shows {metric}");
    }
}

#[test]
fn every_alert_has_a_summary_and_a_description() {
    let rules = rules();
    let alerts: Vec<&str> = rules.iter().map(|(a, _, _)| a.as_str()).collect();
    for expected in [
        "PinProxyNoUsableNode",
        "PinProxyOneUsableNodeLeft",
        "PinProxyNodeLagging",
        "PinProxyQuarantineFlapping",
        "PinProxyConnectFailuresRising",
        "PinProxyDiscoveryLookupsFailing",
    ] {
        assert!(alerts.contains(&expected), "{expected} missing: {alerts:?}");
    }
    for (alert, expr, annotations) in &rules {
        assert!(!metric_names(expr).is_empty(), "{alert}: {expr}");
        for key in ["summary", "description"] {
            let value = annotations[key].as_str().unwrap_or_default();
            assert!(!value.trim().is_empty(), "{alert} has no {key}");
        }
    }
}

fn promtool(args: &[&str], dir: &Path) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `promtool check rules` and `test rules` on the shipped files, and
/// `check rules` on the dashboard's queries as recording rules (with
/// Grafana's variables given values), which parses each as PromQL.
#[test]
fn promtool_accepts_the_rules_and_the_dashboard_queries() {
    if !peers_available(&["promtool"]) {
        return;
    }
    let dir = path("deploy/prometheus");
    promtool(&["check", "rules", "pin-proxy.rules.yml"], &dir);
    promtool(&["test", "rules", "pin-proxy.rules.test.yml"], &dir);

    let queries = dashboard_queries(&dashboard());
    let mut yaml = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        let q = q.replace("$__rate_interval", "5m").replace("$pool", ".*");
        let quoted = serde_json::to_string(&q).expect("quote");
        yaml.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {quoted}\n"
        ));
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    fs::write(tmp.path().join("dashboard.rules.yml"), yaml).expect("write");
    promtool(&["check", "rules", "dashboard.rules.yml"], tmp.path());
}

/// Litecoin regtest message start, as `network: litecoin-regtest` sends it.
const REGTEST: [u8; 4] = [0xfa, 0xbf, 0xb5, 0xda];

/// A pool with a probed node (so heights exist) and a discover entry (so
/// the discovery metrics do) whose resolver never answers; every metric
/// name the dashboard and the rules use must be among the served ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_rules_use_is_served() {
    let node = SimNode::start("127.0.0.1:0".parse().unwrap(), REGTEST, 100)
        .await
        .unwrap();
    // Bound and never read: lookups sent there time out.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let yaml = format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         health: {{ probe: bitcoin-p2p, network: litecoin-regtest, interval: 100ms, timeout: 3s }}\n    \
         discovery: {{ interval: 1s, hold: 1m, resolver: \"{}\" }}\n    \
         backends:\n      - {{ name: sim, addr: \"{}\" }}\n      \
         - {{ name: dns, discover: \"nodes.test:9333\" }}\n",
        silent.local_addr().unwrap(),
        node.addr()
    );
    let proxy = Proxy::start(&yaml).await;
    proxy
        .wait_event(
            |e| e["message"] == "probe" && e["backend"] == "sim" && e["height"] == 100,
            Duration::from_secs(20),
        )
        .await;
    let body = request(proxy.admin(), "GET", "/metrics").await.body;
    let names: BTreeSet<String> = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    let mut used = BTreeSet::new();
    for q in dashboard_queries(&dashboard()) {
        used.extend(metric_names(&q));
    }
    for (_, expr, _) in rules() {
        used.extend(metric_names(&expr));
    }
    assert!(used.len() >= METRICS.len(), "{used:?}");
    let missing: Vec<&String> = used.difference(&names).collect();
    assert!(
        missing.is_empty(),
        "not served: {missing:?}; served: {names:?}"
    );
}

/// The value of the sample `series` (name and labels as served) in `body`.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Every refused client is counted by pool and reason, every closed
/// connection by pool, backend and reason (whether its line was logged or
/// folded), and the connection budget shows the clients holding a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_closes_and_the_budget_are_counted() {
    let node = Node::echo().await;
    let yaml = format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         max_connections: 1\n    backends:\n      - {{ name: e, addr: \"{}\" }}\n  \
         - name: shut\n    listen: 127.0.0.1:0\n    allow: [10.0.0.0/8]\n    \
         backends: [\"{}\"]\n",
        node.addr,
        refused_addr()
    );
    let proxy = Proxy::start(&yaml).await;
    let mut held = echo_client(proxy.addr("p")).await;
    held.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    held.read_exact(&mut back).await.unwrap();
    // The pool is full: refused, max_connections.
    let mut extra = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(extra.read(&mut buf).await.unwrap_or(0), 0);
    // Outside `allow`: refused, allow_list.
    let mut outside = TcpStream::connect(proxy.addr("shut")).await.unwrap();
    assert_eq!(outside.read(&mut buf).await.unwrap_or(0), 0);
    let body = request(proxy.admin(), "GET", "/metrics").await.body;
    let at = |series: &str| sample(&body, series);
    assert_eq!(
        at(r#"pin_proxy_rejected_total{pool="p",reason="max_connections"}"#),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        at(r#"pin_proxy_rejected_total{pool="shut",reason="allow_list"}"#),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        at(r#"pin_proxy_rejected_total{pool="p",reason="per_source"}"#),
        Some(0.0),
        "{body}"
    );
    assert_eq!(
        at(r#"pin_proxy_pool_connections{pool="p"}"#),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        at(r#"pin_proxy_pool_max_connections{pool="p"}"#),
        Some(1.0),
        "{body}"
    );
    assert!(
        at("pin_proxy_connection_budget").is_some_and(|b| b >= 1.0),
        "{body}"
    );
    // Each accept loop holds a slot while it waits for its next client.
    let used = at("pin_proxy_connection_budget_used").expect("budget used");
    assert!(used >= 1.0, "{body}");
    let build = format!(
        "pin_proxy_build_info{{version=\"{}\",generation=\"0\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(at(&build), Some(1.0), "{body}");

    // An accept loop takes its next slot just after it closed a refused
    // client, so a loaded machine may read before it has: the later of two
    // readings counts every loop.
    let body = request(proxy.admin(), "GET", "/metrics").await.body;
    let used = sample(&body, "pin_proxy_connection_budget_used").map_or(used, |u| u.max(used));

    drop(held);
    proxy
        .wait_event(
            |e| e["message"] == "closed" && e["pool"] == "p",
            Duration::from_secs(10),
        )
        .await;
    let body = request(proxy.admin(), "GET", "/metrics").await.body;
    let closed = r#"pin_proxy_closed_total{pool="p",backend="e",reason="client_closed"}"#;
    assert_eq!(sample(&body, closed), Some(1.0), "{body}");
    // Its slot is free: one fewer taken.
    wait_metrics(
        proxy.admin(),
        "the closed client's slot given back",
        Duration::from_secs(10),
        |m| {
            let now = m.get("pin_proxy_connection_budget_used", Kind::Gauge, &[])?;
            (now == used - 1.0).then_some(())
        },
    )
    .await;
}
