//! The admin endpoint and the commands that use it, against the real binary:
//! `/status` and `/metrics` with real traffic, maintenance and reload here;
//! error answers in `admin/errors.rs`; connection bounds under hostile load
//! in `admin/bounds.rs`; `pin-proxy
//! status|quarantine|release` in `admin/cli.rs`; what `/connections` costs
//! at 9,000 connections (ignored, prints figures) in
//! `admin/connections_cost.rs`; the status page's headers
//! and the refusal of cross-site commands in `admin/page.rs`, the page in a
//! real browser in `admin/browser.rs`, the `Host` rule against DNS
//! rebinding in `admin/hosts.rs`. Their harness: `support::admin_http`
//! (the HTTP client), `support::admin_pool` (the instance they start
//! from), `support::admin_wait` and `support::status_page`.

#[path = "admin/bounds.rs"]
mod bounds;
#[path = "admin/browser.rs"]
mod browser;
#[path = "admin/cli.rs"]
mod cli;
#[path = "admin/connections_cost.rs"]
mod connections_cost;
#[path = "admin/errors.rs"]
mod errors;
#[path = "admin/hosts.rs"]
mod hosts;
#[path = "admin/page.rs"]
mod page;

use std::time::SystemTime;

use crate::support::admin_http::{Kind, backend, metrics, request, status};
use crate::support::admin_pool::{T, config, two_echo};
use crate::support::admin_wait::wait_status;
use crate::support::{hash_to_eof, pattern, send_all, within};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_list_every_backend_at_zero_from_start_up() {
    let (_proxy, admin, _nodes) = two_echo(true).await;
    let m = metrics(admin).await;
    for b in ["a", "b"] {
        let l = [("pool", "p"), ("backend", b)];
        for name in [
            "pin_proxy_connections_total",
            "pin_proxy_connect_failures_total",
        ] {
            assert_eq!(m.value(name, Kind::Counter, &l), 0.0, "{name} {b}");
        }
        assert_eq!(
            m.value("pin_proxy_active_connections", Kind::Gauge, &l),
            0.0
        );
        assert_eq!(m.value("pin_proxy_backend_usable", Kind::Gauge, &l), 1.0);
        // A connect probe reads no height: the gauge is absent, not 0.
        assert_eq!(m.get("pin_proxy_backend_height", Kind::Gauge, &l), None);
        for d in ["up", "down"] {
            let l = [("pool", "p"), ("backend", b), ("direction", d)];
            assert_eq!(m.value("pin_proxy_bytes_total", Kind::Counter, &l), 0.0);
        }
        for o in ["healthy", "unknown", "unhealthy", "lagging", "down"] {
            let l = [("pool", "p"), ("backend", b), ("outcome", o)];
            let want = if o == "healthy" { 1.0 } else { 0.0 };
            assert_eq!(
                m.value("pin_proxy_probes_total", Kind::Counter, &l),
                want,
                "{o}"
            );
        }
        for r in ["connect_failures", "down", "unhealthy", "lagging", "manual"] {
            let l = [("pool", "p"), ("backend", b), ("reason", r)];
            assert_eq!(
                m.value("pin_proxy_quarantines_total", Kind::Counter, &l),
                0.0
            );
        }
    }
    let l = [("pool", "p")];
    assert_eq!(
        m.value("pin_proxy_rebalance_moves_total", Kind::Counter, &l),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_count_live_and_closed_connections_and_bytes() {
    let (proxy, admin, _nodes) = two_echo(true).await;
    // One connection stays open after 100 kB each way...
    let (n, m) = (100_000usize, 12_345usize);
    let mut live = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let data = pattern(1, n);
    let mut back = vec![0u8; n];
    let (mut r, mut w) = live.split();
    let (sent, got) = within("live echo", T, async {
        tokio::join!(w.write_all(&data), r.read_exact(&mut back))
    })
    .await;
    sent.unwrap();
    got.unwrap();
    assert_eq!(back, data);
    // ...and one closes after 12 kB each way.
    let mut done = TcpStream::connect(proxy.addr("p")).await.unwrap();
    send_all(&mut done, &pattern(2, m)).await.unwrap();
    let (_, echoed) = within("closed echo", T, hash_to_eof(&mut done))
        .await
        .unwrap();
    assert_eq!(echoed, m as u64);
    drop(done);

    let total = (n + m) as u64;
    let s = wait_status(admin, "bytes and one live connection", T, |s| {
        let a = backend(s, "p", "a");
        (a["bytes_up"] == total && a["bytes_down"] == total && a["connections"] == 1)
            .then(|| s.clone())
    })
    .await;
    assert_eq!(s["pools"][0]["connections"], 1);
    let a = backend(&s, "p", "a");
    assert_eq!(a["state"], "healthy");
    assert_eq!(a["quarantine"], Value::Null);
    assert_eq!(a["last_probe"]["outcome"], "healthy");
    // A `connect` probe reads no node facts: the key is there, `null`.
    assert_eq!(a.get("node"), Some(&Value::Null), "{a}");
    let b = backend(&s, "p", "b");
    assert_eq!(
        (b["state"].as_str(), b["backup"].as_bool()),
        (Some("healthy"), Some(true))
    );
    assert_eq!(
        (b["connections"].as_u64(), b["bytes_up"].as_u64()),
        (Some(0), Some(0))
    );

    let mx = metrics(admin).await;
    let (la, lb) = (
        [("pool", "p"), ("backend", "a")],
        [("pool", "p"), ("backend", "b")],
    );
    assert_eq!(
        mx.value("pin_proxy_connections_total", Kind::Counter, &la),
        2.0
    );
    assert_eq!(
        mx.value("pin_proxy_active_connections", Kind::Gauge, &la),
        1.0
    );
    assert_eq!(
        mx.value("pin_proxy_connect_failures_total", Kind::Counter, &la),
        0.0
    );
    for d in ["up", "down"] {
        let l = [("pool", "p"), ("backend", "a"), ("direction", d)];
        assert_eq!(
            mx.value("pin_proxy_bytes_total", Kind::Counter, &l),
            total as f64,
            "{d}"
        );
        let l = [("pool", "p"), ("backend", "b"), ("direction", d)];
        assert_eq!(
            mx.value("pin_proxy_bytes_total", Kind::Counter, &l),
            0.0,
            "{d}"
        );
    }
    assert_eq!(
        mx.value("pin_proxy_connections_total", Kind::Counter, &lb),
        0.0
    );
    assert_eq!(mx.value("pin_proxy_backend_usable", Kind::Gauge, &la), 1.0);
    drop(live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_ok() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let answer = request(admin, "GET", "/healthz").await;
    assert_eq!((answer.status, answer.body.trim()), (200, "ok"));
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_then_release_over_http() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let before = SystemTime::now();
    let answer = request(admin, "POST", "/pools/p/backends/a/quarantine?for=10m").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let body = answer.json();
    assert_eq!(body["pool"], "p");
    assert_eq!(body["backend"]["name"], "a");
    assert_eq!(body["backend"]["state"], "quarantined");
    assert_eq!(body["backend"]["quarantine"]["reason"], "manual");

    let s = status(admin).await;
    let a = backend(&s, "p", "a");
    assert_eq!(a["state"], "quarantined");
    assert_eq!(a["quarantine"]["reason"], "manual");
    let until = humantime::parse_rfc3339(a["quarantine"]["until"].as_str().unwrap()).unwrap();
    let window = until.duration_since(before).unwrap();
    assert!(
        window.as_secs().abs_diff(600) <= 2,
        "until {until:?} is not 10m away"
    );
    let m = metrics(admin).await;
    let l = [("pool", "p"), ("backend", "a"), ("reason", "manual")];
    assert_eq!(
        m.value("pin_proxy_quarantines_total", Kind::Counter, &l),
        1.0
    );
    let l = [("pool", "p"), ("backend", "a")];
    assert_eq!(m.value("pin_proxy_backend_usable", Kind::Gauge, &l), 0.0);

    let answer = request(admin, "POST", "/pools/p/backends/a/release").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["released"], true);

    // Releasing a backend that is not quarantined: 200, nothing changes.
    let b_before = backend(&status(admin).await, "p", "b").clone();
    let answer = request(admin, "POST", "/pools/p/backends/b/release").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["released"], false);
    let b_after = backend(&status(admin).await, "p", "b").clone();
    for key in ["state", "quarantine", "strikes", "connections"] {
        assert_eq!(b_before[key], b_after[key], "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_with_an_invalid_file_is_422_and_keeps_the_old_config() {
    let (proxy, admin, nodes) = two_echo(false).await;
    std::fs::write(proxy.config_path(), "pools: [ { name: BAD } ]\n").unwrap();
    let answer = request(admin, "POST", "/reload").await;
    assert_eq!(answer.status, 422, "{}", answer.body);
    assert!(!answer.error().is_empty());
    proxy
        .wait_event(|e| e["message"] == "reload_failed", T)
        .await;
    let s = status(admin).await;
    assert_eq!(s["pools"][0]["backends"].as_array().map(Vec::len), Some(2));

    // A valid file is applied: 200.
    let yaml = config(&[("a", nodes[0].addr, false)], "");
    std::fs::write(
        proxy.config_path(),
        format!("log: {{ level: debug, format: json }}\n{yaml}"),
    )
    .unwrap();
    let answer = request(admin, "POST", "/reload").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let s = status(admin).await;
    assert_eq!(s["pools"][0]["backends"].as_array().map(Vec::len), Some(1));
}
