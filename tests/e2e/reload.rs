//! Hot reload (SIGHUP): added backends take the next client while existing
//! connections stay; removed pools stop listening; a broken file changes
//! nothing; quarantine and strikes survive. Plus the systemd notifications
//! around it.

use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use crate::support::inproc::Running;
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::{wait_until, within};
use pin_proxy::ReloadError;
use pin_proxy::inspect::State;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(10);

fn pool(name: &str, listen: &str, backends: &[(&str, SocketAddr)]) -> String {
    let list: Vec<String> = backends
        .iter()
        .map(|(n, a)| format!("{{ name: {n}, addr: \"{a}\" }}"))
        .collect();
    format!(
        "  - name: {name}\n    listen: \"{listen}\"\n    backends: [{}]\n",
        list.join(", ")
    )
}

async fn echo_ok(c: &mut TcpStream) {
    c.write_all(b"still here").await.unwrap();
    let mut b = [0u8; 10];
    within("echo", T, c.read_exact(&mut b)).await.unwrap();
    assert_eq!(&b, b"still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_backend_takes_the_next_client_and_existing_connections_stay() {
    let (a, b) = (Node::echo().await, Node::echo().await);
    let proxy = Proxy::start(&format!(
        "pools:\n{}",
        pool("p", "127.0.0.1:0", &[("a", a.addr)])
    ))
    .await;
    let addr = proxy.addr("p");
    let mut first = TcpStream::connect(addr).await.unwrap();
    let mut second = TcpStream::connect(addr).await.unwrap();
    echo_ok(&mut first).await;
    echo_ok(&mut second).await;
    // Same pool, same (bound) address, one more backend.
    let yaml = format!(
        "pools:\n{}",
        pool("p", &addr.to_string(), &[("a", a.addr), ("b", b.addr)])
    );
    let outcome = proxy.reload(&yaml).await;
    assert_eq!(outcome["message"], "reloaded", "{outcome}");
    let mut third = TcpStream::connect(addr).await.unwrap();
    echo_ok(&mut third).await;
    let connected = proxy
        .wait_count(|e| e["message"] == "connected", 3, T)
        .await;
    assert_eq!(
        connected[2]["backend"], "b",
        "the new backend, with no clients, gets the next one"
    );
    echo_ok(&mut first).await;
    echo_ok(&mut second).await;
    assert!(
        proxy.named("closed").is_empty(),
        "no connection was closed by the reload"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_pool_stops_listening_and_closes_its_connections() {
    let node = Node::echo().await;
    let keep = pool("keep", "127.0.0.1:0", &[("n", node.addr)]);
    let proxy = Proxy::start(&format!(
        "pools:\n{keep}{}",
        pool("gone", "127.0.0.1:0", &[("n", node.addr)])
    ))
    .await;
    let (keep_addr, gone_addr) = (proxy.addr("keep"), proxy.addr("gone"));
    let mut on_gone = TcpStream::connect(gone_addr).await.unwrap();
    echo_ok(&mut on_gone).await;
    let keep = pool("keep", &keep_addr.to_string(), &[("n", node.addr)]);
    assert_eq!(
        proxy.reload(&format!("pools:\n{keep}")).await["message"],
        "reloaded"
    );
    let mut b = [0u8; 1];
    let n = within("removed pool's client closed", T, on_gone.read(&mut b)).await;
    assert!(matches!(n, Ok(0) | Err(_)));
    let closed = proxy
        .wait_event(|e| e["message"] == "closed" && e["pool"] == "gone", T)
        .await;
    assert_eq!(closed["reason"], "pool_removed");
    wait_until("port closed", T, || {
        std::net::TcpStream::connect(gone_addr).is_err()
    })
    .await;
    let mut c = TcpStream::connect(keep_addr).await.unwrap();
    echo_ok(&mut c).await;
}

/// A renamed pool keeps its address, and two pools can swap theirs: the
/// new listeners join the old ones' sockets instead of finding the
/// address taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_renamed_or_ports_swapped_binds_the_addresses_it_takes_over() {
    let (a, b) = (Node::echo().await, Node::echo().await);
    let proxy = Proxy::start(&format!(
        "pools:\n{}{}",
        pool("old-name", "127.0.0.1:0", &[("a", a.addr)]),
        pool("other", "127.0.0.1:0", &[("b", b.addr)])
    ))
    .await;
    let (first, second) = (proxy.addr("old-name"), proxy.addr("other"));
    let mut on_old = TcpStream::connect(first).await.unwrap();
    echo_ok(&mut on_old).await;

    let renamed = format!(
        "pools:\n{}{}",
        pool("new-name", &first.to_string(), &[("a", a.addr)]),
        pool("other", &second.to_string(), &[("b", b.addr)])
    );
    let outcome = proxy.reload(&renamed).await;
    assert_eq!(outcome["message"], "reloaded", "{outcome}");
    let closed = proxy
        .wait_event(|e| e["message"] == "closed" && e["pool"] == "old-name", T)
        .await;
    assert_eq!(closed["reason"], "pool_removed");
    until_served_by(&proxy, first, "new-name").await;

    // Swap the two pools' addresses.
    let swapped = format!(
        "pools:\n{}{}",
        pool("new-name", &second.to_string(), &[("a", a.addr)]),
        pool("other", &first.to_string(), &[("b", b.addr)])
    );
    let outcome = proxy.reload(&swapped).await;
    assert_eq!(outcome["message"], "reloaded", "{outcome}");
    until_served_by(&proxy, second, "new-name").await;
    until_served_by(&proxy, first, "other").await;
}

/// Wait until clients of `addr` are served by `pool`: until the listeners
/// a reload let go have closed, a client may still land on one of them.
async fn until_served_by(proxy: &Proxy, addr: SocketAddr, pool: &str) {
    within(&format!("a client of {addr} served by {pool}"), T, async {
        while one_client(proxy, addr).await.as_deref() != Some(pool) {}
    })
    .await;
}

/// The pool that served one client of `addr`; `None` if it was refused,
/// closed or reset before its echo (it met a listener being closed).
async fn one_client(proxy: &Proxy, addr: SocketAddr) -> Option<String> {
    let mut c = TcpStream::connect(addr).await.ok()?;
    c.write_all(b"ping").await.ok()?;
    let mut b = [0u8; 4];
    c.read_exact(&mut b).await.ok()?;
    let client = c.local_addr().ok()?.to_string();
    drop(c);
    let closed = proxy
        .wait_event(
            |e| e["message"] == "closed" && e["client"] == client.as_str(),
            T,
        )
        .await;
    closed["pool"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_file_is_rejected_and_the_old_config_keeps_running() {
    let node = Node::echo().await;
    let proxy = Proxy::start(&format!(
        "pools:\n{}",
        pool("p", "127.0.0.1:0", &[("n", node.addr)])
    ))
    .await;
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    echo_ok(&mut c).await;
    let outcome = proxy
        .reload("pools:\n  - name: p\n    listen: nowhere\n    backends: []\n")
        .await;
    assert_eq!(outcome["message"], "reload_failed");
    let err = outcome["err"].as_str().unwrap();
    assert!(err.contains("pools[0]"), "error names the YAML path: {err}");
    echo_ok(&mut c).await;
    let mut fresh = TcpStream::connect(proxy.addr("p")).await.unwrap();
    echo_ok(&mut fresh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_and_strikes_survive_a_reload() {
    let (a, b) = (Node::echo().await, Node::echo().await);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let write = |backends: &[(&str, SocketAddr)]| {
        std::fs::write(
            &path,
            format!("pools:\n{}", pool("p", "127.0.0.1:0", backends)),
        )
        .unwrap()
    };
    write(&[("a", a.addr)]);
    let proxy = Running::start_file(&path);
    let (control, p) = (proxy.control(), proxy.pool());
    p.operator()
        .quarantine("a", Duration::from_secs(3600))
        .unwrap();
    let before = pin_proxy::inspect::status(p).backends[0].clone();
    assert_eq!(before.state, State::Quarantined);
    write(&[("a", a.addr), ("b", b.addr)]);
    control.reload().await.unwrap();
    let after = pin_proxy::inspect::status(p);
    assert_eq!(after.backends.len(), 2);
    assert_eq!(
        after.backends[0].quarantine, before.quarantine,
        "same window, same reason"
    );
    assert_eq!(after.backends[0].state, State::Quarantined);
    assert_eq!(after.backends[0].strikes, before.strikes);
    // A broken file is refused through the same path, with the reason.
    std::fs::write(&path, "pools: [").unwrap();
    let err = control.reload().await.unwrap_err();
    assert!(
        matches!(err, ReloadError::Config(_)),
        "refused as an invalid config: {err:?}"
    );
    assert!(err.to_string().contains("config.yaml"), "{err}");
    assert_eq!(
        pin_proxy::inspect::status(p).backends.len(),
        2,
        "the old config keeps running"
    );
    proxy.stop().await;
}

/// Receive notifications on `sock` until one contains `want`.
fn expect_notify(sock: &UnixDatagram, want: &str, seen: &mut Vec<String>) {
    let mut buf = [0u8; 1024];
    loop {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            // A signal to this process (the proxy's own reload) interrupts
            // the wait; the read timeout still bounds it.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("no {want} (saw {seen:?}): {e}"),
        };
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        seen.push(msg.clone());
        if msg.contains(want) {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_hears_ready_reloading_ready_stopping_and_watchdog_pings() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(T)).unwrap();
    let node = Node::echo().await;
    let yaml = format!("pools:\n{}", pool("p", "127.0.0.1:0", &[("n", node.addr)]));
    let mut proxy = Proxy::start_with_env(
        &yaml,
        &[
            ("NOTIFY_SOCKET", sock_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "200000"),
        ],
    )
    .await;
    let mut seen = Vec::new();
    expect_notify(&sock, "READY=1", &mut seen);
    expect_notify(&sock, "WATCHDOG=1", &mut seen);
    let yaml = format!(
        "pools:\n{}",
        pool("p", &proxy.addr("p").to_string(), &[("n", node.addr)])
    );
    proxy.reload(&yaml).await;
    expect_notify(&sock, "RELOADING=1", &mut seen);
    let reloading = seen.last().unwrap().clone();
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading}");
    expect_notify(&sock, "READY=1", &mut seen);
    proxy.signal("TERM");
    expect_notify(&sock, "STOPPING=1", &mut seen);
    assert!(proxy.wait_exit(T).await.unwrap().success());
}
