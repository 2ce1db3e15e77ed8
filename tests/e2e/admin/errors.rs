//! Admin error answers: 404, 400, 405, 413, and stalled clients. The
//! connection bounds under load are in `admin/bounds.rs`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::admin_http::{backend, request, send, status};
use crate::support::admin_pool::two_echo;
use crate::support::within;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_pool_backend_or_path_is_404_with_a_json_error() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let cases = [
        ("/pools/nope/backends/a/quarantine?for=1m", "no pool nope"),
        (
            "/pools/p/backends/nope/quarantine?for=1m",
            "pool p has no backend nope; it has a, b",
        ),
        ("/pools/nope/backends/a/release", "no pool nope"),
        (
            "/pools/p/backends/nope/release",
            "pool p has no backend nope; it has a, b",
        ),
        (
            "/pools/p/backends/nope/shed?count=1",
            "pool p has no backend nope; it has a, b",
        ),
        ("/connections/12345/close", "no connection 12345"),
    ];
    for (path, want) in cases {
        let answer = request(admin, "POST", path).await;
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
        assert_eq!(answer.error(), want, "{path}");
    }
    let answer = request(admin, "GET", "/no/such/route").await;
    assert_eq!(answer.status, 404);
    assert!(!answer.error().is_empty());
    for (path, want) in [
        ("/connections?pool=nope", "no pool nope"),
        (
            "/connections?pool=p&backend=nope",
            "pool p has no backend nope; it has a, b",
        ),
        ("/connections?backend=nope", "no pool has a backend nope"),
    ] {
        let answer = request(admin, "GET", path).await;
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
        assert_eq!(answer.error(), want, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_connection_queries_ids_and_counts_are_400() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    for (method, path, want) in [
        ("GET", "/connections?limit=0", "bad limit"),
        ("GET", "/connections?limit=10001", "from 1 to 10000"),
        (
            "GET",
            "/connections?limit=184467440737095516160",
            "bad limit",
        ),
        ("GET", "/connections?client=10.0.0.0/40", "bad client"),
        ("GET", "/connections?client=%ff", "bad client"),
        ("GET", "/connections?nope=1", "unknown parameter"),
        ("POST", "/connections/-1/close", "bad connection id"),
        ("POST", "/connections/%ff/close", "not valid UTF-8"),
        ("POST", "/pools/p/backends/a/shed", "missing count"),
        ("POST", "/pools/p/backends/a/shed?count=0", "bad count"),
        ("POST", "/pools/p/backends/a/shed?count=1e3", "bad count"),
    ] {
        let answer = request(admin, method, path).await;
        assert_eq!(answer.status, 400, "{path}: {}", answer.body);
        assert!(answer.error().contains(want), "{path}: {}", answer.body);
    }
    let listing = request(admin, "GET", "/connections").await;
    assert_eq!(listing.status, 200, "{}", listing.body);
    assert_eq!(listing.json()["total"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_or_missing_duration_is_400_and_changes_nothing() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    for query in [
        "",
        "?for=",
        "?for=soon",
        "?for=0s",
        "?for=-5m",
        "?window=10m",
    ] {
        let path = format!("/pools/p/backends/a/quarantine{query}");
        let answer = request(admin, "POST", &path).await;
        assert_eq!(answer.status, 400, "{path}: {}", answer.body);
        assert!(
            answer.error().contains("duration"),
            "{path}: {}",
            answer.body
        );
    }
    assert_eq!(backend(&status(admin).await, "p", "a")["state"], "healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_method_is_405_with_allow() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let cases = [
        ("POST", "/status", "GET, HEAD"),
        ("DELETE", "/metrics", "GET, HEAD"),
        ("GET", "/reload", "POST"),
        ("GET", "/pools/p/backends/a/quarantine?for=1m", "POST"),
        ("PUT", "/pools/p/backends/a/release", "POST"),
        ("GET", "/pools/p/backends/a/shed?count=1", "POST"),
        ("GET", "/connections/1/close", "POST"),
        ("POST", "/connections", "GET, HEAD"),
    ];
    for (method, path, allow) in cases {
        let answer = request(admin, method, path).await;
        assert_eq!(answer.status, 405, "{method} {path}: {}", answer.body);
        assert_eq!(answer.header("allow"), Some(allow), "{method} {path}");
        assert!(!answer.error().is_empty());
    }
    assert_eq!(backend(&status(admin).await, "p", "a")["state"], "healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_body_is_413_and_nothing_runs() {
    let (proxy, admin, _nodes) = two_echo(false).await;
    // Declared and never sent: the answer must not wait for it.
    let stream = TcpStream::connect(admin).await.unwrap();
    let raw = "POST /reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000\r\n\r\n";
    let answer = send(stream, raw).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert!(answer.error().contains("body"), "{}", answer.body);
    assert!(proxy.named("reloaded").is_empty());
    assert!(proxy.named("reload_failed").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_does_not_block_other_admin_clients() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(admin).await.unwrap();
        s.write_all(b"GET /sta").await.unwrap();
        stalled.push(s);
    }
    for _ in 0..5 {
        let answer = within(
            "status beside stalled clients",
            Duration::from_secs(3),
            async { request(admin, "GET", "/status").await },
        )
        .await;
        assert_eq!(answer.status, 200);
    }
    // The server gives up on the stalled heads (header read timeout).
    for mut s in stalled {
        let mut buf = Vec::new();
        let read = within(
            "stalled client closed",
            Duration::from_secs(15),
            s.read_to_end(&mut buf),
        );
        // EOF or a reset both mean the server let go.
        let _ = read.await;
    }
}
