//! Admin bounds under hostile load: refused peers are closed unread, one
//! address holds at most its share of the slots, and `/healthz` answers
//! while idle holders, refused dribblers or a burst of reloads press on the
//! endpoint (the requests that find no slot get a quick 503 or 429).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pin_proxy::inspect::{HEAD_TIMEOUT, MAX_CONNECTIONS, MAX_PER_SOURCE};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::admin_http::{Answer, admin_addr, backend, status, try_send};
use crate::support::admin_pool::{T, config};
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::{wait_until, within};

/// Each `/healthz` must be answered within this (generous) bound.
const ANSWER: Duration = Duration::from_secs(2);
/// `/healthz` requests made under each load.
const CHECKS: usize = 10;

/// A proxy whose admin endpoint allows `allow`.
async fn proxy_allowing(allow: &str) -> (Proxy, SocketAddr, Node) {
    let node = Node::echo().await;
    let yaml = config(&[("a", node.addr, false)], &format!(", allow: [{allow}]"));
    let proxy = Proxy::start(&yaml).await;
    let admin = admin_addr(&proxy);
    (proxy, admin, node)
}

/// A connection to `admin` from the loopback address `from`.
async fn connect_from(from: &str, admin: SocketAddr) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    sock.connect(admin).await.unwrap()
}

/// `method path` from `from`; `None` when closed without an answer.
async fn request_from(from: &str, admin: SocketAddr, method: &str, path: &str) -> Option<Answer> {
    let stream = connect_from(from, admin).await;
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    try_send(stream, &raw).await
}

/// `CHECKS` `/healthz` requests from 127.0.0.1, one after another: each
/// must get 200 within `ANSWER`.
async fn healthz_keeps_answering(admin: SocketAddr, load: &str) {
    for i in 0..CHECKS {
        let answer = within(
            &format!("/healthz {i} under {load}"),
            ANSWER,
            request_from("127.0.0.1", admin, "GET", "/healthz"),
        )
        .await;
        let answer = answer.unwrap_or_else(|| panic!("/healthz {i} under {load}: closed"));
        assert_eq!(
            (answer.status, answer.body.trim()),
            (200, "ok"),
            "/healthz {i} under {load}"
        );
    }
}

/// Open `per` connections from each of `sources` and send nothing.
async fn idle_holders(sources: &[&str], per: usize, admin: SocketAddr) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for from in sources {
        for _ in 0..per {
            held.push(connect_from(from, admin).await);
        }
    }
    held
}

/// A refusal for lack of a slot: `status`, a JSON error, `Retry-After`.
fn assert_refusal(answer: &Answer, status: u16, says: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    assert!(answer.error().contains(says), "{}", answer.body);
    assert_eq!(answer.header("retry-after"), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_outside_admin_allow_are_closed_at_once_unread() {
    let (proxy, admin, _node) = proxy_allowing("127.0.0.1/32").await;
    // Closed before sending anything: no head is waited for (so well
    // before the head timeout).
    let mut silent = connect_from("127.0.0.2", admin).await;
    let mut buf = [0u8; 64];
    let n = within(
        "refused peer closed",
        HEAD_TIMEOUT / 2,
        silent.read(&mut buf),
    )
    .await;
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    // A full request gets no answer at all, and nothing runs.
    for (method, path) in [
        ("GET", "/healthz"),
        ("GET", "/status"),
        ("POST", "/reload"),
        ("POST", "/pools/p/backends/a/quarantine?for=1m"),
    ] {
        let mut stream = connect_from("127.0.0.2", admin).await;
        let raw =
            format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
        // The write may already meet the close.
        let _ = stream.write_all(raw.as_bytes()).await;
        let mut got = Vec::new();
        let read = within(
            "refused peer closed",
            HEAD_TIMEOUT,
            stream.read_to_end(&mut got),
        )
        .await;
        assert!(
            got.is_empty(),
            "{method} {path}: {read:?} {}",
            String::from_utf8_lossy(&got)
        );
    }
    let s = status(admin).await;
    assert_eq!(backend(&s, "p", "a")["quarantine"], Value::Null);
    assert!(proxy.named("reloaded").is_empty());
}

/// Run `round` until it finished within `HEAD_TIMEOUT` of its start, so
/// that no idle holder it opened can have been let go by the server in the
/// meantime (only a very slow machine needs a second round).
async fn while_holders_last<F, Fut>(mut round: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Vec<TcpStream>>,
{
    for _ in 0..3 {
        let start = Instant::now();
        let held = round().await;
        if start.elapsed() < HEAD_TIMEOUT {
            drop(held);
            return;
        }
    }
    panic!("no round finished within the head timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_of_the_slots() {
    let (_proxy, admin, _node) = proxy_allowing("127.0.0.0/8").await;
    while_holders_last(|| async {
        let held = idle_holders(&["127.0.0.2"], MAX_PER_SOURCE, admin).await;
        // One more from the same address is refused, with an answer...
        let answer = request_from("127.0.0.2", admin, "GET", "/status").await;
        let answer = answer.expect("an answer, not a close");
        assert_refusal(&answer, 429, "127.0.0.2");
        // ...other addresses are served as usual...
        let answer = request_from("127.0.0.3", admin, "GET", "/status").await;
        assert_eq!(answer.map(|a| a.status), Some(200));
        // ...and the capped address still gets /healthz.
        let answer = request_from("127.0.0.2", admin, "GET", "/healthz").await;
        assert_eq!(answer.map(|a| a.status), Some(200));
        held
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_slot_taken_requests_get_503_and_healthz_200() {
    let (_proxy, admin, _node) = proxy_allowing("127.0.0.0/8").await;
    let sources = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"];
    assert_eq!(sources.len() * MAX_PER_SOURCE, MAX_CONNECTIONS);
    while_holders_last(|| async {
        let held = idle_holders(&sources, MAX_PER_SOURCE, admin).await;
        let answer = request_from("127.0.0.5", admin, "GET", "/status").await;
        let answer = answer.expect("an answer, not a close");
        assert_refusal(&answer, 503, "busy");
        let answer = request_from("127.0.0.5", admin, "GET", "/healthz").await;
        assert_eq!(answer.map(|a| a.status), Some(200));
        held
    })
    .await;
    // Once the holders are gone, every route is served again; the server
    // notices their closes asynchronously.
    let deadline = Instant::now() + T;
    loop {
        let answer = request_from("127.0.0.5", admin, "GET", "/status").await;
        match answer.map(|a| a.status) {
            Some(200) => break,
            other => assert!(Instant::now() < deadline, "still refused: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Run `clients` copies of `client` until `stop`; each gets its index.
fn swarm<F, Fut>(clients: usize, stop: &CancellationToken, client: F) -> JoinSet<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut set = JoinSet::new();
    for i in 0..clients {
        let (stop, work) = (stop.clone(), client(i));
        set.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = work => {}
            }
        });
    }
    set
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_while_idle_connections_press_on_every_slot() {
    let (_proxy, admin, _node) = proxy_allowing("127.0.0.0/8").await;
    let stop = CancellationToken::new();
    let connected = Arc::new(AtomicUsize::new(0));
    // 64 idle holders over four addresses, each reconnecting (at most 20
    // times) when the server lets it go.
    let holders = swarm(MAX_CONNECTIONS, &stop, |i| {
        let connected = connected.clone();
        async move {
            let from = format!("127.0.0.{}", 1 + i % 4);
            for _ in 0..20 {
                let mut s = connect_from(&from, admin).await;
                connected.fetch_add(1, Ordering::Relaxed);
                let mut buf = [0u8; 64];
                // Held until the server closes it (or the test ends).
                let _ = s.read(&mut buf).await;
            }
        }
    });
    wait_until("holders connected", T, || {
        connected.load(Ordering::Relaxed) >= MAX_CONNECTIONS
    })
    .await;
    healthz_keeps_answering(admin, "idle holders").await;
    stop.cancel();
    holders.join_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_while_refused_clients_dribble() {
    let (_proxy, admin, _node) = proxy_allowing("127.0.0.1/32").await;
    let stop = CancellationToken::new();
    let connected = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let head = b"GET /status HTTP/1.1\r\nHost: localhost\r\n\r\n";
    // 100 clients outside admin.allow send a head a byte every 100 ms,
    // reconnecting (at most 20 times) when closed.
    let dribblers = swarm(100, &stop, |_| {
        let (connected, answered) = (connected.clone(), answered.clone());
        async move {
            for _ in 0..20 {
                let mut s = connect_from("127.0.0.2", admin).await;
                connected.fetch_add(1, Ordering::Relaxed);
                let mut buf = [0u8; 256];
                for byte in head.iter() {
                    let closed = tokio::select! {
                        n = s.read(&mut buf) => {
                            if let Ok(n @ 1..) = n {
                                answered.fetch_add(n, Ordering::Relaxed);
                            }
                            true
                        }
                        () = tokio::time::sleep(Duration::from_millis(100)) => {
                            s.write_all(&[*byte]).await.is_err()
                        }
                    };
                    if closed {
                        break;
                    }
                }
                // Pace the reconnects like the bytes.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    wait_until("dribblers connected", T, || {
        connected.load(Ordering::Relaxed) >= 100
    })
    .await;
    healthz_keeps_answering(admin, "refused dribblers").await;
    stop.cancel();
    dribblers.join_all().await;
    assert_eq!(
        answered.load(Ordering::Relaxed),
        0,
        "refused clients got bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_concurrent_reload_gets_an_answer_and_healthz_keeps_answering() {
    let (proxy, admin, _node) = proxy_allowing("127.0.0.1/32").await;
    let reloads: JoinSet<Option<Answer>> = (0..200)
        .map(|_| request_from("127.0.0.1", admin, "POST", "/reload"))
        .collect();
    healthz_keeps_answering(admin, "200 concurrent reloads").await;
    let answers = within("reload answers", T, reloads.join_all()).await;
    let mut ok = 0;
    for answer in answers {
        let answer = answer.expect("a reload closed without an answer");
        match answer.status {
            200 => ok += 1,
            422 => assert!(!answer.error().is_empty()),
            429 => assert_refusal(&answer, 429, "127.0.0.1"),
            503 => assert!(!answer.error().is_empty()),
            other => panic!("reload answered {other}: {}", answer.body),
        }
    }
    assert!(ok >= 1, "no reload ran");
    proxy
        .wait_count(|e| e["message"] == "reloaded", ok, T)
        .await;
}
