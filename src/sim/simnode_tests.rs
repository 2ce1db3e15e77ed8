//! Unit tests of the simulated node: its handshake, heights and scripted faults.

use tokio::time::timeout;

use super::*;
use crate::pool::report::{Report, Verdict};
use crate::probe::p2p::probe;
use crate::probe::wire::{Message, Version};

const REGTEST: Magic = [0xfa, 0xbf, 0xb5, 0xda];
const WAIT: Duration = Duration::from_secs(2);

async fn node(height: u64) -> SimNode {
    SimNode::start("127.0.0.1:0".parse().unwrap(), REGTEST, height)
        .await
        .unwrap()
}

async fn probe_node(node: &SimNode) -> Report {
    probe(
        &node.addr().to_string(),
        REGTEST,
        Duration::from_millis(500),
    )
    .await
}

/// Read until one message arrives (or fail after `WAIT`).
async fn next(stream: &mut TcpStream, decoder: &mut Decoder) -> Message {
    let mut buf = [0u8; 1024];
    loop {
        if let Some(msg) = decoder.next_message().unwrap() {
            return msg;
        }
        let n = timeout(WAIT, stream.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "node closed");
        decoder.feed(&buf[..n]);
    }
}

/// A raw client that completed the handshake.
async fn client(node: &SimNode) -> (TcpStream, Decoder) {
    let mut stream = TcpStream::connect(node.addr()).await.unwrap();
    let params = VersionParams {
        services: 0,
        timestamp: 0,
        receiver: node.addr(),
        sender: stream.local_addr().unwrap(),
        nonce: 1,
        user_agent: "/test/".into(),
        start_height: 0,
    };
    let hello = wire::encode(REGTEST, "version", &wire::version_payload(&params));
    stream.write_all(&hello).await.unwrap();
    let mut decoder = Decoder::new(REGTEST);
    let version = next(&mut stream, &mut decoder).await;
    assert_eq!(version.command, "version");
    let version = Version::parse(&version.payload).unwrap();
    assert_eq!(version.start_height, i32::try_from(node.height()).unwrap());
    assert!(version.user_agent.starts_with("/pin-proxy-simnode:"));
    assert_eq!(next(&mut stream, &mut decoder).await.command, "verack");
    (stream, decoder)
}

async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let give_up = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(tokio::time::Instant::now() < give_up, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn handshake_reports_the_height() {
    let node = node(1000).await;
    let report = probe_node(&node).await;
    assert_eq!(
        (report.verdict, report.height),
        (Verdict::Healthy, Some(1000))
    );
    node.set_height(1010);
    assert_eq!(node.height(), 1010);
    assert_eq!(probe_node(&node).await.height, Some(1010));
    assert_eq!(node.accepted(), 2);
}

/// The heights named by an `inv` of block entries.
fn inv_heights(msg: &Message) -> Vec<u64> {
    assert_eq!(msg.command, "inv");
    let mut rest = &msg.payload[..];
    let count = wire::take_var_int(&mut rest, "inv").unwrap();
    let entries: Vec<&[u8]> = rest.chunks(36).collect();
    assert_eq!(entries.len() as u64, count);
    entries
        .iter()
        .map(|e| {
            assert_eq!(e[..4], 2u32.to_le_bytes(), "MSG_BLOCK");
            u64::from_le_bytes(e[4..12].try_into().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn announces_each_new_block_to_connected_peers() {
    let node = node(100).await;
    let (mut stream, mut decoder) = client(&node).await;
    node.set_height(103);
    let msg = next(&mut stream, &mut decoder).await;
    assert_eq!(inv_heights(&msg), [101, 102, 103]);
    node.set_height(104);
    let msg = next(&mut stream, &mut decoder).await;
    assert_eq!(inv_heights(&msg), [104]);
}

#[tokio::test]
async fn answers_ping_and_holds_the_connection() {
    let node = node(5).await;
    let (mut stream, mut decoder) = client(&node).await;
    let nonce = 0xdead_beef_u64.to_le_bytes();
    let ping = wire::encode(REGTEST, "ping", &nonce);
    stream.write_all(&ping).await.unwrap();
    let pong = next(&mut stream, &mut decoder).await;
    assert_eq!(
        (pong.command.as_str(), &pong.payload[..]),
        ("pong", &nonce[..])
    );
    // Other messages are ignored and the connection stays open.
    stream
        .write_all(&wire::encode(REGTEST, "sendheaders", &[]))
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let idle = timeout(Duration::from_millis(100), stream.read(&mut buf)).await;
    assert!(idle.is_err(), "expected silence, got {idle:?}");
    assert_eq!(node.live(), 1);
    drop(stream);
    wait_until("peer close frees the connection", || node.live() == 0).await;
}

#[tokio::test]
async fn quiet_peer_is_held_open() {
    let node = node(5).await;
    let mut stream = TcpStream::connect(node.addr()).await.unwrap();
    wait_until("accepted", || node.live() == 1).await;
    let mut buf = [0u8; 64];
    let idle = timeout(Duration::from_millis(200), stream.read(&mut buf)).await;
    assert!(
        idle.is_err(),
        "expected an open, quiet connection, got {idle:?}"
    );
    assert_eq!(node.live(), 1);
}

#[tokio::test]
async fn stop_closes_live_connections_and_refuses_new_ones() {
    let node = node(5).await;
    let (mut a, _) = client(&node).await;
    let (mut b, _) = client(&node).await;
    assert_eq!(node.live(), 2);
    node.stop().await;
    assert!(!node.is_running());
    assert_eq!(node.live(), 0);
    for stream in [&mut a, &mut b] {
        let mut buf = [0u8; 64];
        let read = timeout(WAIT, stream.read(&mut buf)).await.unwrap();
        assert!(matches!(read, Ok(0) | Err(_)), "still open: {read:?}");
    }
    let err = TcpStream::connect(node.addr()).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    assert_eq!(probe_node(&node).await.verdict, Verdict::Down);
    node.stop().await; // twice is fine
}

#[tokio::test]
async fn restart_listens_on_the_same_port() {
    let node = node(42).await;
    let addr = node.addr();
    let _held = client(&node).await;
    node.stop().await;
    node.restart().await.unwrap();
    node.restart().await.unwrap(); // already running: nothing happens
    assert!(node.is_running());
    assert_eq!(node.addr(), addr);
    let report = probe_node(&node).await;
    assert_eq!(
        (report.verdict, report.height),
        (Verdict::Healthy, Some(42))
    );
    assert_eq!(node.accepted(), 2, "counts since start, across restarts");
}

#[tokio::test]
async fn silent_mode_accepts_but_never_answers() {
    let node = node(9).await;
    node.set_silent(true);
    let report = probe_node(&node).await;
    assert_eq!(report.verdict, Verdict::Unknown, "{report:?}");
    assert_eq!(node.accepted(), 1);
    node.set_silent(false);
    assert_eq!(probe_node(&node).await.height, Some(9));
}
