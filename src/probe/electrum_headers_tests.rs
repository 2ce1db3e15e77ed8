use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::*;
use crate::config::Network;
use crate::pool::report::{Report, Verdict};
use crate::probe::chain::Proving;
use crate::probe::electrum::probe;
use crate::probe::pow::{ChainParams, Retarget, params};
use crate::sim::simchain::{SimChain, mine};

pub(in crate::probe) const WAIT: Duration = Duration::from_secs(5);

/// Litecoin regtest's genesis header.
const GENESIS: &str = "0100000000000000000000000000000000000000000000000000000000000000\
                       00000000d9ced4ed1130f7b7faad9be25323ffafa33232a17c3edf6cfd97bee6\
                       bafbdd97dae5494dffff7f2000000000";

pub(in crate::probe) fn chain() -> Chain {
    Chain::new(params(Network::LitecoinRegtest).unwrap())
}

/// The regtest chain of the simulated nodes, genesis included: `to + 1`
/// headers.
pub(in crate::probe) fn honest(to: u64) -> Vec<Header> {
    let p = params(Network::LitecoinRegtest).unwrap();
    let sim = SimChain::new(p);
    let mut out = vec![header(GENESIS).unwrap()];
    while (out.len() as u64) <= to {
        let last = out.last().map_or(p.genesis, Header::hash);
        out.extend(sim.headers_after(&[last], to));
    }
    out
}

pub(in crate::probe) fn hex(h: &Header) -> String {
    h.raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a fake server is: the height and tip it announces, the headers it
/// serves by height, and whether it answers `blockchain.block.headers` at
/// all.
#[derive(Clone)]
pub(in crate::probe) struct Fake {
    pub(in crate::probe) height: u64,
    pub(in crate::probe) tip: Header,
    pub(in crate::probe) headers: Vec<Header>,
    pub(in crate::probe) answers_headers: bool,
    /// Protocol 1.6 answers one string per header.
    pub(in crate::probe) array: bool,
    /// `blockchain.block.headers` gets a JSON-RPC error (a server's
    /// resource limit, say).
    pub(in crate::probe) headers_error: bool,
}

impl Fake {
    pub(in crate::probe) fn honest(to: u64) -> Fake {
        let headers = honest(to);
        Fake {
            height: to,
            tip: headers[to as usize].clone(),
            headers,
            answers_headers: true,
            array: true,
            headers_error: false,
        }
    }

    fn answer(&self, request: &Value) -> Option<Value> {
        let params = &request["params"];
        let result = match request["method"].as_str()? {
            "server.version" => json!(["Fake 1.0", "1.6"]),
            "server.features" => json!({"protocol_max": "1.6"}),
            "blockchain.headers.subscribe" => {
                json!({"height": self.height, "hex": hex(&self.tip)})
            }
            "blockchain.block.headers" if self.headers_error => {
                let error = json!({"code": -101, "message": "excessive resource usage"});
                return Some(json!({"jsonrpc": "2.0", "id": request["id"], "error": error}));
            }
            "blockchain.block.headers" if self.answers_headers => {
                let start = params[0].as_u64()? as usize;
                let count = params[1].as_u64()? as usize;
                let end = self.headers.len().min(start.saturating_add(count));
                let sent = self.headers.get(start..end).unwrap_or_default();
                let list: Vec<String> = sent.iter().map(hex).collect();
                if self.array {
                    json!({"count": sent.len(), "max": 2016, "headers": list})
                } else {
                    json!({"count": sent.len(), "max": 2016, "hex": list.concat()})
                }
            }
            _ => return None,
        };
        Some(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
    }
}

/// Serve `fake` on loopback; the `blockchain.block.headers` requests it
/// got come out of the receiver as (start, count).
pub(in crate::probe) async fn serve(fake: Fake) -> (String, mpsc::UnboundedReceiver<(u64, u64)>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    let fake = Arc::new(fake);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (fake, tx) = (fake.clone(), tx.clone());
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                let mut line = String::new();
                while stream.read_line(&mut line).await.unwrap_or(0) > 0 {
                    let request: Value = serde_json::from_str(&line).unwrap();
                    line.clear();
                    if request["method"] == "blockchain.block.headers" {
                        let p = &request["params"];
                        // The test may be done with the receiver.
                        let _ = tx.send((p[0].as_u64().unwrap(), p[1].as_u64().unwrap()));
                    }
                    // No answer: the server keeps silent.
                    let Some(reply) = fake.answer(&request) else {
                        continue;
                    };
                    let mut out = reply.to_string().into_bytes();
                    out.push(b'\n');
                    if stream.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

async fn prove_at(addr: &str, chain: &Chain, timeout: Duration) -> Report {
    let wanted = |_: u64| true;
    let proving = Proving {
        chain,
        wanted: &wanted,
    };
    let regtest = params(Network::LitecoinRegtest);
    probe(addr, None, regtest, Some(proving), timeout).await
}

#[tokio::test]
async fn an_honest_server_proves_its_height_and_the_next_proof_resumes() {
    let chain = chain();
    let (addr, mut asked) = serve(Fake::honest(800)).await;
    let report = prove_at(&addr, &chain, WAIT).await;
    assert_eq!(
        (report.verdict, report.height, &report.proof),
        (Verdict::Healthy, Some(800), &Proof::Proven),
        "{report:?}"
    );
    assert_eq!(chain.tip().height, 800);
    // From genesis, in calls of at most PER_CALL.
    let calls: Vec<(u64, u64)> = std::iter::from_fn(|| asked.try_recv().ok()).collect();
    assert_eq!(calls, [(0, 350), (350, 350), (700, 101)]);
    // Higher: it starts below what it knows.
    let (addr, mut asked) = serve(Fake {
        array: false,
        ..Fake::honest(810)
    })
    .await;
    let report = prove_at(&addr, &chain, WAIT).await;
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
    assert_eq!(asked.try_recv().ok(), Some((800, 11)));
    assert_eq!(chain.tip().height, 810);
    // The same height again: one call of two headers.
    let report = prove_at(&addr, &chain, WAIT).await;
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
    assert_eq!(asked.try_recv().ok(), Some((809, 2)));
}

/// The proof of `fake`'s claim, with a fresh chain record.
async fn proof_of(fake: Fake) -> Proof {
    let (addr, _) = serve(fake).await;
    let report = prove_at(&addr, &chain(), WAIT).await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    report.proof
}

#[tokio::test]
async fn a_real_header_replayed_under_a_made_up_height_is_contradicted() {
    let real = Fake::honest(120);
    let replayed = Fake {
        height: 2_000_000_000,
        tip: real.headers[100].clone(),
        ..real.clone()
    };
    assert_eq!(
        proof_of(replayed).await,
        Proof::Contradicted("headers end at height 120, below the claimed 2000000000".into())
    );
    let serves_none = Fake {
        height: 2_000_000_000,
        headers: Vec::new(),
        ..real.clone()
    };
    assert_eq!(
        proof_of(serves_none).await,
        Proof::Contradicted("no header at height 0 (claimed 2000000000)".into())
    );
    let only_genesis = Fake {
        headers: real.headers[..1].to_vec(),
        ..real.clone()
    };
    assert_eq!(
        proof_of(only_genesis).await,
        Proof::Contradicted("no headers above height 0 (claimed 120)".into())
    );
}

#[tokio::test]
async fn headers_that_do_not_link_or_end_elsewhere_are_contradicted() {
    let real = Fake::honest(120);
    let mut gap = real.clone();
    gap.headers.remove(50);
    assert_eq!(
        proof_of(gap).await,
        Proof::Contradicted(
            "invalid headers: header at height 50 does not link to the one before".into()
        )
    );
    // A tip that is not the header at its height.
    let other_tip = Fake {
        tip: real.headers[100].clone(),
        ..real.clone()
    };
    assert_eq!(
        proof_of(other_tip).await,
        Proof::Contradicted("its header at height 120 is not the tip it announced".into())
    );
    // Another chain's block 0.
    let mut elsewhere = real.clone();
    elsewhere.headers[0].raw[68] ^= 1;
    let proof = proof_of(elsewhere).await;
    assert_eq!(
        proof,
        Proof::Contradicted(
            "its block 0 is not the genesis block of litecoin-regtest: \
             health.network may not be the server's chain"
                .into()
        )
    );
}

/// An error reply or a garbled one says nothing about the claim: unknown,
/// as the contract has it for Electrum answers, not a contradiction.
#[tokio::test]
async fn an_error_reply_to_the_headers_leaves_the_claim_unproven() {
    let limited = Fake {
        headers_error: true,
        ..Fake::honest(120)
    };
    assert_eq!(
        proof_of(limited).await,
        Proof::Unproven("blockchain.block.headers answered error: excessive resource usage".into())
    );
}

#[tokio::test]
async fn a_server_that_ignores_the_request_is_unproven_within_the_timeout() {
    let silent = Fake {
        answers_headers: false,
        ..Fake::honest(20)
    };
    let (addr, _) = serve(silent).await;
    let started = tokio::time::Instant::now();
    let report = prove_at(&addr, &chain(), Duration::from_millis(300)).await;
    assert_eq!(report.height, Some(20), "{report:?}");
    assert_eq!(
        report.proof,
        Proof::Unproven("headers for height 20 did not arrive in time".into())
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_long_proof_goes_on_at_the_next_probe() {
    let chain = chain();
    let to = PER_CALL * MAX_CALLS as u64 + 10;
    let (addr, _) = serve(Fake::honest(to)).await;
    let report = prove_at(&addr, &chain, Duration::from_secs(30)).await;
    let reached = PER_CALL * MAX_CALLS as u64 - 1;
    assert_eq!(
        report.proof,
        Proof::Unproven(format!(
            "headers checked to height {reached} of {to}; the proof goes on at the next probe"
        ))
    );
    assert_eq!(chain.tip().height, reached);
    let report = prove_at(&addr, &chain, WAIT).await;
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
}

/// Litecoin regtest where a block may carry any target up to the limit, so
/// chains of unlike work can be mined.
fn any_target() -> &'static ChainParams {
    Box::leak(Box::new(ChainParams {
        retarget: Retarget::MinDifficulty,
        ..*params(Network::LitecoinRegtest).unwrap()
    }))
}

/// A server of `to` blocks after genesis, each with target `bits`.
fn mined(p: &ChainParams, bits: u32, to: u64) -> Fake {
    let mut headers = vec![header(GENESIS).unwrap()];
    let mut prev = p.genesis_tip();
    for _ in 0..to {
        let (header, tip) = mine(p, &prev, bits);
        headers.push(header);
        prev = tip;
    }
    Fake {
        height: to,
        tip: headers[to as usize].clone(),
        headers,
        ..Fake::honest(0)
    }
}

async fn prove_on(p: &'static ChainParams, fake: Fake, chain: &Chain) -> Proof {
    let (addr, _) = serve(fake).await;
    let wanted = |_: u64| true;
    let proving = Proving {
        chain,
        wanted: &wanted,
    };
    let report = probe(&addr, None, Some(p), Some(proving), Duration::from_secs(30)).await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    report.proof
}

#[tokio::test]
async fn a_longer_chain_with_less_work_gives_way_and_is_contradicted() {
    let p = any_target();
    let chain = Chain::new(p);
    // 100 blocks at the limit (work 2 each) against 30 at an eighth of
    // it (work 8 each).
    let cheap = mined(p, 0x207f_ffff, 100);
    let hard = mined(p, 0x201f_ffff, 30);
    assert_eq!(prove_on(p, cheap.clone(), &chain).await, Proof::Proven);
    assert_eq!(chain.tip().height, 100);
    // Lower and heavier: proven, and now the best chain.
    assert_eq!(prove_on(p, hard.clone(), &chain).await, Proof::Proven);
    assert_eq!(chain.tip().hash, hard.tip.hash());
    // Higher and lighter: contradicted.
    let proof = prove_on(p, cheap, &chain).await;
    assert!(
        matches!(&proof, Proof::Contradicted(d) if d.starts_with("not enough work")),
        "{proof:?}"
    );
    assert_eq!(chain.tip().hash, hard.tip.hash());
}

#[tokio::test]
async fn an_honest_server_continues_its_side_branch_past_a_cheaper_best_chain() {
    let p = any_target();
    let chain = Chain::new(p);
    // A cheap chain of 2850 blocks (work 5702) is the best known; the
    // honest one (work 4 a block) passes it at 1426 blocks, beyond the
    // 1399 one probe reaches.
    let cheap = mined(p, 0x207f_ffff, 2850);
    let mut prev = p.genesis_tip();
    let tips: Vec<Known> = cheap.headers[1..]
        .iter()
        .map(|h| {
            prev = p.check(&prev, h).unwrap();
            prev
        })
        .collect();
    chain.learn(p.genesis_tip(), &tips);
    let honest = mined(p, 0x203f_ffff, 1450);
    let reached = PER_CALL * MAX_CALLS as u64 - 1;
    assert_eq!(
        prove_on(p, honest.clone(), &chain).await,
        Proof::Unproven(format!(
            "headers checked to height {reached} of 1450; the proof goes on at the next probe"
        ))
    );
    assert_eq!(chain.tip().height, 2850);
    assert_eq!(chain.branch_tips(u64::MAX)[0].height, reached);
    // The next probe starts on the branch, and the honest chain takes over.
    let (addr, mut asked) = serve(honest.clone()).await;
    let wanted = |_: u64| true;
    let proving = Proving {
        chain: &chain,
        wanted: &wanted,
    };
    let report = probe(&addr, None, Some(p), Some(proving), WAIT).await;
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
    let calls: Vec<(u64, u64)> = std::iter::from_fn(|| asked.try_recv().ok()).collect();
    assert_eq!(calls, [(1449, 2), (reached, 1450 - reached + 1)]);
    assert_eq!(chain.tip().hash, honest.tip.hash());
}

#[test]
fn answers_in_either_form() {
    let hs = honest(2);
    let list: Vec<String> = hs.iter().map(hex).collect();
    let array = json!({"count": 3, "max": 2016, "headers": list});
    assert_eq!(parse(&array), Some(hs.clone()));
    let joined = json!({"count": 3, "max": 2016, "hex": list.concat()});
    assert_eq!(parse(&joined), Some(hs));
    for bad in [
        json!({"count": 2, "hex": list.concat()}),
        json!({"count": 3, "hex": &list.concat()[1..]}),
        json!({"count": 1, "headers": ["00"]}),
        json!({"count": 0}),
        json!("nothing"),
    ] {
        assert_eq!(parse(&bad), None, "{bad}");
    }
    assert_eq!(parse(&json!({"count": 0, "hex": ""})), Some(Vec::new()));
}

#[test]
fn anchors_are_the_newest_known_blocks_then_further_back_then_genesis() {
    let c = chain();
    let heights =
        |c: &Chain, claim| -> Vec<u64> { anchors(c, claim).iter().map(|t| t.height).collect() };
    assert_eq!(heights(&c, 500), [0]);
    let hs = honest(200);
    let p = c.params();
    let mut tip = p.genesis_tip();
    let run: Vec<Known> = hs[1..]
        .iter()
        .map(|h| {
            tip = p.check(&tip, h).unwrap();
            tip
        })
        .collect();
    c.learn(p.genesis_tip(), &run);
    // The locator's first, second, fourth, eighth, sixteenth; genesis.
    let locator: Vec<u64> = c.best_locator(500).iter().map(|t| t.height).collect();
    let want = [
        locator[0],
        locator[1],
        locator[3],
        locator[7],
        locator[15],
        0,
    ];
    assert_eq!(heights(&c, 500), want);
    assert_eq!(&heights(&c, 150)[..4], [149, 148, 146, 142]);
    // A side branch (a fork at 100, lighter): its newest comes second.
    let fork: Vec<Known> = run[100..150]
        .iter()
        .map(|t| Known {
            hash: [7; 32],
            ..*t
        })
        .collect();
    c.learn(run[99], &fork);
    assert_eq!(c.tip(), run[199]);
    let mut want = want.to_vec();
    want.insert(1, 150);
    assert_eq!(heights(&c, 500), want);
    assert_eq!(&heights(&c, 150)[..3], [149, 149, 148]);
}
