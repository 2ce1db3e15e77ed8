//! A backend that is the proxy itself: a reload that names one of the
//! instance's listeners is refused; one that only turns out to be ours at
//! run time (a port-0 listener named by its bound port, through a name) is
//! never dialled: the backend goes down at once, clients fail over, and no
//! chain of nested connections starts.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::admin_http::{admin_addr, backend, status};
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(10);

/// Pool `p` listening on `listen`, with an admin endpoint; `max_connections`
/// small so that a chain, if one started, would stay small too.
fn config(listen: &str, backends: &[(&str, String)]) -> String {
    let list: Vec<String> = backends
        .iter()
        .map(|(n, a)| format!("{{ name: {n}, addr: \"{a}\" }}"))
        .collect();
    format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: p\n    listen: \"{listen}\"\n    \
         max_connections: 64\n    backends: [{}]\n",
        list.join(", ")
    )
}

async fn echo_ok(addr: SocketAddr) {
    let mut c = within("connect", T, TcpStream::connect(addr))
        .await
        .unwrap();
    c.write_all(b"ping").await.unwrap();
    let mut b = [0u8; 4];
    within("echo", T, c.read_exact(&mut b)).await.unwrap();
    assert_eq!(&b, b"ping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_naming_our_own_listener_is_refused() {
    let node = Node::echo().await;
    let proxy = Proxy::start(&config("127.0.0.1:0", &[("a", node.addr.to_string())])).await;
    let addr = proxy.addr("p");
    let yaml = config(
        &addr.to_string(),
        &[
            ("a", node.addr.to_string()),
            ("me", format!("localhost:{}", addr.port())),
        ],
    );
    let outcome = proxy.reload(&yaml).await;
    assert_eq!(outcome["message"], "reload_failed", "{outcome}");
    let err = outcome["err"].as_str().unwrap();
    assert!(
        err.contains("pools[0].backends[1].addr") && err.contains("own listener"),
        "{err}"
    );
    echo_ok(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_turns_out_to_be_us_goes_down_without_a_chain() {
    let node = Node::echo().await;
    let proxy = Proxy::start(&config("127.0.0.1:0", &[("a", node.addr.to_string())])).await;
    let addr = proxy.addr("p");
    let admin = admin_addr(&proxy);
    // `127.0.0.1:0` keeps the bound port across the reload, and says
    // nothing at check time: only the running instance knows it is ours.
    let me = format!("localhost:{}", addr.port());
    let yaml = config(
        "127.0.0.1:0",
        &[("me", me.clone()), ("a", node.addr.to_string())],
    );
    assert_eq!(proxy.reload(&yaml).await["message"], "reloaded");
    // The new backend's first probe would be a client of ours: it is not
    // made, and the backend is taken out as a client connect would.
    let event = proxy.wait_event(|e| e["message"] == "self_loop", T).await;
    assert_eq!(event["backend"], "me", "{event}");
    assert_eq!(event["listener"], addr.to_string(), "{event}");
    let q = proxy.wait_event(|e| e["message"] == "quarantined", T).await;
    assert_eq!(q["reason"], "self_loop", "{q}");

    let s = status(admin).await;
    let b = backend(&s, "p", "me");
    assert_eq!(b["state"], "down", "{b}");
    assert_eq!(b["quarantine"]["reason"], "self_loop", "{b}");

    for _ in 0..5 {
        echo_ok(addr).await;
    }
    let served = proxy
        .wait_count(|e| e["message"] == "connected", 5, T)
        .await;
    assert!(
        served.iter().all(|e| e["backend"] == "a"),
        "every client went to the real node: {served:?}"
    );
    // Before the fix the probe alone set off a chain up to max_connections;
    // now not even the probe comes through us.
    let accepted = proxy.named("accepted").len();
    assert_eq!(accepted, 5, "the 5 clients, no probe, no chain");
    assert_eq!(proxy.named("self_loop").len(), 1, "logged once");
}
