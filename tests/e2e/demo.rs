//! `pin-proxy demo` plays its whole story by itself: it exits 0 within the
//! contract's 90 seconds, its log shows every kind of event the story is
//! about (failover, probes, quarantine, drain, release, rebalance), and it
//! ends with a summary where the clients are spread evenly again.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Kill the demo if it runs longer than this.
const BUDGET: Duration = Duration::from_secs(120);
/// What the contract promises.
const PROMISED: Duration = Duration::from_secs(90);

/// Read a child's pipe to the end on a thread.
fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        // A read error ends the capture; whatever arrived is still checked.
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Run the demo to its end (or kill it at [`BUDGET`]).
fn run_demo() -> (ExitStatus, Duration, String, String) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pin-proxy"))
        .arg("demo")
        .env_remove("RUST_LOG")
        .env_remove("PIN_PROXY_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pin-proxy demo");
    let stdout = drain(child.stdout.take().expect("stdout"));
    let stderr = drain(child.stderr.take().expect("stderr"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the demo") {
            break status;
        }
        if started.elapsed() > BUDGET {
            child.kill().expect("kill the demo");
            child.wait().expect("reap the demo");
            let (out, err) = (stdout.join().unwrap(), stderr.join().unwrap());
            panic!("demo still running after {BUDGET:?}\n--- stdout\n{out}\n--- stderr\n{err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let elapsed = started.elapsed();
    (
        status,
        elapsed,
        stdout.join().unwrap(),
        stderr.join().unwrap(),
    )
}

/// Log lines (text format: timestamp, level, message, fields) whose
/// message is `event`.
fn events<'a>(log: &'a str, event: &str) -> Vec<&'a str> {
    log.lines()
        .filter(|line| {
            let mut words = line.split_whitespace();
            let level = words.nth(1);
            let message = words.next();
            matches!(level, Some("TRACE" | "DEBUG" | "INFO" | "WARN" | "ERROR"))
                && message == Some(event)
        })
        .collect()
}

/// Some `event` line contains every one of `parts`.
fn has(log: &str, event: &str, parts: &[&str]) -> bool {
    events(log, event)
        .iter()
        .any(|line| parts.iter().all(|p| line.contains(p)))
}

#[test]
fn demo_plays_failover_quarantine_drain_and_rebalance() {
    let (status, elapsed, out, err) = run_demo();
    let context = format!("--- stdout\n{out}\n--- stderr\n{err}");
    assert!(status.success(), "demo exited with {status}\n{context}");
    assert!(
        elapsed < PROMISED,
        "demo took {elapsed:?}, the contract says {PROMISED:?}\n{context}"
    );

    // Each kind of event, from the proxy itself.
    for event in [
        "listening",
        "closed",
        "probe",
        "quarantined",
        "drained",
        "released",
        "rebalanced",
    ] {
        assert!(
            !events(&out, event).is_empty(),
            "no {event} event\n{context}"
        );
    }
    // Clients reached nodes through the proxy (`accepted`/`connected` are
    // debug level; the demo's clients log their completed handshakes).
    assert!(
        events(&out, "demo_handshake").len() >= 6,
        "fewer than 6 handshakes through the proxy\n{context}"
    );

    // The story, step by step.
    let story: [(&str, &[&str]); 10] = [
        ("closed", &["backend=node-b", "backend_closed"]),
        ("probe", &["backend=node-b", "down"]),
        ("quarantined", &["backend=node-b", "down", "strikes=1"]),
        ("quarantined", &["backend=node-b", "down", "strikes=2"]),
        ("released", &["backend=node-b"]),
        ("rebalanced", &["to=node-b"]),
        ("quarantined", &["backend=node-c", "lagging"]),
        ("drained", &["backend=node-c", "lagging"]),
        ("released", &["backend=node-c"]),
        ("rebalanced", &["to=node-c"]),
    ];
    for (event, parts) in story {
        assert!(
            has(&out, event, parts),
            "no {event} with {parts:?}\n{context}"
        );
    }
    assert!(events(&out, "demo_timeout").is_empty(), "{context}");

    // The summary: every client placed, two per node.
    let summary = out
        .split("== pin-proxy demo summary ==")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary\n{context}"));
    assert!(
        summary.contains("connections per node: node-a=2 node-b=2 node-c=2"),
        "{context}"
    );
    for client in ["c1", "c2", "c3", "c4", "c5", "c6"] {
        assert!(
            summary
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{client} ")) && l.contains("node-")),
            "summary does not place {client}\n{context}"
        );
    }
    // Each client's height follows its node's announcements, not the
    // height at its handshake (a block may land between the two reads).
    let column =
        |line: &str, i: usize| -> Option<u64> { line.split_whitespace().nth(i)?.parse().ok() };
    let node_height = |node: &str| {
        summary
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{node} ")) && l.contains("127.0.0.1"))
            .and_then(|l| column(l, 3))
    };
    let mut checked = 0;
    for line in summary.lines().filter(|l| l.trim_start().starts_with('c')) {
        let (Some(node), Some(height)) = (line.split_whitespace().nth(2), column(line, 5)) else {
            continue;
        };
        let tip = node_height(node).unwrap_or_else(|| panic!("no height for {node}\n{context}"));
        assert!(
            height + 1 >= tip && height <= tip,
            "client line {line:?}: height {height}, its node {node} at {tip}\n{context}"
        );
        checked += 1;
    }
    assert_eq!(checked, 6, "client heights read\n{context}");
    assert!(summary.contains(": ok"), "{context}");
}

/// The demo reads no config: its help offers no `-c`, and a `-c` given
/// before or after it is refused (exit 2) instead of being ignored.
#[test]
fn demo_takes_no_config_option() {
    let bin = env!("CARGO_BIN_EXE_pin-proxy");
    let help = Command::new(bin)
        .args(["demo", "--help"])
        .output()
        .expect("run demo --help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("Usage: pin-proxy demo"), "{help}");
    assert!(
        !help.contains("--config"),
        "demo --help offers --config:\n{help}"
    );
    for args in [["demo", "-c", "x.yaml"], ["-c", "x.yaml", "demo"]] {
        let out = Command::new(bin)
            .args(args)
            .env_remove("PIN_PROXY_CONFIG")
            .output()
            .expect("run demo -c");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}
