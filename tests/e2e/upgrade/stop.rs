//! A live upgrade under a supervisor that follows one pid: a stop sent to
//! the old process while the upgrade runs stops the new one too (passed on
//! once it serves), the pid file names whichever process serves, and an
//! instance running as PID 1 (a container's init) refuses to upgrade.

use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::faults_support::Wrapped;
use crate::support::nodes::Node;
use crate::support::proxy::{Proxy, binary};
use crate::support::upgrade::{Bin, T, config, exited, upgrade_ok, wait_exited};
use crate::support::{wait_until, within};

/// The pid in the pid file, if it holds one.
fn pid_in(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_an_upgrade_stops_the_new_process_once_it_serves() {
    let node = Node::echo().await;
    let bin = Bin::new();
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let pid_file = dir.path().join("pin-proxy.pid");
    let extra = format!("pid_file: \"{}\"\n", pid_file.display());
    let proxy = Proxy::start_from(bin.path(), &config(&[node.addr], &extra), &[]).await;
    let old = proxy.pid();
    assert_eq!(pid_in(&pid_file), Some(old));
    let addr = proxy.addr("p");
    let _client = TcpStream::connect(addr).await.unwrap();
    // The next "build" starts only once the gate exists: the stop below
    // lands while the upgrade runs, whatever the machine's speed.
    bin.install_script(&format!(
        "#!/bin/sh\nwhile [ ! -e '{}' ]; do sleep 0.01; done\nexec '{}' \"$@\"\n",
        gate.display(),
        binary()
    ));
    proxy.signal("USR2");
    proxy
        .wait_event(|e| e["message"] == "upgrade_started", T)
        .await;
    proxy.signal("TERM");
    std::fs::write(&gate, "").unwrap();

    let done = proxy.wait_event(|e| e["message"] == "upgraded", T).await;
    let next = done["pid"].as_u64().unwrap() as u32;
    assert_ne!(next, old);
    proxy
        .wait_event(|e| e["message"] == "stop_passed_on" && e["pid"] == next, T)
        .await;
    wait_exited(old).await;
    wait_exited(next).await;
    let events = proxy.all_events(T).await;
    let shutdown = events.iter().filter(|e| e["message"] == "shutdown").count();
    assert_eq!(shutdown, 1, "the new process shut down cleanly once");
    let refused = within("connect after the stop", T, TcpStream::connect(addr)).await;
    assert!(refused.is_err(), "nothing listens once stopped");
    assert_eq!(pid_in(&pid_file), None, "removed by the process it named");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pid_file_follows_the_serving_process_across_upgrades() {
    let node = Node::echo().await;
    let bin = Bin::new();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pin-proxy.pid");
    let extra = format!("pid_file: \"{}\"\n", pid_file.display());
    let proxy = Proxy::start_from(bin.path(), &config(&[node.addr], &extra), &[]).await;
    assert_eq!(pid_in(&pid_file), Some(proxy.pid()));
    for generation in 1..=2 {
        let done = upgrade_ok(&proxy).await;
        assert_eq!(done["generation"], generation);
        let next = done["pid"].as_u64().unwrap() as u32;
        wait_until("the pid file to name the new process", T, || {
            pid_in(&pid_file) == Some(next)
        })
        .await;
    }
    // Only the pid file: no temp file left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["pin-proxy.pid"]);
    let last = proxy.live_pid();
    proxy.signal("TERM");
    wait_exited(last).await;
    assert!(!pid_file.exists(), "a clean stop removes it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pid_1_refuses_a_live_upgrade_and_says_why() {
    let node = Node::echo().await;
    // A new PID namespace: pin-proxy is its PID 1, as in a container.
    let prefix = ["unshare", "--pid", "--fork", "--kill-child", "--"];
    let Some(proxy) = Wrapped::start(&prefix, binary(), &config(&[node.addr], "")).await else {
        if std::env::var_os("PIN_PROXY_REQUIRE_PEERS").is_some() {
            panic!("cannot run the proxy in a PID namespace (unshare --pid --fork)");
        }
        eprintln!("skipping: cannot run the proxy in a PID namespace (unshare --pid --fork)");
        return;
    };
    let admin = proxy.named("admin_listening")[0]["listen"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = tokio::process::Command::new(binary())
        .args(["upgrade", "--admin", &admin])
        .env_remove("PIN_PROXY_CONFIG")
        .output();
    let out = within("pin-proxy upgrade", T, out).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("running as PID 1"), "{err}");
    assert!(err.contains("restart the container"), "{err}");
    wait_until("upgrade_failed", T, || {
        !proxy.named("upgrade_failed").is_empty()
    })
    .await;
    let failed = proxy.named("upgrade_failed");
    assert!(
        failed[0]["reason"].as_str().unwrap().contains("PID 1"),
        "{failed:?}"
    );
    // Nothing changed: it still serves.
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    c.write_all(b"still").await.unwrap();
    let mut b = [0u8; 5];
    within("echo", T, c.read_exact(&mut b)).await.unwrap();
    assert!(!exited(proxy.pid()));
}
