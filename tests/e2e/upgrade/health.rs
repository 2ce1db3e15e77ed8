//! The health state goes over with the connections: a manual 10-minute
//! window (same end, same reason), strikes (the escalation level), and a
//! quarantined backend keeps getting no clients in the new process; a
//! request still unanswered stays owed.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::admin_http::{backend, request};
use crate::support::admin_wait::wait_status;
use crate::support::blockbook::RestTwin;
use crate::support::live_on;
use crate::support::nodes::{Node, refused_addr};
use crate::support::proxy::Proxy;
use crate::support::stall::config_with;
use crate::support::upgrade::{Bin, T, config, status, upgrade_ok};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_and_strikes_survive_an_upgrade() {
    let (a, b) = (Node::echo().await, Node::echo().await);
    let dead = refused_addr();
    let bin = Bin::new();
    let yaml = config(&[a.addr, b.addr, dead], "").replace(
        "health: { probe: connect, interval: 1s }",
        "health: { probe: connect, interval: 100ms, fall: 1 }\n    \
         quarantine: { base: 1h, max: 8h, failures: 3 }",
    );
    let proxy = Proxy::start_from(bin.path(), &yaml, &[]).await;
    let admin = proxy.admin();
    // n1 by hand for 10 minutes; n2 (refused) taken out by its probes.
    let answer = request(admin, "POST", "/pools/p/backends/n1/quarantine?for=10m").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    wait_until_down(&proxy).await;
    let before = status(&proxy).await;
    let (n1, n2) = (
        backend(&before, "p", "n1").clone(),
        backend(&before, "p", "n2").clone(),
    );
    assert_eq!(n1["quarantine"]["reason"], "manual");
    assert_eq!(n2["strikes"], 1);

    let done = upgrade_ok(&proxy).await;
    assert_eq!(done["generation"], 1);
    let after = status(&proxy).await;
    assert_eq!(after["pid"], done["pid"]);
    let (m1, m2) = (backend(&after, "p", "n1"), backend(&after, "p", "n2"));
    assert_eq!(m1["state"], "quarantined");
    assert_eq!(
        m1["quarantine"], n1["quarantine"],
        "the same window, to the millisecond"
    );
    assert_eq!(m2["state"], "down");
    assert_eq!(m2["strikes"], n2["strikes"], "the escalation level");
    assert_eq!(m2["quarantine"]["until"], n2["quarantine"]["until"]);
    assert_eq!(m1["last_probe"]["outcome"], n1["last_probe"]["outcome"]);

    // The new process sends nobody to the quarantined ones.
    let before_clients = proxy.events().len();
    let closed_before = proxy.named("closed").len();
    for i in 0..6u8 {
        let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
        c.write_all(&[i]).await.unwrap();
        let mut got = [0u8; 1];
        c.read_exact(&mut got).await.unwrap();
    }
    // Their lines are written as they close: wait for all six.
    proxy
        .wait_count(|e| e["message"] == "closed", closed_before + 6, T)
        .await;
    let events = proxy.events()[before_clients..].to_vec();
    let connected: Vec<_> = events
        .iter()
        .filter(|e| e["message"] == "connected")
        .map(|e| e["backend"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(connected, vec!["n0"; 6], "{events:?}");
    assert!(live_on(&events, "n1").is_empty());
}

/// Until n2's probes have taken it out and n1 has been probed once (so the
/// last probe compared across the upgrade is one both processes report).
async fn wait_until_down(proxy: &Proxy) {
    let what = "n2 down and n1 probed";
    wait_status(proxy.admin(), what, T, |st| {
        let down = backend(st, "p", "n2")["state"] == "down";
        (down && !backend(st, "p", "n1")["last_probe"].is_null()).then_some(())
    })
    .await;
}

/// What a node told its probe, and that it cannot serve the pool's
/// clients, go over too: with the Blockbook of the other coin no longer
/// answering (nothing the new process probes could tell it), the new
/// process still shows its `node` and keeps it `unsuitable`, and sends it
/// no client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_facts_and_an_unsuitable_node_survive_an_upgrade() {
    let (a, b) = (Node::echo().await, Node::echo().await);
    let (a_api, b_api) = (RestTwin::start().await, RestTwin::start().await);
    b_api.set_coin("Bitcoin");
    let bin = Bin::new();
    let yaml = config(&[a.addr, b.addr], "")
        .replace(
            "health: { probe: connect, interval: 1s }",
            "health: { probe: blockbook, interval: 100ms, timeout: 300ms }\n    \
             quarantine: { base: 1h, max: 1h, failures: 3 }",
        )
        .replace(
            &format!("addr: \"{}\" }}", a.addr),
            &format!("addr: \"{}\", probe_url: \"{}\" }}", a.addr, a_api.url()),
        )
        .replace(
            &format!("addr: \"{}\" }}", b.addr),
            &format!("addr: \"{}\", probe_url: \"{}\" }}", b.addr, b_api.url()),
        );
    let proxy = Proxy::start_from(bin.path(), &yaml, &[]).await;
    let before = wait_status(proxy.admin(), "n1 unsuitable, n0 healthy", T, |st| {
        let judged = backend(st, "p", "n1")["state"] == "unsuitable"
            && backend(st, "p", "n0")["state"] == "healthy";
        judged.then(|| st.clone())
    })
    .await;
    let n1 = backend(&before, "p", "n1").clone();
    assert_eq!(n1["node"]["coin"], "Bitcoin", "{n1}");
    assert_eq!(n1["quarantine"]["reason"], "unsuitable");

    b_api.go_away();
    upgrade_ok(&proxy).await;
    let after = status(&proxy).await;
    let m1 = backend(&after, "p", "n1");
    assert_eq!(m1["state"], "unsuitable", "{m1}");
    assert_eq!(m1["node"], n1["node"], "the node's facts, as told before");
    assert_eq!(m1["quarantine"], n1["quarantine"]);
    assert_eq!(backend(&after, "p", "n0")["node"]["coin"], "Litecoin");

    let connected_before = proxy.named("connected").len();
    for i in 0..4u8 {
        let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
        c.write_all(&[i]).await.unwrap();
        let mut got = [0u8; 1];
        c.read_exact(&mut got).await.unwrap();
    }
    // Their lines may trail the echo: wait for all four.
    proxy
        .wait_count(|e| e["message"] == "connected", connected_before + 4, T)
        .await;
    let connected: Vec<String> = proxy.named("connected")[connected_before..]
        .iter()
        .map(|e| e["backend"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(connected, vec!["n0"; 4]);
}

/// A request a node left unanswered before an upgrade still counts after
/// it (`stall_rule: request`): the node is `stalled` in the new process,
/// its silence counted from the request, not from the handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_owed_before_an_upgrade_is_still_owed_after_it() {
    // `a` reads and never answers; `b` echoes.
    let a = Node::start(|mut s: TcpStream| async move {
        let mut buf = [0u8; 1024];
        while let Ok(1..) = s.read(&mut buf).await {}
    })
    .await;
    let b = Node::echo().await;
    let bin = Bin::new();
    let yaml = config_with(a.addr, b.addr, "stall_timeout: 3s, stall_rule: request");
    let proxy = Proxy::start_from(bin.path(), &yaml, &[]).await;
    // Least used first: the first client is `a`'s, the second `b`'s.
    let mut on_a = TcpStream::connect(proxy.addr("p")).await.unwrap();
    proxy
        .wait_event(|e| e["message"] == "connected" && e["backend"] == "a", T)
        .await;
    let mut on_b = TcpStream::connect(proxy.addr("p")).await.unwrap();
    proxy
        .wait_event(|e| e["message"] == "connected" && e["backend"] == "b", T)
        .await;
    // `b` keeps answering, so `a`'s silence is `a`'s own.
    tokio::spawn(async move {
        let mut byte = [0u8; 1];
        while on_b.write_all(b"?").await.is_ok() && on_b.read_exact(&mut byte).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    on_a.write_all(b"?").await.unwrap();

    upgrade_ok(&proxy).await;
    assert!(
        proxy.named("quarantined").is_empty(),
        "judged before the upgrade: the test proves nothing"
    );
    let taken = proxy
        .wait_event(|e| e["message"] == "quarantined" && e["backend"] == "a", T)
        .await;
    assert_eq!(taken["reason"], "stalled", "{taken}");
    drop(on_a);
}
