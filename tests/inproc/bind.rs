//! Pool listeners are a group of `SO_REUSEPORT` sockets (one per data
//! worker); a second instance on the same address must still fail to start
//! rather than join the group and take half the clients.

use crate::support::inproc::Running;

fn yaml(listen: &str) -> String {
    format!(
        "pools:\n  - name: p\n    listen: {listen}\n    health: {{ interval: 1h }}\n    backends: [\"127.0.0.1:9\"]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_on_a_taken_address_fails_to_bind() {
    let first = Running::start(&yaml("127.0.0.1:0"));
    let taken = first.addr();
    let err = match Running::try_start(&yaml(&taken.to_string())) {
        Ok(_) => panic!("a second server bound {taken}, which the first one holds"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains(&format!("bind {taken}")), "{err}");
    assert!(err.contains("in use"), "{err}");
    // Once the first one is gone, the address is free again.
    first.stop().await;
    Running::start(&yaml(&taken.to_string())).stop().await;
}

/// A taken listen address is not something a restart fixes: the binary
/// exits with its own status (3), which the unit does not restart.
#[test]
fn the_binary_exits_3_when_a_listen_address_is_taken() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let yaml = format!(
        "pools:\n  - name: p\n    listen: {addr}\n    health: {{ interval: 1h }}\n    backends: [\"127.0.0.1:9\"]\n"
    );
    std::fs::write(&path, yaml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pin-proxy"))
        .args(["run", "-c"])
        .arg(&path)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("pool p: bind {addr}")), "{stderr}");
    drop(taken);
}
