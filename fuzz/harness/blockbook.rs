//! Fuzz harness: the Blockbook `/api/` status parser (`probe::http::parse_blockbook`)
//! and the report made of it (`judge_blockbook`), node facts included.
//!
//! Besides "no panic": an error detail stays short (truncated); the report
//! is `unknown` with that detail for a status that does not parse, else
//! `healthy` (in sync) or `unhealthy` with the best height and the
//! Blockbook's facts: `coin` and `version` as sent, made printable and cut
//! to 80 characters, the same back from JSON (as `/status`, the state file
//! and a live upgrade carry them); judged against each network, a coin is
//! a misfit exactly when it is not one of the network's names.

use pin_proxy::config::Network;
use pin_proxy::inspect::{
    BlockbookStatus, Misfit, NodeFacts, Requirement, Services, Verdict, judge, judge_blockbook,
    parse_blockbook,
};

/// Longest error detail accepted: the parser truncates to 160 characters
/// plus an ellipsis; anything near this means truncation was bypassed.
const MAX_DETAIL_CHARS: usize = 256;
/// Longest server text kept in a fact (`node::MAX_TEXT`).
const MAX_TEXT: usize = 80;

/// Parse `data` as a response body and check the report made of it.
pub fn run(data: &[u8]) {
    let parsed = parse_blockbook(data);
    let report = judge_blockbook(data);
    let status = match parsed {
        Ok(status) => status,
        Err(detail) => {
            let chars = detail.chars().count();
            assert!(chars <= MAX_DETAIL_CHARS, "error detail of {chars} chars");
            assert_eq!(report.verdict, Verdict::Unknown);
            assert_eq!((report.detail, report.height), (detail, None));
            assert!(report.node.is_none());
            return;
        }
    };
    let verdict = match status.in_sync {
        true => Verdict::Healthy,
        false => Verdict::Unhealthy,
    };
    assert_eq!(report.verdict, verdict);
    assert_eq!(report.height, Some(status.best_height));
    let facts = report.node.expect("a parsed status gives facts");
    check_facts(&status, &facts);
}

/// The facts keep what was sent, printable and bounded.
fn check_facts(status: &BlockbookStatus, facts: &NodeFacts) {
    let NodeFacts::Blockbook(b) = facts else {
        panic!("not a Blockbook's facts: {facts:?}");
    };
    for (kept, sent) in [(&b.coin, &status.coin), (&b.version, &status.version)] {
        assert_eq!(kept.is_some(), sent.is_some());
        let (Some(kept), Some(sent)) = (kept, sent) else {
            continue;
        };
        assert!(
            kept.bytes().all(|b| b == b' ' || b.is_ascii_graphic()),
            "not printable: {kept:?}"
        );
        assert_eq!(kept.len(), sent.chars().count().min(MAX_TEXT));
        let same = sent
            .chars()
            .zip(kept.chars())
            .all(|(s, k)| s == k || k == '?');
        assert!(same, "{kept:?} is not {sent:?}");
    }
    let json = serde_json::to_string(facts).expect("facts encode");
    let back: NodeFacts = serde_json::from_str(&json).expect("facts decode");
    assert_eq!(&back, facts, "not the same facts back from {json}");
    for network in Network::NAMED {
        let req = Requirement {
            services: Services(0),
            min_protocol: None,
            network,
            genesis: None,
        };
        let named = network.blockbook_coins();
        let fits = b
            .coin
            .as_ref()
            .is_none_or(|c| named.iter().any(|n| n.eq_ignore_ascii_case(c)));
        match judge(&req, facts) {
            Ok(()) => assert!(fits, "{:?} fits {network}", b.coin),
            Err(unfit) => {
                assert!(!fits, "{unfit}");
                assert!(matches!(unfit.misfits(), [Misfit::Coin { .. }]), "{unfit}");
            }
        }
    }
}
