//! Upgrades that must change nothing: a broken config, a binary that exits
//! at once, one that hangs, one that refuses the handover format, and a
//! second upgrade while one runs. Each time the old process keeps serving
//! its connections (bytes still flow both ways) and new clients, answers
//! 422, `pin-proxy upgrade` exits 1, and `upgrade_failed` says why.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::admin_http::request;
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::upgrade::{
    Bin, T, config, echoes, exited, status, upgrade, upgrade_ok, wait_exited,
};
use crate::support::within;

/// A proxy started from its own copy of the binary, one echo backend and
/// one spliced client.
async fn serving(extra: &str) -> (Proxy, Bin, Node, TcpStream) {
    let node = Node::echo().await;
    let bin = Bin::new();
    let proxy = Proxy::start_from(bin.path(), &config(&[node.addr], extra), &[]).await;
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    echoes(&mut c, b"before").await;
    (proxy, bin, node, c)
}

/// The upgrade failed and changed nothing: the CLI said so, the event
/// names `reason`, the old process serves its client and new ones, and
/// once `fix` has put things right a real upgrade still works.
async fn failed_and_nothing_changed(
    proxy: &Proxy,
    client: &mut TcpStream,
    reason: &str,
    fix: impl FnOnce(),
) {
    let (code, _, err) = upgrade(proxy).await;
    assert_eq!(code, Some(1), "{err}");
    let event = proxy
        .wait_event(|e| e["message"] == "upgrade_failed", T)
        .await;
    let why = event["reason"].as_str().unwrap();
    assert!(why.contains(reason), "reason {why:?} should say {reason:?}");
    assert!(err.contains(reason), "the CLI says why: {err}");
    let st = status(proxy).await;
    assert_eq!(st["generation"], 0);
    assert_eq!(st["pid"], proxy.pid());
    echoes(client, b"still spliced").await;
    let mut newcomer = TcpStream::connect(proxy.addr("p")).await.unwrap();
    echoes(&mut newcomer, b"new client").await;
    assert!(
        proxy
            .named("closed")
            .iter()
            .all(|e| e["reason"] == "client_closed")
    );

    fix();
    let done = upgrade_ok(proxy).await;
    assert_eq!(done["generation"], 1);
    echoes(client, b"after the real upgrade").await;
    wait_exited(proxy.pid()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_config_fails_the_upgrade_and_changes_nothing() {
    let (proxy, _bin, _node, mut c) = serving("").await;
    let path = proxy.config_path().to_owned();
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, "pools: [ { name: BAD } ]\n").unwrap();
    // The new process rejects the file and exits 2, before it connects.
    failed_and_nothing_changed(
        &proxy,
        &mut c,
        "exit status: 2: it found the config invalid",
        || {
            std::fs::write(&path, good).unwrap();
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_that_exits_at_once_fails_the_upgrade_and_changes_nothing() {
    let (proxy, bin, _node, mut c) = serving("").await;
    bin.install_script("#!/bin/sh\nexit 0\n");
    failed_and_nothing_changed(&proxy, &mut c, "exited", || bin.install_binary()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_that_hangs_fails_the_upgrade_after_upgrade_timeout() {
    let (proxy, bin, _node, mut c) = serving("upgrade_timeout: 1s\n").await;
    let pidfile = bin.path().with_extension("pid");
    bin.install_script(&format!(
        "#!/bin/sh\necho $$ > {}\nexec sleep 600\n",
        pidfile.display()
    ));
    failed_and_nothing_changed(&proxy, &mut c, "within 1s", || bin.install_binary()).await;
    let hung: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(exited(hung), "the hung process was killed");
}

/// A build that cannot read the running one's handover format refuses
/// before anything moves. Played by a script that speaks the first step
/// of the protocol: it reads the offer and answers REFUSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_refuses_the_format_changes_nothing() {
    if !crate::support::litecoind::peers_available(&["python3"]) {
        return;
    }
    let (proxy, bin, _node, mut c) = serving("").await;
    bin.install_script(
        "#!/usr/bin/env python3\n\
         import os, socket\n\
         s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n\
         s.connect('\\0' + os.environ['PIN_PROXY_UPGRADE'])\n\
         offer = s.recv(65536)\n\
         assert offer[2:].startswith(b'pin-proxy handover'), offer\n\
         s.send(b'R\\0handover format 1 offered, this build reads only format 2')\n\
         s.recv(1)\n",
    );
    failed_and_nothing_changed(&proxy, &mut c, "reads only format 2", || {
        bin.install_binary();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_upgrade_while_one_runs_is_refused() {
    let (proxy, bin, _node, mut c) = serving("upgrade_timeout: 3s\n").await;
    bin.install_script("#!/bin/sh\nexec sleep 600\n");
    let admin = proxy.admin();
    let first = tokio::spawn(async move { request_long(admin).await });
    proxy
        .wait_event(|e| e["message"] == "upgrade_started", T)
        .await;
    let second = request(admin, "POST", "/upgrade").await;
    assert_eq!(second.status, 422, "{}", second.body);
    assert!(
        second.error().contains("already running"),
        "{}",
        second.body
    );
    let (code, _) = first.await.unwrap();
    assert_eq!(code, 422);
    echoes(&mut c, b"still spliced").await;
    bin.install_binary();
    assert_eq!(upgrade_ok(&proxy).await["generation"], 1);
}

/// `POST /upgrade`, waiting as long as an upgrade may take.
async fn request_long(admin: std::net::SocketAddr) -> (u16, String) {
    let mut s = TcpStream::connect(admin).await.unwrap();
    s.write_all(
        b"POST /upgrade HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut answer = String::new();
    within(
        "the upgrade's answer",
        Duration::from_secs(60),
        s.read_to_string(&mut answer),
    )
    .await
    .unwrap();
    let code = answer[9..12].parse().unwrap();
    (code, answer)
}
