//! Fault injection, the short cases: a backend process killed mid-stream
//! (FIN and RST), a black-holed backend, a half-open backend (idle timeout,
//! and keepalive under total packet loss in a private network namespace),
//! fd exhaustion, the allow-list on every listen address, and a backend name
//! that re-resolves to another address. Each prints a `FIGURE` line with what
//! it measured (`cargo test --test e2e faults:: -- --nocapture`).

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::faults_support::{
    PY_STREAMER, Py, Wrapped, admin_addr, alive, fd_count, live_connections, ms, require_peers,
    tcp_sockets, wait_named,
};
use crate::support::nodes::{BlackHole, Node};
use crate::support::proxy::{Proxy, binary};
use crate::support::{wait_until, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const T: Duration = Duration::from_secs(10);

async fn roundtrip(c: &mut TcpStream, msg: &[u8]) {
    c.write_all(msg).await.unwrap();
    let mut got = vec![0u8; msg.len()];
    within("echo", T, c.read_exact(&mut got)).await.unwrap();
    assert_eq!(got, msg);
}

/// Read until EOF or error: `Ok(bytes)` on EOF, the error kind otherwise.
async fn drain(c: &mut TcpStream) -> Result<u64, std::io::ErrorKind> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0u64;
    loop {
        match c.read(&mut buf).await {
            Ok(0) => return Ok(n),
            Ok(k) => n += k as u64,
            Err(e) => return Err(e.kind()),
        }
    }
}

/// A backend process streaming to the client is SIGKILLed. With `rst`, the
/// client has sent bytes the backend never read, so its kernel answers the
/// exit with a reset; otherwise the exit is a plain FIN.
async fn killed_backend(rst: bool) {
    let mut py = Py::spawn(&[], PY_STREAMER, &[]);
    let port: u16 = py.line().parse().expect("python port");
    let echo = Node::echo().await;
    let proxy = Proxy::start(&format!(
        "admin: {{ listen: 127.0.0.1:0 }}\ndefaults:\n  health: {{ interval: 1h }}\npools:\n  \
         - {{ name: a, listen: 127.0.0.1:0, backends: [\"127.0.0.1:{port}\"] }}\n  \
         - {{ name: b, listen: 127.0.0.1:0, backends: [\"{}\"] }}\n",
        echo.addr
    ))
    .await;
    let pid = proxy.pid();
    let admin = admin_addr(&proxy.events());
    wait_named(&proxy, "probe", 2, T, |_| true).await;
    // Warm up both pools once, so lazily opened descriptors are in the baseline.
    let mut warm = TcpStream::connect(proxy.addr("b")).await.unwrap();
    roundtrip(&mut warm, b"warm").await;
    drop(warm);
    wait_named(&proxy, "closed", 1, T, |_| true).await;
    let baseline = fd_count(pid);

    let mut other = TcpStream::connect(proxy.addr("b")).await.unwrap();
    roundtrip(&mut other, b"before").await;
    let mut victim = TcpStream::connect(proxy.addr("a")).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0usize;
    while got < 1 << 20 {
        got += within("stream from python", T, victim.read(&mut buf))
            .await
            .unwrap();
    }
    if rst {
        // Left unread in the backend's receive queue: its exit becomes a reset.
        victim.write_all(&[7u8; 64 * 1024]).await.unwrap();
        wait_until("bytes unread in the backend's receive queue", T, || {
            tcp_sockets(py.pid()).iter().any(|s| s.rx_queue > 0)
        })
        .await;
    }
    let during = fd_count(pid);
    let killed = Instant::now();
    py.kill();
    let end = within("client sees the end", T, drain(&mut victim)).await;
    let seen = killed.elapsed();
    if rst {
        assert_eq!(
            end,
            Err(std::io::ErrorKind::ConnectionReset),
            "a backend reset reaches the client as a reset"
        );
    } else {
        assert!(
            end.is_ok(),
            "a backend exit reaches the client as EOF: {end:?}"
        );
    }
    // A client that saw EOF hangs up; the proxy then ends the connection.
    drop(victim);
    let closed = wait_named(&proxy, "closed", 1, T, |e| e["pool"] == "a").await;
    let logged = killed.elapsed();
    let want = if rst {
        "backend_error"
    } else {
        "backend_closed"
    };
    assert_eq!(closed[0]["reason"], want, "{}", closed[0]);

    roundtrip(&mut other, b"after the kill").await;
    drop(other);
    wait_named(&proxy, "closed", 2, T, |e| e["pool"] == "b").await;
    wait_until("fds back to baseline", T, || fd_count(pid) <= baseline).await;
    let after = fd_count(pid);
    assert_eq!(live_connections(admin, "a"), 0);
    assert_eq!(live_connections(admin, "b"), 0);
    println!(
        "FIGURE killed_backend rst={rst}: client saw {end:?} {:.1} ms after SIGKILL; \
         closed({want}) logged after {:.1} ms; proxy fds baseline {baseline}, \
         with 2 clients {during}, after {after}",
        ms(seen),
        ms(logged)
    );
    assert!(seen < Duration::from_secs(1), "client closed in {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_process_killed_mid_stream_ends_the_client_with_eof_and_leaks_nothing() {
    killed_backend(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_process_killed_with_unread_data_resets_the_client_and_leaks_nothing() {
    killed_backend(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_holed_backend_times_out_fails_over_in_the_same_accept_then_is_skipped() {
    let hole = BlackHole::new();
    let echo = Node::echo().await;
    let proxy = Proxy::start(&format!(
        "defaults:\n  connect_timeout: 300ms\n  quarantine: {{ base: 1m, max: 5m, failures: 1 }}\n  \
         health: {{ interval: 1h, timeout: 300ms }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [{{ name: hole, addr: \"{}\" }}, {{ name: echo, addr: \"{}\" }}]\n",
        hole.addr, echo.addr
    )).await;
    wait_named(&proxy, "probe", 2, T, |_| true).await;
    let addr = proxy.addr("p");

    // Tie on live connections: config order puts the black hole first.
    let started = Instant::now();
    let mut first = TcpStream::connect(addr).await.unwrap();
    roundtrip(&mut first, b"ping").await;
    let failover = started.elapsed();
    // Log lines arrive on their own schedule: wait for them.
    let connected = wait_named(&proxy, "connected", 1, T, |_| true).await;
    let failed = proxy.named("connect_failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["backend"], "hole");
    assert_eq!(failed[0]["reason"], "timeout");
    assert_eq!(connected[0]["backend"], "echo");
    assert_eq!(
        connected[0]["conn"], failed[0]["conn"],
        "failed over within the same client connection"
    );
    assert!(
        failover >= Duration::from_millis(300) && failover < Duration::from_secs(3),
        "first byte after {failover:?}, connect_timeout is 300ms"
    );
    let q = wait_named(&proxy, "quarantined", 1, T, |e| e["backend"] == "hole").await;
    assert_eq!(q[0]["reason"], "connect_failures");

    // Later clients skip it: no more attempts, no more connect_timeout waits.
    drop(first);
    let mut slowest = Duration::ZERO;
    for i in 0..10u8 {
        let t = Instant::now();
        let mut c = TcpStream::connect(addr).await.unwrap();
        roundtrip(&mut c, &[i; 4]).await;
        slowest = slowest.max(t.elapsed());
    }
    wait_named(&proxy, "connected", 11, T, |e| e["backend"] == "echo").await;
    let attempts = proxy.named("connect_failed").len();
    assert_eq!(attempts, 1, "the quarantined hole was tried again");
    println!(
        "FIGURE black_hole: first client answered after {:.0} ms (connect_timeout 300 ms), \
         connect attempts to the hole: {attempts} across 11 clients, later clients' slowest \
         round trip {:.1} ms",
        ms(failover),
        ms(slowest)
    );
}

/// Accepts, then neither reads nor writes: the application hung.
async fn silent() -> Node {
    Node::start(|s: TcpStream| async move {
        let _held = s;
        std::future::pending::<()>().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_backend_is_closed_by_idle_timeout_and_both_legs_carry_keepalive() {
    let node = silent().await;
    let proxy = Proxy::start(&format!(
        "defaults:\n  idle_timeout: 1s\n  keepalive: {{ idle: 7s, interval: 2s, count: 3 }}\n  \
         health: {{ interval: 1h }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [\"{}\"]\n",
        node.addr
    ))
    .await;
    wait_named(&proxy, "probe", 1, T, |_| true).await;
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let me = c.local_addr().unwrap();
    c.write_all(b"anyone there?").await.unwrap();
    let last_byte = Instant::now();
    // The start-up probe's connection counts too: the node never notices it end.
    wait_until("backend leg up", T, || node.accepted() == 2).await;

    // Read the keepalive timers back from the kernel, once both legs are
    // idle with the timer armed (until the last byte is acknowledged, a
    // leg shows its retransmit timer instead).
    const KEEPALIVE: u8 = 2;
    let mut legs = None;
    wait_until("both legs idle with a keepalive timer", T, || {
        let socks = tcp_sockets(proxy.pid());
        let client = socks.iter().find(|s| s.remote == me).cloned();
        let backend = socks.iter().find(|s| s.remote == node.addr).cloned();
        if let (Some(c), Some(b)) = (client, backend)
            && c.timer == KEEPALIVE
            && b.timer == KEEPALIVE
        {
            legs = Some((c, b));
        }
        legs.is_some()
    })
    .await;
    let (client_leg, backend_leg) = legs.expect("both legs in /proc/PID/net/tcp");
    let (client_leg, backend_leg) = (&client_leg, &backend_leg);
    for (leg, s) in [("client", client_leg), ("backend", backend_leg)] {
        assert!(
            s.timer_in > Duration::from_secs(5) && s.timer_in <= Duration::from_secs(7),
            "{leg} leg keepalive fires in {:?}, idle is 7s",
            s.timer_in
        );
    }

    let end = within("idle timeout", T, drain(&mut c)).await;
    let after = last_byte.elapsed();
    assert_eq!(end, Ok(0), "closed cleanly with nothing from the backend");
    let closed = wait_named(&proxy, "closed", 1, T, |_| true).await;
    assert_eq!(closed[0]["reason"], "idle_timeout");
    assert!(
        after >= Duration::from_millis(950) && after < Duration::from_millis(2500),
        "closed {after:?} after the last byte, idle_timeout 1s"
    );
    println!(
        "FIGURE half_open idle_timeout=1s: client closed {:.0} ms after the last byte; \
         keepalive timers read back: client leg {:?}, backend leg {:?} (idle 7s)",
        ms(after),
        client_leg.timer_in,
        backend_leg.timer_in
    );
}

/// A child process in a new network namespace with `lo` up; the namespace
/// lives as long as it does. `None` when namespaces are not available.
struct Netns {
    holder: std::process::Child,
}

impl Netns {
    fn new() -> Option<Netns> {
        let mut holder = Command::new("unshare")
            .args([
                "-n",
                "--",
                "sh",
                "-c",
                "ip link set lo up && echo up && exec sleep 120",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut line = String::new();
        let out = holder.stdout.take()?;
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).ok()?;
        if line.trim() != "up" {
            // Not usable; reap it.
            let _ = holder.kill();
            let _ = holder.wait();
            return None;
        }
        Some(Netns { holder })
    }

    /// `nsenter --net=...`: a prefix that runs a command inside.
    fn enter(&self) -> Vec<String> {
        vec![
            "nsenter".to_owned(),
            format!("--net=/proc/{}/ns/net", self.holder.id()),
        ]
    }

    fn run(&self, args: &[&str]) -> bool {
        let enter = self.enter();
        Command::new(&enter[0])
            .arg(&enter[1])
            .args(args)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Already gone is fine.
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

fn skip(what: &str) {
    assert!(!require_peers(), "PIN_PROXY_REQUIRE_PEERS=1 but {what}");
    eprintln!("SKIPPED: {what}");
}

const PY_ECHO_ONCE: &str = r#"
import socket, threading
l = socket.socket(); l.bind(("127.0.0.2", 0)); l.listen(8)
print(l.getsockname()[1], flush=True)
def serve(c):
    try:
        while True:
            d = c.recv(65536)
            if not d: return
            c.sendall(d)
    except OSError:
        pass
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

const PY_CLIENT: &str = r#"
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
c = socket.create_connection((host, int(port)))
c.sendall(b"hi")
assert c.recv(2) == b"hi"
print("ok", flush=True)
try:
    print("end", c.recv(1), flush=True)
except OSError as e:
    print("error", e, flush=True)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_backend_host_is_detected_by_keepalive() {
    // Everything runs in a private network namespace: the proxy, a python
    // echo backend on 127.0.0.2 and a python client. Then a policy rule
    // black-holes 127.0.0.2 ahead of the local table: the backend host is
    // gone without a FIN or RST, and only keepalive / TCP_USER_TIMEOUT can
    // notice. (A qdisc drop would not do: the kernel retries keepalive
    // probes dropped locally without counting them.)
    let Some(ns) = Netns::new() else {
        return skip("cannot create a network namespace (unshare -n)");
    };
    let enter = ns.enter();
    let prefix: Vec<&str> = enter.iter().map(String::as_str).collect();
    let mut backend = Py::spawn(&prefix, PY_ECHO_ONCE, &[]);
    let port: u16 = backend.line().parse().expect("backend port");
    let yaml = format!(
        "defaults:\n  idle_timeout: 0s\n  keepalive: {{ idle: 1s, interval: 1s, count: 2 }}\n  \
         health: {{ interval: 1h }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [\"127.0.0.2:{port}\"]\n"
    );
    let Some(proxy) = Wrapped::start(&prefix, binary(), &yaml).await else {
        return skip("nsenter could not run the proxy");
    };
    proxy.wait_named("probe", 1, T, |_| true).await;
    let mut client = Py::spawn(&prefix, PY_CLIENT, &[&proxy.addr("p").to_string()]);
    assert_eq!(
        client.line(),
        "ok",
        "echo through the proxy inside the namespace"
    );
    // Cut only once the backend leg is idle (every byte acknowledged, the
    // keepalive timer armed): then only keepalive can notice the loss.
    let backend_addr: SocketAddr = format!("127.0.0.2:{port}").parse().unwrap();
    wait_until("backend leg idle with a keepalive timer", T, || {
        tcp_sockets(proxy.pid())
            .iter()
            .any(|s| s.remote == backend_addr && s.timer == 2)
    })
    .await;
    let cut = Instant::now();
    let vanish = [
        "ip rule add pref 5 to 127.0.0.2 blackhole",
        "ip rule del pref 0 table local",
        "ip rule add pref 10 table local",
    ];
    for rule in vanish {
        if !ns.run(&rule.split(' ').collect::<Vec<_>>()) {
            return skip("ip rule cannot black-hole an address here");
        }
    }
    let closed = proxy
        .wait_named("closed", 1, Duration::from_secs(30), |_| true)
        .await;
    let took = cut.elapsed();
    let reason = closed[0]["reason"].as_str().unwrap_or_default().to_owned();
    let err = closed[0]["err"].as_str().unwrap_or_default().to_owned();
    assert_eq!(reason, "backend_error", "{}", closed[0]);
    assert!(err.contains("timed out"), "{}", closed[0]);
    assert!(
        took > Duration::from_millis(1500) && took < Duration::from_secs(8),
        "vanished backend noticed after {took:?}; keepalive idle 1s + 2 × 1s"
    );
    // The client is told with a reset, not left hanging.
    let told = tokio::task::spawn_blocking(move || client.line());
    let told = within("client told", T, told).await.unwrap();
    assert!(told.starts_with("error"), "client saw: {told}");
    println!(
        "FIGURE half_open keepalive(idle 1s, interval 1s, count 2): vanished backend noticed \
         after {:.0} ms, closed reason {reason} ({err}); client saw `{told}`",
        ms(took)
    );
}

/// What one fd-exhaustion run saw.
struct FdRun {
    served_while_held: usize,
    baseline: usize,
    peak: usize,
    accept_failed: usize,
    connect_failed: usize,
    no_backend: usize,
    quarantined: usize,
    budget: usize,
}

/// Run the proxy under RLIMIT_NOFILE 64 (soft and hard, from the start),
/// open 300 clients and hold them 3 s, then let them go. Asserts what must
/// hold whatever the logging: the process survives, the accept loop
/// recovers, every descriptor comes back and a new client is served.
/// `None` when prlimit cannot do it here.
async fn exhaust_fds() -> Option<FdRun> {
    let node = Node::echo().await;
    let yaml = format!(
        "defaults:\n  health: {{ interval: 1h }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [\"{}\"]\n",
        node.addr
    );
    // Soft and hard limit 64 from the start, as a unit's LimitNOFILE would set it.
    let Some(proxy) = Wrapped::start(&["prlimit", "--nofile=64:64", "--"], binary(), &yaml).await
    else {
        skip("prlimit cannot start the proxy here");
        return None;
    };
    let pid = proxy.pid();
    proxy.wait_named("probe", 1, T, |_| true).await;
    let mut warm = TcpStream::connect(proxy.addr("p")).await.unwrap();
    roundtrip(&mut warm, b"warm").await;
    drop(warm);
    proxy.wait_named("closed", 1, T, |_| true).await;
    let baseline = fd_count(pid);
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max open files") && l.split_whitespace().nth(3) == Some("64")),
        "{limits}"
    );

    let addr = proxy.addr("p");
    let clients: Vec<_> = (0..300u32)
        .map(|i| {
            tokio::spawn(async move {
                let mut c = TcpStream::connect(addr).await.ok()?;
                let msg = i.to_le_bytes();
                c.write_all(&msg).await.ok()?;
                let mut got = [0u8; 4];
                let served = matches!(
                    tokio::time::timeout(Duration::from_secs(3), c.read_exact(&mut got)).await,
                    Ok(Ok(_)) if got == msg
                );
                Some((c, served))
            })
        })
        .collect();
    let mut held = Vec::new();
    let mut served_while_held = 0;
    for t in clients {
        if let Some((c, ok)) = within("clients", Duration::from_secs(30), t).await.unwrap() {
            served_while_held += usize::from(ok);
            held.push(c);
        }
    }
    let peak = fd_count(pid);
    assert!(alive(pid), "the proxy survived");
    assert!(peak <= 64, "{peak} fds open under a limit of 64");
    drop(held);

    wait_until("fds back to baseline", Duration::from_secs(20), || {
        fd_count(pid) <= baseline
    })
    .await;
    let mut fresh = TcpStream::connect(addr).await.unwrap();
    roundtrip(&mut fresh, b"served again").await;
    drop(fresh);
    assert!(alive(pid));
    let run = FdRun {
        served_while_held,
        baseline,
        peak,
        accept_failed: proxy.named("accept_failed").len(),
        connect_failed: proxy.named("connect_failed").len(),
        no_backend: proxy
            .named("closed")
            .iter()
            .filter(|e| e["reason"] == "no_backend")
            .count(),
        quarantined: proxy.named("quarantined").len(),
        budget: proxy.named("connection_budget")[0]["connections"]
            .as_u64()
            .unwrap_or(u64::MAX) as usize,
    };
    println!(
        "FIGURE fd_exhaustion(RLIMIT_NOFILE 64): 300 clients, {} served while held, proxy fds \
         baseline {} peak {}; accept_failed logged {} times, connect_failed {} (EMFILE), \
         clients closed no_backend {}, backend quarantined {} times",
        run.served_while_held,
        run.baseline,
        run.peak,
        run.accept_failed,
        run.connect_failed,
        run.no_backend,
        run.quarantined
    );
    Some(run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fd_exhaustion_is_survived_and_service_resumes_once_clients_leave() {
    if let Some(run) = exhaust_fds().await {
        assert!(
            run.served_while_held >= 1,
            "some clients were served at the limit"
        );
        assert!(
            run.budget < 32,
            "the budget fits 64 descriptors: {}",
            run.budget
        );
        assert!(
            run.served_while_held <= run.budget,
            "never more than the budget at once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fd_exhaustion_is_logged_without_flooding_and_blames_no_backend() {
    let Some(run) = exhaust_fds().await else {
        return;
    };
    assert!(
        run.accept_failed <= 5,
        "accept_failed logged {} times",
        run.accept_failed
    );
    assert_eq!(
        run.connect_failed, 0,
        "the proxy's own EMFILE was logged as a backend connect failure"
    );
    assert_eq!(
        run.quarantined, 0,
        "the backend was blamed for the proxy's fd limit"
    );
    assert!(
        run.no_backend < 30,
        "{} waiting clients were dropped instead of waiting in the backlog",
        run.no_backend
    );
}

/// Sends `BANNER` to every connection, then reads until EOF.
async fn banner() -> Node {
    Node::start(|mut s: TcpStream| async move {
        if s.write_all(b"BANNER").await.is_ok() {
            let mut buf = [0u8; 256];
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
        }
    })
    .await
}

/// Connect from `from` (port 0) to `to`; every byte received until the
/// proxy closes or 1 s of silence.
async fn bytes_from(from: SocketAddr, to: SocketAddr) -> Vec<u8> {
    let sock = if to.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .unwrap();
    sock.bind(from).unwrap();
    let mut c = within("connect", T, sock.connect(to)).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(1), c.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if got.len() >= 6 {
            break;
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_list_holds_on_every_listen_address_v4_and_v6() {
    let node = banner().await;
    let pool = |name: &str, allow: &str| {
        format!(
            "  - name: {name}\n    listen: [\"127.0.0.1:0\", \"[::1]:0\"]\n    allow: [{allow}]\n    \
             backends: [\"{}\"]\n",
            node.addr
        )
    };
    let proxy = Proxy::start(&format!(
        "defaults:\n  health: {{ interval: 1h }}\npools:\n{}{}",
        pool("v4only", "127.0.0.1/32"),
        pool("v6only", "\"::1/128\"")
    ))
    .await;
    // Both pools share one probe of the node.
    wait_named(&proxy, "probe", 1, T, |_| true).await;
    let probes = node.accepted();
    let at = |addrs: &[SocketAddr], v6: bool| *addrs.iter().find(|a| a.is_ipv6() == v6).unwrap();
    let v4only = proxy.addrs_of("v4only");
    let v6only = proxy.addrs_of("v6only");
    let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
    // (client source, pool listen address, allowed?)
    let mapped = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let cases = [
        ("127.0.0.1:0", at(&v4only, false), true),
        ("127.0.0.2:0", at(&v4only, false), false),
        ("[::1]:0", at(&v4only, true), false),
        ("127.0.0.1:0", at(&v6only, false), false),
        ("127.0.0.2:0", at(&v6only, false), false),
        ("[::1]:0", at(&v6only, true), true),
    ];
    let mut refused = 0;
    for (from, to, allowed) in cases {
        let got = bytes_from(sa(from), to).await;
        if allowed {
            assert_eq!(got, b"BANNER", "{from} → {to} is allowed");
        } else {
            assert!(got.is_empty(), "{from} → {to} is refused but got {got:?}");
            refused += 1;
        }
    }
    // An IPv6 socket speaking to the IPv4 listener through a mapped address:
    // the kernel hands the proxy a plain IPv4 peer, so the v4 rules apply.
    let v4 = at(&v4only, false);
    let as_mapped = |ip: &str| SocketAddr::new(ip.parse().unwrap(), v4.port());
    let m_ok = bytes_from(sa("[::ffff:127.0.0.1]:0"), as_mapped("::ffff:127.0.0.1")).await;
    let m_no = bytes_from(sa("[::ffff:127.0.0.2]:0"), as_mapped("::ffff:127.0.0.1")).await;
    assert_eq!(m_ok, b"BANNER");
    assert!(m_no.is_empty(), "mapped 127.0.0.2 got {m_no:?}");
    refused += 1;
    let rejected = wait_named(&proxy, "rejected", refused, T, |e| {
        e["reason"] == "allow_list"
    })
    .await;
    assert_eq!(rejected.len(), refused);
    assert!(
        rejected.iter().any(|e| e["client"]
            .as_str()
            .is_some_and(|c| mapped(sa(c)).ip() == sa("127.0.0.2:0").ip())
            && e["pool"] == "v4only"),
        "{rejected:?}"
    );
    // Backend legs, as the proxy saw them: a `closed` event with a backend.
    // (The node's own count also sees start-up probes, and the second pool
    // joining the shared probe may ring one more at any time.)
    let spliced = wait_named(&proxy, "closed", 3, T, |e| e.get("backend").is_some()).await;
    assert_eq!(
        spliced.len(),
        3,
        "only the allowed clients reached the backend: {spliced:?}"
    );
    assert!(
        node.accepted() - probes >= 3,
        "the backend saw the allowed clients"
    );
    println!(
        "FIGURE allow_list: {} allowed and {refused} refused across 2 pools × (127.0.0.1, [::1]) \
         listeners plus mapped-address clients; refused clients received 0 bytes, backend saw \
         only the 3 allowed",
        3
    );
}

/// A listener on `addr` that writes `tag` to each connection, then echoes.
fn tagged(listener: TcpListener, tag: u8) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                if s.write_all(&[tag]).await.is_ok() {
                    crate::support::nodes::echo(s).await;
                }
            });
        }
    })
}

/// Two listeners on the same port, one on 127.0.0.2 and one on 127.0.0.3.
async fn twin_listeners() -> (TcpListener, TcpListener, u16) {
    for _ in 0..20 {
        let a = TcpListener::bind("127.0.0.2:0").await.unwrap();
        let port = a.local_addr().unwrap().port();
        if let Ok(b) = TcpListener::bind(("127.0.0.3", port)).await {
            return (a, b, port);
        }
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_name_that_re_resolves_to_another_address_is_followed() {
    // The proxy runs in a private mount namespace whose /etc/hosts is a
    // bind-mounted temp file; rewriting that file in place moves the name.
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.2 pin-backend.test\n").unwrap();
    let (a, b, port) = twin_listeners().await;
    let _a = tagged(a, b'A');
    let _b = tagged(b, b'B');
    let hosts_arg = hosts.to_string_lossy().into_owned();
    let prefix = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        "mount --bind \"$0\" /etc/hosts && exec \"$@\"",
        &hosts_arg,
    ];
    let yaml = format!(
        "defaults:\n  health: {{ interval: 1h }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [\"pin-backend.test:{port}\"]\n"
    );
    let Some(proxy) = Wrapped::start(&prefix, binary(), &yaml).await else {
        return skip("cannot run the proxy in a mount namespace (unshare -m, mount --bind)");
    };
    let addr = proxy.addr("p");
    let tag = |c: TcpStream| async move {
        let mut c = c;
        let mut t = [0u8; 1];
        within("tag", T, c.read_exact(&mut t)).await.unwrap();
        (c, t[0])
    };
    let (mut first, t1) = tag(TcpStream::connect(addr).await.unwrap()).await;
    std::fs::write(&hosts, "127.0.0.3 pin-backend.test\n").unwrap();
    let (_second, t2) = tag(TcpStream::connect(addr).await.unwrap()).await;
    std::fs::write(&hosts, "127.0.0.2 pin-backend.test\n").unwrap();
    let (_third, t3) = tag(TcpStream::connect(addr).await.unwrap()).await;
    roundtrip(&mut first, b"still pinned").await;
    assert_eq!(
        [t1, t2, t3],
        *b"ABA",
        "each connect followed the name's current address"
    );
    println!(
        "FIGURE address_change: pin-backend.test → 127.0.0.2, 127.0.0.3, 127.0.0.2 between \
         connects; clients landed on {}; the first stayed pinned",
        String::from_utf8_lossy(&[t1, t2, t3])
    );
}

/// `POST path` to the admin endpoint; the status line.
fn admin_post(admin: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.0\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connecting_to_a_backend_that_gets_drained_fails_over() {
    // Seen in the flapping soak: clients whose connect to the flapping node
    // was in flight when it was quarantined were closed while the stable
    // node was up. Here made deterministic: the connect hangs on a black
    // hole while an operator quarantines it.
    let hole = BlackHole::new();
    let echo = Node::echo().await;
    let proxy = Proxy::start(&format!(
        "admin: {{ listen: 127.0.0.1:0 }}\ndefaults:\n  connect_timeout: 3s\n  \
         health: {{ interval: 1h, timeout: 300ms }}\npools:\n  - name: p\n    \
         listen: 127.0.0.1:0\n    backends: [{{ name: hole, addr: \"{}\" }}, \
         {{ name: echo, addr: \"{}\" }}]\n",
        hole.addr, echo.addr
    ))
    .await;
    let admin = admin_addr(&proxy.events());
    wait_named(&proxy, "probe", 2, T, |_| true).await;
    // Ties go to config order: this client's connect hangs on the hole.
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    wait_named(&proxy, "accepted", 1, T, |_| true).await;
    // The start-up probe to the hole has given up (its socket is gone), so
    // a handshake the proxy has in flight to it is this client's leg.
    const SYN_SENT: u8 = 2;
    wait_until("the proxy's connect to the hole in flight", T, || {
        tcp_sockets(proxy.pid())
            .iter()
            .any(|s| s.remote == hole.addr && s.state == SYN_SENT)
    })
    .await;
    let answer = admin_post(admin, "/pools/p/backends/hole/quarantine?for=1m");
    assert!(answer.contains(" 200"), "{answer}");
    c.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    let outcome = within("fail-over", T, c.read_exact(&mut got)).await;
    let closed = proxy.named("closed");
    assert!(
        outcome.is_ok() && &got == b"ping",
        "the client was not failed over to the usable backend: {outcome:?}, {closed:?}"
    );
    // The same client connection tried the hole first, then the echo node.
    let connected = wait_named(&proxy, "connected", 1, T, |_| true).await;
    let failed = wait_named(&proxy, "connect_failed", 1, T, |_| true).await;
    assert_eq!(
        (&failed[0]["backend"], &connected[0]["backend"]),
        (&"hole".into(), &"echo".into())
    );
    assert_eq!(connected[0]["conn"], failed[0]["conn"]);
}
