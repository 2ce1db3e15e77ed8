use std::sync::OnceLock;

use tokio::sync::mpsc::UnboundedReceiver;

use super::*;
use crate::config::Network;
use crate::pool::report::{Proof, Report, Verdict};
use crate::probe::chain::Proving;
use crate::probe::electrum::probe;
use crate::probe::electrum_headers::tests::{Fake, WAIT, chain as fresh, honest, serve};
use crate::probe::electrum_headers::{MAX_CALLS, PER_CALL};
use crate::probe::headers::check;
use crate::probe::pow::params;

/// Heights in these tests: the honest servers' tip, above what a first
/// proof from genesis reaches in one probe (`MAX_CALLS` is 4 in tests).
const TIP: u64 = 2100;
/// Where they are to agree: the tip less `DEPTH`, down to a `STEP`.
const FLOOR: u64 = 2000;
const HUGE: u64 = 2_000_000_000;

fn regtest() -> &'static ChainParams {
    params(Network::LitecoinRegtest).unwrap()
}

/// The simulated regtest chain to 2300, mined once for every test.
fn real() -> &'static [Header] {
    static REAL: OnceLock<Vec<Header>> = OnceLock::new();
    REAL.get_or_init(|| honest(2300))
}

fn fake(claim: u64, tip: Header, headers: Vec<Header>) -> Fake {
    Fake {
        height: claim,
        tip,
        headers,
        answers_headers: true,
        array: true,
        headers_error: false,
    }
}

fn honest_server() -> Fake {
    let headers = real()[..=TIP as usize].to_vec();
    fake(TIP, headers[TIP as usize].clone(), headers)
}

/// `n` headers with regtest work, each on the one before, the first on a
/// block that does not exist.
fn forged(n: usize) -> Vec<Header> {
    let mut prev = [0x5a; 32];
    let mut out = Vec::new();
    for i in 0..n {
        let mut raw = real()[1].raw;
        raw[4..36].copy_from_slice(&prev);
        raw[36..40].copy_from_slice(&(i as u32).to_le_bytes());
        let mut nonce = 0u32;
        let header = loop {
            raw[76..80].copy_from_slice(&nonce.to_le_bytes());
            let header = Header { raw };
            if regtest().check_alone(0, &header).is_ok() {
                break header;
            }
            nonce += 1;
        };
        prev = header.hash();
        out.push(header);
    }
    out
}

/// One probe of `addr`, its claim proven when `wanted`.
async fn probe_as(addr: &str, chain: &Chain, wanted: bool) -> Report {
    let wanted = move |_: u64| wanted;
    let proving = Proving {
        chain,
        wanted: &wanted,
    };
    let report = probe(addr, None, Some(regtest()), Some(proving), WAIT).await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    report
}

/// The `blockchain.block.headers` calls a fake got since last asked.
fn calls(asked: &mut UnboundedReceiver<(u64, u64)>) -> Vec<(u64, u64)> {
    std::iter::from_fn(|| asked.try_recv().ok()).collect()
}

fn tip_of(h: &Header, height: u64) -> Tip {
    Tip {
        height,
        hash: h.hash(),
        bits: h.bits(),
        work: 0,
    }
}

/// (a) Two servers that name the same header at the floor of their claims
/// anchor a proof that fetches only the headers above it: one call, one
/// probe, where a first proof from genesis needs two probes.
#[tokio::test]
async fn two_servers_agreeing_at_the_floor_anchor_a_proof_of_only_the_headers_above() {
    let chain = Arc::new(fresh());
    let (a, mut asked_a) = serve(honest_server()).await;
    let (b, mut asked_b) = serve(honest_server()).await;
    let _enlisted = [
        Enlisted::new(chain.clone(), &a),
        Enlisted::new(chain.clone(), &b),
    ];
    // A claims; B claims, and names its header where they are to agree.
    probe_as(&a, &chain, false).await;
    assert_eq!(calls(&mut asked_a), []);
    probe_as(&b, &chain, false).await;
    assert_eq!(calls(&mut asked_b), [(FLOOR, 1)]);
    assert_eq!(chain.agreement().anchor(), None, "A has not spoken");
    // A's proof: its word completes the agreement and starts the proof.
    let report = probe_as(&a, &chain, true).await;
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
    assert_eq!(calls(&mut asked_a), [(FLOOR, TIP - FLOOR + 1)]);
    let floor = &real()[FLOOR as usize];
    assert_eq!(chain.agreement().anchor(), Some(tip_of(floor, FLOOR)));
    // B's proof starts there too; the proven record learned nothing.
    let report = probe_as(&b, &chain, true).await;
    assert_eq!(report.proof, Proof::Proven, "{report:?}");
    assert_eq!(calls(&mut asked_b), [(FLOOR, TIP - FLOOR + 1)]);
    assert_eq!(chain.tip().height, 0);
    // Without the agreement, the first probe ends short of the claim.
    let alone = fresh();
    let report = probe_as(&a, &alone, true).await;
    let reached = MAX_CALLS as u64 * PER_CALL - 1;
    assert_eq!(
        report.proof,
        Proof::Unproven(format!(
            "headers checked to height {reached} of {TIP}; the proof goes on at the next probe"
        ))
    );
}

/// (b) Two liars that name the same replayed or forged header where the
/// servers are to agree make no anchor beside an honest server, though
/// their headers link with work from that header; their claims stay
/// unproven.
#[tokio::test]
async fn liars_agreeing_on_a_replayed_or_forged_header_make_no_anchor() {
    let below = &real()[..FLOOR as usize];
    // Block 100 and its successors replayed at FLOOR and above.
    let replayed: Vec<Header> = below.iter().chain(&real()[100..=300]).cloned().collect();
    let forged: Vec<Header> = below.iter().cloned().chain(forged(201)).collect();
    for (what, headers) in [("replayed", replayed), ("forged", forged)] {
        // Their chain from their header at FLOOR: valid, and above TIP.
        let theirs = tip_of(&headers[FLOOR as usize], FLOOR);
        let above = headers[FLOOR as usize + 1..].to_vec();
        let linked = check(regtest(), theirs, above).await.unwrap();
        assert_eq!(linked.last().map(|t| t.height), Some(FLOOR + 200), "{what}");
        for claim in [FLOOR + 200, HUGE] {
            let chain = Arc::new(fresh());
            let liar = fake(
                claim,
                headers[FLOOR as usize + 200].clone(),
                headers.clone(),
            );
            let (l1, _) = serve(liar.clone()).await;
            let (l2, _) = serve(liar).await;
            let (h, _) = serve(honest_server()).await;
            let _enlisted = [&l1, &l2, &h].map(|s| Enlisted::new(chain.clone(), s));
            // All claim; the liars speak, the honest server has not.
            for server in [&h, &l1, &l2, &l1] {
                probe_as(server, &chain, false).await;
            }
            assert_eq!(chain.agreement().wants_word(&h, 0), Some(FLOOR));
            assert_eq!(chain.agreement().anchor(), None, "{what} {claim}");
            let report = probe_as(&l1, &chain, true).await;
            assert!(
                matches!(report.proof, Proof::Unproven(_)),
                "{what} {claim}: {report:?}"
            );
            // The honest server names another header: still none.
            probe_as(&h, &chain, true).await;
            assert_eq!(chain.agreement().anchor(), None, "{what} {claim}");
            for _ in 0..3 {
                let report = probe_as(&l2, &chain, true).await;
                assert_ne!(report.proof, Proof::Proven, "{what} {claim}");
            }
            assert_eq!(chain.agreement().anchor(), None, "{what} {claim}");
        }
    }
}

/// (c) One server's word never makes an anchor, however often it speaks
/// or however many probe tasks it has.
#[test]
fn a_single_server_never_makes_an_anchor() {
    let p = regtest();
    let header = &real()[FLOOR as usize];
    let agreement = Agreement::default();
    agreement.enlist("a");
    agreement.enlist("a");
    agreement.claim("a", TIP);
    assert_eq!(agreement.wants_word("a", 0), None);
    for _ in 0..3 {
        agreement.heard(p, "a", FLOOR, Some(header));
    }
    assert_eq!(agreement.anchor(), None);
    // A second server, enlisted and claiming, has not spoken; a stranger's
    // word does not count.
    agreement.enlist("b");
    agreement.claim("b", TIP);
    assert_eq!(agreement.wants_word("a", 0), Some(FLOOR));
    agreement.heard(p, "a", FLOOR, Some(header));
    agreement.heard(p, "stranger", FLOOR, Some(header));
    assert_eq!(agreement.anchor(), None);
    assert_eq!(agreement.wants_word("a", 0), None, "a has spoken");
    agreement.heard(p, "b", FLOOR, Some(header));
    assert_eq!(agreement.anchor(), Some(tip_of(header, FLOOR)));
    // B leaves: A alone keeps what both agreed on, and makes no new one.
    agreement.delist("b");
    agreement.claim("a", TIP + STEP);
    agreement.heard(p, "a", FLOOR + STEP, Some(&real()[2])); // not a target
    assert_eq!(agreement.anchor(), Some(tip_of(header, FLOOR)));
    assert_eq!(agreement.wants_word("a", 0), None);
}

/// A lone server's proof starts from the record, as without agreement.
#[tokio::test]
async fn a_lone_server_proves_from_the_record() {
    let chain = Arc::new(fresh());
    let (a, mut asked) = serve(honest_server()).await;
    let _enlisted = Enlisted::new(chain.clone(), &a);
    probe_as(&a, &chain, false).await;
    let report = probe_as(&a, &chain, true).await;
    assert!(matches!(report.proof, Proof::Unproven(_)), "{report:?}");
    assert_eq!(calls(&mut asked)[0], (0, PER_CALL));
    assert_eq!(chain.agreement().anchor(), None);
}

#[test]
fn the_height_to_agree_on_is_below_every_claim_in_steps() {
    let agreement = Agreement::default();
    for s in ["a", "b", "c"] {
        agreement.enlist(s);
    }
    agreement.claim("a", 5000);
    agreement.claim("b", 2100);
    assert_eq!(agreement.wants_word("a", 0), None, "c has not claimed");
    agreement.claim("c", HUGE);
    assert_eq!(agreement.wants_word("a", 0), Some(2000));
    assert_eq!(agreement.wants_word("c", 1999), Some(2000));
    assert_eq!(agreement.wants_word("c", 2000), None, "the record is there");
    agreement.claim("b", 2009);
    assert_eq!(agreement.wants_word("a", 0), Some(1000));
    agreement.claim("b", 1009);
    assert_eq!(
        agreement.wants_word("a", 0),
        None,
        "no height above genesis"
    );
}

#[test]
fn another_word_a_newcomer_or_a_lower_claim_drops_the_anchor() {
    let p = regtest();
    let (x, y) = (&real()[FLOOR as usize], &real()[7]);
    let agreed = tip_of(x, FLOOR);
    let agreement = Agreement::default();
    let agree = |servers: &[&str]| {
        for s in servers {
            agreement.enlist(s);
            agreement.claim(s, TIP);
        }
        for s in servers {
            agreement.heard(p, s, FLOOR, Some(x));
        }
    };
    agree(&["a", "b"]);
    assert_eq!(agreement.anchor(), Some(agreed));
    // Another header where they agreed.
    agreement.heard(p, "b", FLOOR, Some(y));
    assert_eq!(agreement.anchor(), None);
    agreement.heard(p, "b", FLOOR, Some(x));
    assert_eq!(agreement.anchor(), Some(agreed));
    // No header, or one without its work.
    let mut weak = x.clone();
    weak.raw[72..76].copy_from_slice(&0x2100_ffffu32.to_le_bytes());
    for word in [None, Some(&weak)] {
        agreement.heard(p, "a", FLOOR, word);
        assert_eq!(agreement.anchor(), None);
        agreement.heard(p, "a", FLOOR, Some(x));
        assert_eq!(agreement.anchor(), Some(agreed));
    }
    // A newcomer has not spoken.
    agreement.enlist("c");
    assert_eq!(agreement.anchor(), None);
    agreement.claim("c", TIP);
    agreement.heard(p, "c", FLOOR, Some(y));
    assert_eq!(agreement.anchor(), None);
    // The dissenter leaves: the others agree.
    agreement.delist("c");
    assert_eq!(agreement.anchor(), Some(agreed));
    // A claim below the anchor.
    agreement.claim("a", FLOOR - 1);
    assert_eq!(agreement.anchor(), None);
}

/// Calls and probes of a proof from `from` (a block known or agreed) to
/// `claim`, `max_calls` a probe, as the prover asks them: the first call
/// of a probe starts at its anchor, and a probe cut short resumes from
/// the last header learned.
fn cost(from: u64, claim: u64, max_calls: usize) -> (u64, u64) {
    let (mut at, mut calls, mut probes) = (from, 0, 0);
    while at < claim {
        probes += 1;
        at = claim.min(at + PER_CALL - 1);
        calls += 1;
        for _ in 1..max_calls {
            if at >= claim {
                break;
            }
            at = claim.min(at + PER_CALL);
            calls += 1;
        }
    }
    (calls, probes)
}

/// The height agreed on below a tip at `tip` (every server there).
fn agreed_below(tip: u64) -> u64 {
    (tip - DEPTH) / STEP * STEP
}

/// The figure: a first proof of an N-header chain with and without an
/// agreed anchor, measured here (4 calls a probe) and computed with the
/// same rule for a Litecoin-sized chain (40 calls a probe).
#[tokio::test]
async fn figure_calls_and_probes_of_a_first_proof() {
    // Without: from genesis, probe after probe.
    let chain = fresh();
    let (a, mut asked) = serve(honest_server()).await;
    let (mut without, mut probes) = (0, 0);
    loop {
        let report = probe_as(&a, &chain, true).await;
        probes += 1;
        without += calls(&mut asked).len() as u64;
        if report.proof == Proof::Proven {
            break;
        }
        assert!(probes < 10, "{report:?}");
    }
    assert_eq!((without, probes), cost(0, TIP, MAX_CALLS));
    // With: the other server's word (one call of one header), then one
    // proof from the agreed block.
    let chain = Arc::new(fresh());
    let (b, mut asked_b) = serve(honest_server()).await;
    let _enlisted = [
        Enlisted::new(chain.clone(), &a),
        Enlisted::new(chain.clone(), &b),
    ];
    probe_as(&a, &chain, false).await;
    probe_as(&b, &chain, false).await;
    let words = calls(&mut asked_b).len() as u64;
    let report = probe_as(&a, &chain, true).await;
    assert_eq!(report.proof, Proof::Proven);
    let with = calls(&mut asked).len() as u64;
    assert_eq!((with, 1), cost(agreed_below(TIP), TIP, MAX_CALLS));
    println!(
        "FIGURE first proof of a {TIP}-header chain, {MAX_CALLS} calls a probe (measured): \
         without agreement {without} calls in {probes} probes; \
         with it {with} call in 1 probe (+{words} one-header call per other server)"
    );
    // Litecoin mainnet's size, 40 calls a probe as outside tests.
    let n = 2_900_000;
    let (calls_from_genesis, probes_from_genesis) = cost(0, n, 40);
    let (calls_agreed, probes_agreed) = cost(agreed_below(n), n, 40);
    println!(
        "FIGURE first proof of a {n}-header chain, 40 calls a probe (computed): \
         without agreement {calls_from_genesis} calls in {probes_from_genesis} probes; \
         with it {calls_agreed} calls in {probes_agreed} probe (+1 one-header call per other server)"
    );
    assert_eq!(probes_agreed, 1);
    assert!(probes_from_genesis > 200);
}
