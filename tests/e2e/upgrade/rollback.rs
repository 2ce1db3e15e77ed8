//! An upgrade that fails after the connections went to the new process is
//! rolled back: the old process stops the new one and splices every
//! connection on where it stood. The new process may not move a byte on
//! them before the old one lets go, or a rollback would lose or repeat
//! what it moved. Here the new process hangs just before confirming them:
//! the service manager does not read its notify socket (the queue is
//! full), so its `MAINPID=` blocks.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::nodes::{Node, echo_client};
use crate::support::proxy::{Proxy, binary};
use crate::support::upgrade::{Bin, T, config, echoes, exited, upgrade_ok};
use crate::support::{wait_until, within};

/// One batch of the handover.
const CLIENTS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upgrade_takes_back_connections_the_new_process_never_touched() {
    let node = Node::echo().await;
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify");
    let manager = UnixDatagram::bind(&notify).unwrap();
    let bin = Bin::new();
    let yaml = config(&[node.addr], "upgrade_timeout: 3s\n");
    let env = [("NOTIFY_SOCKET", notify.to_str().unwrap())];
    let proxy = Proxy::start_from(bin.path(), &yaml, &env).await;
    let addr = proxy.addr("p");
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(echo_client(addr).await);
    }
    // The old process said READY=1 before `ready`; from now on a sender
    // to the manager blocks.
    let filler = UnixDatagram::unbound().unwrap();
    filler.connect(&notify).unwrap();
    filler.set_nonblocking(true).unwrap();
    let mut queued = 0;
    while filler.send(b"STATUS=filler\n").is_ok() {
        queued += 1;
        assert!(queued < 100_000, "the notify queue never filled");
    }

    let old = proxy.pid();
    let cli = tokio::process::Command::new(binary())
        .args(["upgrade", "--admin", &proxy.admin().to_string()])
        .env_remove("PIN_PROXY_CONFIG")
        .output();
    let cli = tokio::spawn(cli);
    let mut new = None;
    wait_until("the new process to start", T, || {
        new = child_of(old);
        new.is_some()
    })
    .await;
    let new = new.unwrap();
    // Should the test fail, the hung process must not outlive it.
    let stop = StopOnDrop(new);
    // Until its exec the child holds copies of all the old process's
    // descriptors: count its clients only once it runs the new binary.
    proxy.wait_event(|e| e["message"] == "inherited", T).await;
    wait_until("the new process to hold every client", T, || {
        established_on(new, addr.port()) == CLIENTS
    })
    .await;

    // Between the processes now: each client asks, and no answer may
    // come while the new process lives (only the old one may move bytes).
    for (i, c) in clients.iter_mut().enumerate() {
        c.write_all(format!("asked {i:03}").as_bytes())
            .await
            .unwrap();
    }
    // What each client heard early (the old process may answer between
    // a read and the look at the new process).
    let mut early: Vec<Vec<u8>> = vec![Vec::new(); CLIENTS];
    let give_up = tokio::time::Instant::now() + T;
    loop {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the new process was never stopped"
        );
        for (c, heard) in clients.iter().zip(&mut early) {
            let mut b = [0u8; 64];
            // Read before asking whether it lives: the old process reaps
            // it before taking anything back.
            match c.try_read(&mut b) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                read => {
                    let n = read.unwrap();
                    heard.extend_from_slice(&b[..n]);
                    assert!(
                        exited(new),
                        "a client heard {:?} through the new process before it was let go",
                        String::from_utf8_lossy(&b[..n])
                    );
                }
            }
        }
        if exited(new) {
            break;
        }
        // A look at clients and process, every 10 ms: the process is not
        // ours to wait for.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Gone: its pid is no longer its own.
    std::mem::forget(stop);
    // The manager reads again: the old process says MAINPID= once more.
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while manager.recv(&mut buf).is_ok() {}
    });
    let out = within("pin-proxy upgrade", T, cli).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let failed = proxy
        .wait_event(|e| e["message"] == "upgrade_failed", T)
        .await;
    let reason = failed["reason"].as_str().unwrap();
    assert!(reason.contains("done adopting"), "{reason}");
    let back = proxy
        .wait_event(|e| e["message"] == "upgrade_rolled_back", T)
        .await;
    assert_eq!(back["connections"], CLIENTS);

    // Every question answered once, in order, then the splice goes on.
    for (i, (c, mut got)) in clients.iter_mut().zip(early).enumerate() {
        let asked = format!("asked {i:03}");
        let heard = got.len();
        got.resize(asked.len().max(heard), 0);
        within("the answer", T, c.read_exact(&mut got[heard..]))
            .await
            .unwrap();
        assert_eq!(got, asked.as_bytes());
        echoes(c, b"again").await;
        let mut extra = [0u8; 1];
        assert!(
            matches!(c.try_read(&mut extra), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "client {i} got more than it asked for"
        );
    }
    assert!(
        proxy
            .named("closed")
            .iter()
            .all(|e| e["reason"] == "client_closed"),
        "no connection was closed"
    );
    // And a real upgrade still works, with every client.
    upgrade_ok(&proxy).await;
    for c in &mut clients {
        echoes(c, b"after").await;
    }
}

/// A child process of `pid`, if it has one.
fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let child: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        // "pid (comm) S ppid ...": the fields after the last ')'.
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == pid).then_some(child)
    })
}

/// How many established IPv4 TCP connections on local `port` process
/// `pid` holds a descriptor of (the pool's clients: its listener is not
/// established).
fn established_on(pid: u32, port: u16) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    let inodes: std::collections::HashSet<String> = dir
        .flatten()
        .filter_map(|e| {
            let target = std::fs::read_link(e.path()).ok()?;
            let target = target.to_str()?;
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            f.len() > 9 && f[1].ends_with(&local) && f[3] == "01" && inodes.contains(f[9])
        })
        .count()
}

/// SIGKILL for a process when dropped (gone already is fine).
struct StopOnDrop(u32);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = i32::try_from(self.0)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}
