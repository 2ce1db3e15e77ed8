//! `state_file`: quarantine windows and strikes survive a cold restart of
//! the real binary (SIGTERM, start again on the same config); a corrupt
//! file is logged and ignored; the file follows the pools a reload adds.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::net::TcpStream;

use crate::support::admin_http::{admin_addr, backend, request, status};
use crate::support::nodes::{Node, refused_addr};
use crate::support::proxy::Proxy;
use crate::support::wait_until;

const T: Duration = Duration::from_secs(10);

/// Pool `p` over `backends` (`(name, addr)`), saving to `state`, with an
/// admin endpoint; `extra` is added to the pool (indented 4).
fn config(state: &Path, backends: &[(&str, SocketAddr)], extra: &str) -> String {
    let list: String = backends
        .iter()
        .map(|(n, a)| format!("      - {{ name: {n}, addr: \"{a}\" }}\n"))
        .collect();
    format!(
        "admin: {{ listen: 127.0.0.1:0 }}\nstate_file: \"{}\"\npools:\n  - name: p\n    \
         listen: 127.0.0.1:0\n{extra}    backends:\n{list}",
        state.display()
    )
}

/// SIGTERM, and wait for a clean exit.
async fn stop(mut proxy: Proxy) {
    proxy.signal("TERM");
    let status = proxy.wait_exit(T).await.expect("did not exit");
    assert!(status.success(), "exit status {status}");
}

fn until(b: &Value) -> SystemTime {
    let at = b["quarantine"]["until"].as_str().expect("a window");
    humantime::parse_rfc3339(at).expect("RFC 3339")
}

fn file_has(path: &Path, needle: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle))
}

/// Four clients of pool `p`, once each is `connected`: all to backend b.
async fn all_to_b(proxy: &Proxy) -> Vec<TcpStream> {
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(TcpStream::connect(proxy.addr("p")).await.unwrap());
    }
    let connected = proxy
        .wait_count(|e| e["message"] == "connected", 4, T)
        .await;
    assert!(
        connected.iter().all(|e| e["backend"] == "b"),
        "{connected:?}"
    );
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_window_survives_a_cold_restart() {
    let nodes = [Node::echo().await, Node::echo().await];
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let yaml = config(&state, &[("a", nodes[0].addr), ("b", nodes[1].addr)], "");

    let proxy = Proxy::start(&yaml).await;
    let first = proxy
        .wait_event(|e| e["message"] == "state_ignored", T)
        .await;
    assert_eq!(
        (&first["level"], &first["reason"]),
        (&"INFO".into(), &"missing".into())
    );
    let admin = admin_addr(&proxy);
    let answer = request(admin, "POST", "/pools/p/backends/a/quarantine?for=10m").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let before = until(backend(&status(admin).await, "p", "a"));
    // Written on the change, not only at shutdown.
    wait_until("the window in the state file", T, || {
        file_has(&state, "\"manual\"")
    })
    .await;
    stop(proxy).await;

    let proxy = Proxy::start(&yaml).await;
    let restored = proxy
        .wait_event(|e| e["message"] == "state_restored", T)
        .await;
    assert_eq!(restored["backends"], 2, "{restored}");
    // The first clients, right after start-up, all go to b.
    let _clients = all_to_b(&proxy).await;
    let s = status(admin_addr(&proxy)).await;
    let a = backend(&s, "p", "a");
    assert_eq!(
        (&a["state"], &a["quarantine"]["reason"]),
        (&"quarantined".into(), &"manual".into())
    );
    let after = until(a);
    let gap = after
        .duration_since(before)
        .or_else(|_| before.duration_since(after))
        .unwrap();
    assert!(gap <= Duration::from_secs(1), "until moved by {gap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_node_keeps_its_strikes_and_gets_the_doubled_window() {
    let good = Node::echo().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let extra = "    quarantine: { base: 1s, max: 1h }\n    \
                 health: { interval: 100ms, timeout: 500ms, fall: 1 }\n";
    let yaml = config(&state, &[("a", refused_addr()), ("b", good.addr)], extra);
    let out = |strikes: u64| {
        move |e: &Value| {
            e["message"] == "quarantined" && e["backend"] == "a" && e["strikes"] == strikes
        }
    };

    let proxy = Proxy::start(&yaml).await;
    // Down, a 1 s window; down again once it is over: strikes 2, 2 s.
    let second = proxy.wait_event(out(2), T).await;
    assert_eq!(second["window_ms"], 2000, "{second}");
    stop(proxy).await;

    let proxy = Proxy::start(&yaml).await;
    let s = status(admin_addr(&proxy)).await;
    let strikes = backend(&s, "p", "a")["strikes"].as_u64().unwrap();
    assert!(strikes >= 2, "strikes {strikes} after the restart");
    // Without the file it would start over at strikes 1, 1 s.
    let first = proxy
        .wait_event(|e| e["message"] == "quarantined" && e["backend"] == "a", T)
        .await;
    assert_eq!(
        (&first["strikes"], &first["window_ms"]),
        (&3.into(), &4000.into()),
        "{first}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_state_file_is_logged_and_ignored() {
    let nodes = [Node::echo().await, Node::echo().await];
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    std::fs::write(&state, "{\"version\": 1, \"pools\": [garbage").unwrap();
    let yaml = config(&state, &[("a", nodes[0].addr), ("b", nodes[1].addr)], "");

    let proxy = Proxy::start(&yaml).await;
    let ignored = proxy
        .wait_event(|e| e["message"] == "state_ignored", T)
        .await;
    assert_eq!(ignored["level"], "WARN", "{ignored}");
    assert_eq!(ignored["path"], state.display().to_string());
    assert_eq!(ignored["reason"], "corrupt");
    assert!(
        ignored["err"].as_str().unwrap().starts_with("corrupt:"),
        "{ignored}"
    );
    let s = status(admin_addr(&proxy)).await;
    for name in ["a", "b"] {
        let b = backend(&s, "p", name);
        assert!(b["quarantine"].is_null() && b["strikes"] == 0, "{b}");
    }
    // The file is written anew, valid, at shutdown at the latest.
    stop(proxy).await;
    let text = std::fs::read_to_string(&state).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["version"], 1, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_follows_the_pools_a_reload_adds() {
    let nodes = [Node::echo().await, Node::echo().await];
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let yaml = config(&state, &[("a", nodes[0].addr)], "");
    let proxy = Proxy::start(&yaml).await;
    let more = format!(
        "{yaml}  - name: q\n    listen: 127.0.0.1:0\n    backends:\n      \
         - {{ name: qb, addr: \"{}\" }}\n",
        nodes[1].addr
    );
    let outcome = proxy.reload(&more).await;
    assert_eq!(outcome["message"], "reloaded", "{outcome}");
    let answer = request(
        admin_addr(&proxy),
        "POST",
        "/pools/q/backends/qb/quarantine?for=10m",
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    wait_until("pool q in the state file", T, || {
        std::fs::read_to_string(&state)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|j| {
                j["pools"].as_array().is_some_and(|ps| {
                    ps.iter().any(|p| {
                        p["name"] == "q" && p["backends"][0]["quarantine"]["reason"] == "manual"
                    })
                })
            })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_that_cannot_be_written_is_warned_about_once_and_stops_nothing() {
    let nodes = [Node::echo().await, Node::echo().await];
    let dir = tempfile::tempdir().unwrap();
    // A plain file where its directory should be: every write fails.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let state = blocker.join("state.json");
    let yaml = config(&state, &[("a", nodes[0].addr), ("b", nodes[1].addr)], "");
    let proxy = Proxy::start(&yaml).await;
    let admin = admin_addr(&proxy);
    let answer = request(admin, "POST", "/pools/p/backends/a/quarantine?for=10m").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let failed = proxy
        .wait_event(|e| e["message"] == "state_write_failed", T)
        .await;
    assert_eq!(failed["level"], "WARN", "{failed}");
    assert_eq!(failed["path"], state.display().to_string());
    assert!(
        failed["err"].as_str().unwrap().contains("not-a-dir"),
        "{failed}"
    );
    // Still serving.
    let _client = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let connected = proxy.wait_event(|e| e["message"] == "connected", T).await;
    assert_eq!(connected["backend"], "b");
    let mut proxy = proxy;
    proxy.signal("TERM");
    let status = proxy.wait_exit(T).await.expect("did not exit");
    assert!(status.success(), "exit status {status}");
    let log = proxy.all_events(T).await;
    let failed: Vec<&Value> = log
        .iter()
        .filter(|e| e["message"] == "state_write_failed")
        .collect();
    // The shutdown write failed too: the same episode, not logged again.
    assert_eq!(failed.len(), 1, "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_in_a_directory_not_made_yet_is_kept() {
    let nodes = [Node::echo().await, Node::echo().await];
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("lib/pin-proxy/state.json");
    let yaml = config(&state, &[("a", nodes[0].addr), ("b", nodes[1].addr)], "");
    let proxy = Proxy::start(&yaml).await;
    let made = proxy
        .wait_event(|e| e["message"] == "state_dir_created", T)
        .await;
    assert_eq!(
        made["path"],
        dir.path().join("lib/pin-proxy").display().to_string()
    );
    let answer = request(
        admin_addr(&proxy),
        "POST",
        "/pools/p/backends/a/quarantine?for=10m",
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    wait_until("the window in the state file", T, || {
        file_has(&state, "\"manual\"")
    })
    .await;
    assert!(proxy.named("state_write_failed").is_empty());
}

/// A window that ended while the proxy was down still gates the node's
/// return: it needs its `rise` passed probes, as it would had the proxy
/// run on, and gets no client on the clock alone. Here `rise: 2` with the
/// probes an hour apart: the probe at start-up passes once, and every
/// client goes to the other node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_that_ended_while_down_still_waits_for_its_probes() {
    let nodes = [Node::echo().await, Node::echo().await];
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let ended = humantime::format_rfc3339_millis(SystemTime::now() - Duration::from_secs(3600));
    let file = format!(
        "{{\"version\":1,\"written_at\":\"{ended}\",\"pools\":[{{\"name\":\"p\",\
         \"backends\":[{{\"name\":\"a\",\"addr\":\"{}\",\"strikes\":2,\
         \"quarantine\":{{\"until\":\"{ended}\",\"reason\":\"down\"}}}}]}}]}}",
        nodes[0].addr
    );
    std::fs::write(&state, file).unwrap();
    let extra = "    health: { probe: connect, interval: 1h, rise: 2 }\n";
    let yaml = config(&state, &[("a", nodes[0].addr), ("b", nodes[1].addr)], extra);
    let proxy = Proxy::start(&yaml).await;
    let admin = admin_addr(&proxy);
    wait_until("a's first probe counted", T, || {
        proxy
            .events()
            .iter()
            .any(|e| e["message"] == "probe" && e["backend"] == "a" && e["outcome"] == "healthy")
    })
    .await;
    let s = status(admin).await;
    let a = backend(&s, "p", "a");
    assert_eq!(
        (&a["state"], &a["quarantine"]["reason"], &a["good_probes"]),
        (&"down".into(), &"down".into(), &1.into()),
        "{a}"
    );
    assert!(until(a) < SystemTime::now(), "the window is over: {a}");
    let _clients = all_to_b(&proxy).await;
    assert!(proxy.named("released").is_empty());
}

/// A file written under a clock a century ahead: its windows count from
/// now as they stood then, an automatic one no longer than
/// `quarantine.max`, and it is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_from_the_future_keeps_no_node_out_beyond_its_caps() {
    let nodes = [Node::echo().await, Node::echo().await];
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let record = |name: &str, addr: SocketAddr, until: &str, reason: &str| {
        format!(
            "{{\"name\":\"{name}\",\"addr\":\"{addr}\",\"strikes\":1,\
             \"quarantine\":{{\"until\":\"{until}\",\"reason\":\"{reason}\"}}}}"
        )
    };
    let file = format!(
        "{{\"version\":1,\"written_at\":\"2126-01-01T00:00:00.000Z\",\"pools\":[{{\"name\":\"p\",\
         \"backends\":[{},{}]}}]}}",
        record("a", nodes[0].addr, "2126-06-01T00:00:00.000Z", "down"),
        record("b", nodes[1].addr, "2126-01-01T00:10:00.000Z", "manual"),
    );
    std::fs::write(&state, file).unwrap();
    let extra = "    quarantine: { base: 1m, max: 5m }\n";
    let yaml = config(&state, &[("a", nodes[0].addr), ("b", nodes[1].addr)], extra);
    let started = SystemTime::now();
    let proxy = Proxy::start(&yaml).await;
    let future = proxy
        .wait_event(|e| e["message"] == "state_from_future", T)
        .await;
    assert_eq!(
        (&future["level"], &future["windows"]),
        (&"WARN".into(), &2.into()),
        "{future}"
    );
    assert_eq!(future["written_at"], "2126-01-01T00:00:00.000Z");
    let capped = proxy
        .wait_event(|e| e["message"] == "window_capped", T)
        .await;
    assert_eq!(
        (&capped["backend"], &capped["window_s"]),
        (&"a".into(), &300.into()),
        "{capped}"
    );
    let s = status(admin_addr(&proxy)).await;
    let left = |name: &str| {
        until(backend(&s, "p", name))
            .duration_since(started)
            .unwrap_or_default()
    };
    let (a, b) = (left("a"), left("b"));
    assert!(a <= Duration::from_secs(305), "a out for {a:?}");
    assert!(
        b >= Duration::from_secs(590) && b <= Duration::from_secs(610),
        "b out for {b:?}"
    );
}
