//! `pin-proxy status|quarantine|release` against a live instance.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::http::{backend, request, status};
use super::{T, two_echo};
use crate::support::proxy::binary;
use crate::support::within;

/// Run `pin-proxy args...`; (exit code, stdout, stderr).
async fn cli(args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(binary())
        .args(args)
        .env_remove("PIN_PROXY_CONFIG")
        .env_remove("RUST_LOG")
        .output();
    let out = within("pin-proxy command", T, out).await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_command_prints_a_table_and_the_contract_json() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let answer = request(admin, "POST", "/pools/p/backends/b/quarantine?for=5m").await;
    assert_eq!(answer.status, 200);
    let addr = admin.to_string();
    let (code, out, err) = cli(&["status", "--admin", &addr]).await;
    assert_eq!(code, Some(0), "{err}");
    let row = |name: &str| -> Vec<String> {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name));
        let line = line.unwrap_or_else(|| panic!("no row for {name} in:\n{out}"));
        line.split_whitespace().map(str::to_owned).collect()
    };
    assert_eq!(row("a")[1], "healthy", "{out}");
    assert_eq!(row("b")[1], "quarantined", "{out}");
    assert!(row("b").join(" ").contains("manual until"), "{out}");
    assert!(out.contains("pool p"), "{out}");

    let (code, out, err) = cli(&["status", "--json", "--admin", &format!("http://{addr}")]).await;
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(
        keys(&v),
        ["generation", "pid", "pools", "uptime_s", "version"]
    );
    let pool = &v["pools"][0];
    assert_eq!(
        keys(pool),
        ["backends", "connections", "fall", "listen", "name", "rise"]
    );
    let b = backend(&v, "p", "b");
    assert_eq!(
        keys(b),
        [
            "addr",
            "backup",
            "bad_probes",
            "bytes_down",
            "bytes_up",
            "connections",
            "discovered_from",
            "good_probes",
            "height",
            "last_probe",
            "name",
            "quarantine",
            "state",
            "strikes"
        ]
    );
    assert_eq!(keys(&b["quarantine"]), ["reason", "until"]);
    assert_eq!(keys(&b["last_probe"]), ["at", "detail", "outcome"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_and_release_commands_change_the_state() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let addr = admin.to_string();
    let (code, out, err) = cli(&["quarantine", "p", "a", "--for", "1m", "--admin", &addr]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let a = backend(&status(admin).await, "p", "a").clone();
    assert_eq!(
        (a["state"].as_str(), a["quarantine"]["reason"].as_str()),
        (Some("quarantined"), Some("manual"))
    );

    let (code, out, err) = cli(&["release", "p", "a", "--admin", &addr]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let until = backend(&status(admin).await, "p", "a")["quarantine"]["until"].clone();
    let until = humantime::parse_rfc3339(until.as_str().unwrap_or("")).unwrap();
    assert!(
        until <= SystemTime::now() + Duration::from_secs(1),
        "window ended"
    );

    let (code, _, err) = cli(&["release", "p", "nope", "--admin", &addr]).await;
    assert_eq!(code, Some(1));
    assert_eq!(err.trim(), "error: pool p has no backend nope");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_against_an_unreachable_instance_exit_1_with_one_line() {
    for args in [
        &["status", "--admin", "127.0.0.1:1"][..],
        &["status", "--json", "--admin", "http://127.0.0.1:1"],
        &[
            "quarantine",
            "p",
            "a",
            "--for",
            "1m",
            "--admin",
            "127.0.0.1:1",
        ],
        &["release", "p", "a", "--admin", "127.0.0.1:1"],
    ] {
        let (code, out, err) = cli(args).await;
        assert_eq!(code, Some(1), "{args:?}");
        assert_eq!(out, "", "{args:?}");
        assert_eq!(
            err, "error: cannot reach pin-proxy admin at 127.0.0.1:1: connection refused\n",
            "{args:?}"
        );
    }
}
