use std::future::Future;

use tokio::net::TcpListener;

use super::*;
use crate::sim::simnode::SimNode;

const LTC: Magic = [0xfb, 0xc0, 0xb6, 0xdb];
const SHORT: Duration = Duration::from_millis(300);

/// A one-connection node running `script` on the accepted stream.
async fn fake_node<F, Fut>(script: F) -> String
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        if let Ok((stream, _)) = listener.accept().await {
            script(stream).await;
        }
    });
    addr
}

/// Wait for the probe's first bytes, send `reply`, hold until the probe closes.
async fn replying(reply: Vec<u8>) -> String {
    fake_node(|mut s| async move {
        let mut buf = [0u8; 1024];
        // The probe may hang up before all of `reply` is written.
        if s.read(&mut buf).await.unwrap_or(0) > 0 && s.write_all(&reply).await.is_ok() {
            while s.read(&mut buf).await.unwrap_or(0) > 0 {}
        }
    })
    .await
}

fn version_at(magic: Magic, height: i32) -> Vec<u8> {
    let params = VersionParams {
        services: 1,
        timestamp: 0,
        receiver: SocketAddr::from(([127, 0, 0, 1], 1)),
        sender: SocketAddr::from(([127, 0, 0, 1], 2)),
        nonce: 42,
        user_agent: "/Satoshi:27.0.0/".into(),
        start_height: height,
    };
    wire::encode(magic, "version", &wire::version_payload(&params))
}

fn assert_unknown(report: &Report, detail: &str) {
    assert_eq!(report.verdict, Verdict::Unknown, "{report:?}");
    assert_eq!(report.height, None);
    assert!(
        report.detail.contains(detail),
        "{report:?} lacks {detail:?}"
    );
}

#[tokio::test]
async fn healthy_with_height_from_sim_node() {
    let node = SimNode::start("127.0.0.1:0".parse().unwrap(), LTC, 2_812_345)
        .await
        .unwrap();
    let report = probe(&node.addr().to_string(), LTC, SHORT).await;
    let agent = format!("/pin-proxy-simnode:{}/", env!("CARGO_PKG_VERSION"));
    let facts = NodeFacts::p2p(1, 70016, &agent, 2_812_345);
    assert_eq!(
        report,
        Report::with_height(Verdict::Healthy, 2_812_345, "height 2812345").with_node(facts)
    );
}

/// A `version` with these services, protocol and user agent.
fn version_of(services: u64, protocol: i32, user_agent: &[u8]) -> Vec<u8> {
    let mut payload = wire::version_payload(&VersionParams {
        services,
        timestamp: 0,
        receiver: SocketAddr::from(([127, 0, 0, 1], 1)),
        sender: SocketAddr::from(([127, 0, 0, 1], 2)),
        nonce: 42,
        user_agent: String::new(),
        start_height: 9,
    });
    // Our own announces 70016 and an empty user agent at byte 80.
    payload[..4].copy_from_slice(&protocol.to_le_bytes());
    let mut agent = Vec::new();
    wire::put_var_int(&mut agent, user_agent.len() as u64);
    agent.extend_from_slice(user_agent);
    payload.splice(80..81, agent);
    wire::encode(LTC, "version", &payload)
}

#[tokio::test]
async fn reads_services_protocol_and_user_agent() {
    let reply = version_of(0x0100_0449, 70016, b"/LitecoinCore:0.21.2.1/");
    let report = probe(&replying(reply).await, LTC, SHORT).await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    let facts = NodeFacts::p2p(0x0100_0449, 70016, "/LitecoinCore:0.21.2.1/", 9);
    assert_eq!(report.node, Some(facts));
}

#[tokio::test]
async fn a_hostile_user_agent_is_cut_and_made_printable() {
    let mut agent = b"/Evil:\x1b[2J\xff/".to_vec();
    agent.extend(vec![b'x'; 10_000]);
    let report = probe(&replying(version_of(1, 70016, &agent)).await, LTC, SHORT).await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    let Some(NodeFacts::P2p(facts)) = report.node else {
        panic!("{report:?}");
    };
    assert!(facts.user_agent.starts_with("/Evil:?[2J?/xxx"), "{facts:?}");
    assert_eq!(facts.user_agent.len(), crate::pool::node::MAX_USER_AGENT);
}

#[tokio::test]
async fn sends_our_version_then_verack_and_closes() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let addr = fake_node(|mut s| async move {
        let mut d = Decoder::new(LTC);
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            d.feed(&buf[..n]);
            while let Some(m) = d.next_message().unwrap() {
                if m.command == "version" {
                    s.write_all(&version_at(LTC, 7)).await.unwrap();
                }
                got.push(m);
            }
        }
        tx.send(got).unwrap();
    })
    .await;
    let report = probe(&addr, LTC, Duration::from_secs(2)).await;
    assert_eq!(report.height, Some(7));
    let got = rx.await.unwrap();
    let commands: Vec<&str> = got.iter().map(|m| m.command.as_str()).collect();
    assert_eq!(commands, ["version", "verack"]);
    let ours = Version::parse(&got[0].payload).unwrap();
    assert_eq!(ours.version, 70016);
    assert_eq!(ours.services, 0);
    assert_eq!(
        ours.user_agent,
        format!("/pin-proxy:{}/", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(ours.start_height, 0);
    assert_eq!(ours.relay, Some(false));
}

#[tokio::test]
async fn skips_messages_before_version() {
    let mut reply = wire::encode(LTC, "wtxidrelay", &[]);
    reply.extend(wire::encode(LTC, "sendaddrv2", &[]));
    reply.extend(wire::encode(LTC, "verack", &[]));
    reply.extend(version_at(LTC, 100));
    let report = probe(&replying(reply).await, LTC, SHORT).await;
    assert_eq!(report.verdict, Verdict::Healthy);
    assert_eq!(report.height, Some(100));
}

#[tokio::test]
async fn refused_is_down() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let report = probe(&addr, LTC, SHORT).await;
    assert_eq!(report, Report::new(Verdict::Down, "refused"));
}

#[tokio::test]
async fn unresolvable_is_down() {
    for addr in ["no-port-here", "node.invalid:9333"] {
        let report = probe(addr, LTC, Duration::from_secs(2)).await;
        assert_eq!(report.verdict, Verdict::Down, "{report:?}");
        assert!(report.detail.starts_with("resolve"), "{report:?}");
    }
}

#[tokio::test]
async fn silent_node_is_unknown_after_timeout() {
    let addr = fake_node(|mut s| async move {
        let mut buf = [0u8; 1024];
        while s.read(&mut buf).await.unwrap_or(0) > 0 {}
    })
    .await;
    let started = Instant::now();
    let report = probe(&addr, LTC, SHORT).await;
    assert_unknown(&report, "no version within 300ms");
    let took = started.elapsed();
    assert!(took >= SHORT && took < SHORT * 5, "took {took:?}");
}

#[tokio::test]
async fn wrong_magic_is_unknown() {
    let bitcoin = [0xf9, 0xbe, 0xb4, 0xd9];
    let report = probe(&replying(version_at(bitcoin, 5)).await, LTC, SHORT).await;
    assert_unknown(&report, "wrong magic f9beb4d9 (expected fbc0b6db)");
}

#[tokio::test]
async fn garbage_is_unknown() {
    let http = b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec();
    assert_unknown(
        &probe(&replying(http).await, LTC, SHORT).await,
        "wrong magic",
    );
    let mut bad_command = LTC.to_vec();
    bad_command.extend_from_slice(&[0xff; 20]);
    let report = probe(&replying(bad_command).await, LTC, SHORT).await;
    assert_unknown(&report, "garbage command");
}

#[tokio::test]
async fn oversize_length_is_unknown() {
    let mut header = wire::encode(LTC, "version", &[]);
    header[16..20].copy_from_slice(&(32u32 << 20).to_le_bytes());
    let report = probe(&replying(header).await, LTC, SHORT).await;
    assert_unknown(&report, "oversized version payload");
}

#[tokio::test]
async fn bad_checksum_is_unknown() {
    let mut msg = version_at(LTC, 5);
    msg[20] ^= 0xff;
    let report = probe(&replying(msg).await, LTC, SHORT).await;
    assert_unknown(&report, "bad checksum on version");
}

fn assert_down(report: &Report, detail: &str) {
    assert_eq!(report.verdict, Verdict::Down, "{report:?}");
    assert_eq!(report.height, None);
    assert!(
        report.detail.contains(detail),
        "{report:?} lacks {detail:?}"
    );
}

#[tokio::test]
async fn truncated_then_closed_is_down() {
    let msg = version_at(LTC, 5);
    let addr = fake_node(move |mut s| async move {
        let mut buf = [0u8; 1024];
        if s.read(&mut buf).await.unwrap_or(0) > 0 {
            s.write_all(&msg[..40]).await.unwrap();
        }
    })
    .await;
    let report = probe(&addr, LTC, SHORT).await;
    assert_down(&report, "closed mid-message: truncated message: 40 of");
}

/// What a node that banned our address does: accept, close at once.
#[tokio::test]
async fn accepted_then_closed_at_once_is_down() {
    let addr = fake_node(|s| async move { drop(s) }).await;
    let report = probe(&addr, LTC, SHORT).await;
    assert_down(&report, "");
    assert!(
        ["closed before version", "read: ", "send version: "]
            .iter()
            .any(|d| report.detail.starts_with(d)),
        "{report:?}"
    );
}

#[tokio::test]
async fn accepted_then_reset_is_down() {
    let addr = fake_node(|s| async move {
        // SO_LINGER 0: close sends a reset.
        socket2::SockRef::from(&s)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        let mut s = s;
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf).await;
    })
    .await;
    let report = probe(&addr, LTC, SHORT).await;
    assert_down(&report, "reset");
}

#[tokio::test]
async fn an_echo_is_unknown() {
    let addr = fake_node(|s| async move {
        let (mut rd, mut wr) = s.into_split();
        let _ = tokio::io::copy(&mut rd, &mut wr).await;
    })
    .await;
    let report = probe(&addr, LTC, SHORT).await;
    assert_unknown(&report, "our own version came back");
}

#[tokio::test]
async fn negative_height_is_unknown() {
    let report = probe(&replying(version_at(LTC, -1)).await, LTC, SHORT).await;
    assert_unknown(&report, "negative start height -1");
    // What it said of itself is kept.
    let facts = NodeFacts::p2p(1, 70016, "/Satoshi:27.0.0/", -1);
    assert_eq!(report.node, Some(facts));
}

#[tokio::test]
async fn endless_chatter_stops_at_the_read_budget() {
    let ping = wire::encode(LTC, "ping", &1u64.to_le_bytes());
    let chatter: Vec<u8> = ping
        .iter()
        .copied()
        .cycle()
        .take(ping.len() * 5000)
        .collect();
    let report = probe(&replying(chatter).await, LTC, Duration::from_secs(5)).await;
    assert_unknown(&report, "no version in the first 65536 bytes");
}
