use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::config::Network;
use crate::probe::chain::Proving;
use crate::probe::p2p::probe_proving;
use crate::probe::pow::{Retarget, params};
use crate::probe::wire::{Decoder, Magic, VersionParams};
use crate::sim::simchain::{SimChain, mine};
use crate::sim::simnode::SimNode;

const REGTEST: Magic = [0xfa, 0xbf, 0xb5, 0xda];
// Mining and checking 2500 scrypt headers takes seconds on a loaded machine.
const WAIT: Duration = Duration::from_secs(20);

fn chain() -> Chain {
    Chain::new(params(Network::LitecoinRegtest).unwrap())
}

async fn node(height: u64) -> SimNode {
    SimNode::start("127.0.0.1:0".parse().unwrap(), REGTEST, height)
        .await
        .unwrap()
}

async fn prove_at(addr: &str, chain: &Chain, timeout: Duration) -> Report {
    let wanted = |_: u64| true;
    let proving = Proving {
        chain,
        wanted: &wanted,
    };
    probe_proving(addr, REGTEST, timeout, Some(proving)).await
}

use crate::pool::report::Report;

#[tokio::test]
async fn an_honest_node_proves_its_height_and_the_next_proof_resumes() {
    let chain = chain();
    let n = node(2500).await;
    let report = prove_at(&n.addr().to_string(), &chain, WAIT).await;
    assert_eq!(report.height, Some(2500));
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
    assert_eq!(chain.tip().height, 2500);
    n.set_height(2510);
    let report = prove_at(&n.addr().to_string(), &chain, WAIT).await;
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
    assert_eq!(chain.tip().height, 2510);
    // Same height again: the node still shows the header at its tip.
    let report = prove_at(&n.addr().to_string(), &chain, WAIT).await;
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
}

#[tokio::test]
async fn a_node_that_serves_no_headers_contradicts_its_claim() {
    let chain = chain();
    let liar = node(2_000_000_000).await;
    liar.set_headers_to(0);
    let report = prove_at(&liar.addr().to_string(), &chain, WAIT).await;
    assert_eq!(report.height, Some(2_000_000_000));
    assert_eq!(
        report.proof,
        Proof::Contradicted("no headers above height 0 (claimed 2000000000)".into())
    );
    assert_eq!(chain.tip().height, 0);
}

#[tokio::test]
async fn headers_that_stop_short_do_not_prove_the_claim_but_are_learned() {
    let chain = chain();
    let liar = node(100).await;
    liar.set_headers_to(30);
    let report = prove_at(&liar.addr().to_string(), &chain, WAIT).await;
    assert_eq!(
        report.proof,
        Proof::Contradicted("headers end at height 30, below the claimed 100".into())
    );
    assert_eq!(chain.tip().height, 30);
}

#[tokio::test]
async fn a_node_that_ignores_getheaders_is_unproven_within_the_timeout() {
    // Announces a height and answers nothing after its version.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut s, peer) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        s.write_all(&version(peer, 50)).await.unwrap();
        while s.read(&mut buf).await.unwrap_or(0) > 0 {}
    });
    let started = tokio::time::Instant::now();
    let report = prove_at(&addr, &chain(), Duration::from_millis(300)).await;
    assert_eq!(report.height, Some(50));
    assert_eq!(
        report.proof,
        Proof::Unproven("headers for height 50 did not arrive in time".into())
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

fn version(peer: std::net::SocketAddr, height: i32) -> Vec<u8> {
    let params = VersionParams {
        services: 1,
        timestamp: 0,
        receiver: peer,
        sender: peer,
        nonce: 1,
        user_agent: "/forger/".into(),
        start_height: height,
    };
    wire::encode(REGTEST, "version", &wire::version_payload(&params))
}

/// A node that answers `getheaders` with `headers`, whatever was asked.
async fn forger(headers: Vec<Header>, height: i32) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut s, peer) = listener.accept().await.unwrap();
        let mut decoder = Decoder::new(REGTEST);
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            decoder.feed(&buf[..n]);
            while let Ok(Some(msg)) = decoder.next_message() {
                let reply = match msg.command.as_str() {
                    "version" => version(peer, height),
                    "getheaders" => {
                        let mut body = Vec::new();
                        wire::put_var_int(&mut body, headers.len() as u64);
                        for h in &headers {
                            body.extend_from_slice(&h.raw);
                            body.push(0);
                        }
                        wire::encode(REGTEST, "headers", &body)
                    }
                    _ => continue,
                };
                if s.write_all(&reply).await.is_err() {
                    return;
                }
            }
        }
    });
    addr
}

fn honest(n: u64) -> Vec<Header> {
    let p = params(Network::LitecoinRegtest).unwrap();
    SimChain::new(p).headers_after(&[p.genesis], n)
}

#[tokio::test]
async fn forged_headers_are_refused() {
    // Work removed: the nonce of header 5 changed (about half of all
    // nonces fail regtest's target; find one that does).
    let p = params(Network::LitecoinRegtest).unwrap();
    let mut forged = honest(10);
    let mut tip = p.genesis_tip();
    for h in &forged[..4] {
        tip = p.check(&tip, h).unwrap();
    }
    for nonce in 1u32.. {
        forged[4].raw[76..80].copy_from_slice(&nonce.to_le_bytes());
        if p.check(&tip, &forged[4]) == Err(PowError::NoWork { height: 5 }) {
            break;
        }
    }
    let report = prove_at(&forger(forged, 10).await, &chain(), WAIT).await;
    assert_eq!(
        report.proof,
        Proof::Contradicted(
            "invalid headers: header at height 5 lacks the proof of work its target asks for"
                .into()
        )
    );
    // Out of order: header 3 left out.
    let mut gap = honest(10);
    gap.remove(2);
    let report = prove_at(&forger(gap, 10).await, &chain(), WAIT).await;
    assert_eq!(
        report.proof,
        Proof::Contradicted(
            "invalid headers: header at height 3 does not link to the one before".into()
        )
    );
    // Attached to nothing we know.
    let stray = honest(10)[5..].to_vec();
    let report = prove_at(&forger(stray, 10).await, &chain(), WAIT).await;
    assert_eq!(
        report.proof,
        Proof::Contradicted("headers attach to no block we know".into())
    );
}

/// Litecoin regtest where a block may carry any target up to the limit, so
/// chains of unlike work can be mined.
fn any_target() -> &'static ChainParams {
    Box::leak(Box::new(ChainParams {
        retarget: Retarget::MinDifficulty,
        ..*params(Network::LitecoinRegtest).unwrap()
    }))
}

/// `count` headers after genesis, each with target `bits`.
fn mined(p: &ChainParams, bits: u32, count: u64) -> Vec<Header> {
    let mut prev = p.genesis_tip();
    (0..count)
        .map(|_| {
            let (header, tip) = mine(p, &prev, bits);
            prev = tip;
            header
        })
        .collect()
}

#[tokio::test]
async fn a_longer_chain_with_less_work_gives_way_and_is_contradicted() {
    let p = any_target();
    let chain = Chain::new(p);
    // 100 blocks at the limit (work 2 each) against 30 at an eighth of
    // it (work 8 each).
    let cheap = mined(p, 0x207f_ffff, 100);
    let hard = mined(p, 0x201f_ffff, 30);
    // Cold start: nothing to weigh the cheap chain against.
    let report = prove_at(&forger(cheap.clone(), 100).await, &chain, WAIT).await;
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
    assert_eq!(chain.tip().height, 100);
    // Lower and heavier: proven, and now the best chain.
    let report = prove_at(&forger(hard.clone(), 30).await, &chain, WAIT).await;
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
    assert_eq!(chain.tip().height, 30);
    assert_eq!(chain.tip().hash, hard[29].hash());
    // Higher and lighter: contradicted.
    let report = prove_at(&forger(cheap, 100).await, &chain, WAIT).await;
    assert!(
        matches!(&report.proof, Proof::Contradicted(d) if d.starts_with("not enough work")),
        "{report:?}"
    );
    assert_eq!(chain.tip().hash, hard[29].hash());
}

#[test]
fn getheaders_and_headers_bodies() {
    let body = getheaders(&[[1u8; 32], [2u8; 32]]);
    assert_eq!(&body[..4], &70016i32.to_le_bytes());
    assert_eq!(body[4], 2);
    assert_eq!(body.len(), 4 + 1 + 64 + 32);
    let hs = honest(3);
    let mut payload = vec![3u8];
    for h in &hs {
        payload.extend_from_slice(&h.raw);
        payload.push(0);
    }
    assert_eq!(parse(&payload).unwrap(), hs);
    assert_eq!(
        parse(&payload[..payload.len() - 5]).unwrap_err(),
        "malformed headers payload: cut short"
    );
    let mut many = Vec::new();
    wire::put_var_int(&mut many, 2001);
    assert_eq!(
        parse(&many).unwrap_err(),
        "malformed headers payload: 2001 headers in one message"
    );
    assert!(
        parse(&[])
            .unwrap_err()
            .contains("malformed headers payload")
    );
}
