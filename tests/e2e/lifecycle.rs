//! Process life: graceful shutdown on SIGTERM/SIGINT, IPv4 and IPv6
//! listeners, host-name backends, log formats and files.

use std::time::{Duration, Instant};

use crate::support::nodes::Node;
use crate::support::proxy::{Proxy, binary};
use crate::support::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(10);

async fn shutdown_on(sig: &str) {
    let node = Node::hold().await;
    let yaml = format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends: [\"{}\"]\n",
        node.addr
    );
    let mut proxy = Proxy::start(&yaml).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(TcpStream::connect(proxy.addr("p")).await.unwrap());
    }
    proxy
        .wait_count(|e| e["message"] == "connected", 3, T)
        .await;
    let sent = Instant::now();
    proxy.signal(sig);
    for c in &mut clients {
        let mut b = [0u8; 1];
        let n = within("client closed by shutdown", T, c.read(&mut b)).await;
        assert!(matches!(n, Ok(0) | Err(_)), "client still open");
    }
    let status = proxy
        .wait_exit(Duration::from_secs(5))
        .await
        .expect("did not exit");
    let took = sent.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(took < Duration::from_secs(3), "shutdown took {took:?}");
    proxy.wait_event(|e| e["message"] == "shutdown", T).await;
    let closed = proxy.wait_count(|e| e["message"] == "closed", 3, T).await;
    assert!(closed.iter().all(|e| e["reason"] == "shutdown"));
    // No new connections after shutdown.
    assert!(TcpStream::connect(proxy.addr("p")).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_live_connections_and_exits_zero() {
    shutdown_on("TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_closes_live_connections_and_exits_zero() {
    shutdown_on("INT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listens_on_ipv4_and_ipv6_and_resolves_backend_names() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipping: no IPv6 loopback here");
        return;
    }
    let node = Node::echo().await;
    let yaml = format!(
        "pools:\n  - name: p\n    listen: [\"127.0.0.1:0\", \"[::1]:0\"]\n    backends: [\"localhost:{}\"]\n",
        node.addr.port()
    );
    let proxy = Proxy::start(&yaml).await;
    let addrs = proxy.addrs_of("p");
    assert_eq!(addrs.len(), 2);
    assert!(addrs.iter().any(|a| a.is_ipv6()));
    for addr in addrs {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"hi").await.unwrap();
        let mut b = [0u8; 2];
        within("echo", T, c.read_exact(&mut b)).await.unwrap();
        assert_eq!(&b, b"hi", "via {addr}");
    }
}

/// A zone (`%lo`, `%1`) on an IPv6 listen and backend address is accepted
/// and used: the loopback interface's own address stands in for a
/// link-local one, which a test host cannot be expected to have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_addresses_with_a_zone_listen_and_connect() {
    let Ok(backend) = tokio::net::TcpListener::bind("[::1]:0").await else {
        eprintln!("skipping: no IPv6 loopback here");
        return;
    };
    let port = backend.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = backend.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let yaml = format!(
        "pools:\n  - name: p\n    listen: [\"[::1%lo]:0\", \"[::1%1]:0\"]\n    \
         backends: [\"[::1%lo]:{port}\"]\n"
    );
    let proxy = Proxy::start(&yaml).await;
    let addrs = proxy.addrs_of("p");
    assert_eq!(addrs.len(), 2);
    for addr in addrs {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"hi").await.unwrap();
        let mut b = [0u8; 2];
        within("echo", T, c.read_exact(&mut b)).await.unwrap();
        assert_eq!(&b, b"hi", "via {addr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_go_to_the_configured_file_and_are_flushed_on_exit() {
    let node = Node::echo().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("logs").join("pin-proxy.log");
    let cfg = dir.path().join("config.yaml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &cfg,
        format!(
            "log: {{ level: info, format: text, file: {} }}\npools:\n  - name: p\n    listen: 127.0.0.1:{port}\n    backends: [\"{}\"]\n",
            log.display(),
            node.addr
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(binary())
        .args(["run", "-c"])
        .arg(&cfg)
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    let mut c = within("listener up", T, async {
        loop {
            if let Ok(c) = TcpStream::connect(&addr).await {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    c.write_all(b"x").await.unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).await.unwrap();
    drop(c);
    // The writer flushes as it goes: wait for the `closed` line to land.
    crate::support::wait_until("closed in the log file", T, || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains(" closed"))
    })
    .await;
    std::process::Command::new("kill")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
    // The configured path itself (renamed with its date only at midnight).
    let files: Vec<_> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    assert_eq!(
        files,
        std::slice::from_ref(&log),
        "one file, at the configured path"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    for event in ["listening", "closed", "shutdown"] {
        assert!(
            text.lines().any(|l| l.contains(event)),
            "{event} missing from:\n{text}"
        );
    }
    // `key=value`, a plain word bare (`reason=client_closed`, as written).
    let closed = text.lines().find(|l| l.contains(" closed")).unwrap();
    for field in [
        "pool=p",
        "bytes_up=1",
        "bytes_down=1",
        "reason=client_closed",
        "conn=",
    ] {
        assert!(closed.contains(field), "{field} missing from {closed}");
    }
}
