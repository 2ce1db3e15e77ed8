use super::*;

/// Heights only corroborated (Blockbook, a custom network).
const CORR: Rule = Rule {
    max_lag: 3,
    provable: false,
};

/// Heights proven where they can be (`bitcoin-p2p`, `electrum*` on a named
/// network).
const PROV: Rule = Rule {
    provable: true,
    ..CORR
};

const LIAR: u64 = 2_000_000_000;

fn at(height: u64) -> Claim {
    Claim {
        height,
        proven: false,
        healthy: true,
    }
}

fn proven(height: u64) -> Claim {
    Claim {
        proven: true,
        ..at(height)
    }
}

/// `judge` of an unproven claim (no proof asked for) under `rule`.
fn plain(height: u64, others: &[Claim], rule: Rule) -> Judgement {
    judge(height, Own::NotAsked, others, rule)
}

#[test]
fn a_lone_claim_makes_nobody_lag() {
    for rule in [CORR, PROV] {
        // Two honest at 20, a liar far ahead: the honest are fine.
        assert_eq!(plain(20, &[at(20), at(LIAR)], rule), Judgement::Fine);
        // One honest, one liar.
        assert_eq!(plain(20, &[at(LIAR)], rule), Judgement::Fine);
        assert_eq!(plain(20, &[at(i32::MAX as u64)], rule), Judgement::Fine);
        // Two that disagree, nothing proven: nobody is drained.
        assert_eq!(plain(1000, &[at(1010)], rule), Judgement::Fine);
    }
}

#[test]
fn the_liar_itself_is_unproven() {
    for rule in [CORR, PROV] {
        assert_eq!(
            plain(LIAR, &[at(20), at(20)], rule),
            Judgement::Unproven { lowest_other: 20 }
        );
        assert_eq!(
            plain(1010, &[at(1000)], rule),
            Judgement::Unproven { lowest_other: 1000 }
        );
        // Far above one, far below another: named by the one it would drain.
        assert_eq!(
            plain(1000, &[at(20), at(LIAR)], rule),
            Judgement::Unproven { lowest_other: 20 }
        );
        // A proof that failed does not count either.
        assert_eq!(
            judge(1010, Own::Unproven, &[at(1000)], rule),
            Judgement::Unproven { lowest_other: 1000 }
        );
        // Proven, it is fine (and the others then trail it).
        assert_eq!(judge(1010, Own::Proven, &[at(1000)], rule), Judgement::Fine);
    }
}

#[test]
fn a_node_that_stopped_is_caught_by_two_that_agree() {
    assert_eq!(
        plain(1000, &[at(1010), at(1011)], CORR),
        Judgement::Lagging { reference: 1011 }
    );
    // ... and the two ahead need no proof: they corroborate each other.
    assert!(!needs_proof(1010, &[at(1000), at(1011)], CORR));
    assert_eq!(plain(1010, &[at(1000), at(1011)], CORR), Judgement::Fine);
}

#[test]
fn where_heights_can_be_proven_the_two_that_agree_are_asked_and_so_is_the_one_behind() {
    assert!(needs_proof(1010, &[at(1000), at(1011)], PROV));
    assert!(needs_proof(1000, &[at(1010), at(1011)], PROV));
    // Nobody far from anyone: nobody is asked.
    assert!(!needs_proof(1003, &[at(1000), at(1002)], PROV));
    // Until asked, it is not judged against heights only corroborated ...
    assert_eq!(plain(1000, &[at(1010), at(1011)], PROV), Judgement::Fine);
    // ... nor are they, agreeing with each other, held against it.
    assert_eq!(plain(1010, &[at(1000), at(1011)], PROV), Judgement::Fine);
    // Once its own proof was tried and did not succeed (cut short by the
    // timeout, say), the two that agree catch it as before.
    assert_eq!(
        judge(1000, Own::Unproven, &[at(1010), at(1011)], PROV),
        Judgement::Lagging { reference: 1011 }
    );
    // Proven at its height, it trails only what is proven too.
    assert_eq!(
        judge(1000, Own::Proven, &[at(1010), at(1011)], PROV),
        Judgement::Fine
    );
    assert_eq!(
        judge(1000, Own::Proven, &[proven(1010), at(1011)], PROV),
        Judgement::Lagging { reference: 1011 }
    );
}

#[test]
fn proof_outranks_liars_that_agree() {
    let liars = [at(LIAR), at(LIAR)];
    // Only corroborated, the pair would win ...
    assert_eq!(
        judge(120, Own::Unproven, &liars, CORR),
        Judgement::Lagging { reference: LIAR }
    );
    // ... but above a proven height, only a proven height counts.
    assert_eq!(judge(120, Own::Proven, &liars, PROV), Judgement::Fine);
    assert_eq!(
        judge(LIAR, Own::Unproven, &[proven(120), at(LIAR)], PROV),
        Judgement::Unproven { lowest_other: 120 }
    );
    assert_eq!(
        plain(LIAR, &[proven(120), at(LIAR)], PROV),
        Judgement::Unproven { lowest_other: 120 }
    );
    // Another backend's proof outranks them as well.
    assert_eq!(
        plain(118, &[proven(120), at(LIAR), at(LIAR)], PROV),
        Judgement::Fine
    );
    assert_eq!(
        judge(110, Own::Unproven, &[proven(120), at(LIAR), at(LIAR)], PROV),
        Judgement::Lagging { reference: 120 }
    );
    // The liars are asked to prove, agreeing or not.
    assert!(needs_proof(LIAR, &[at(120), at(LIAR)], PROV));
    assert!(!needs_proof(LIAR, &[at(120), at(LIAR)], CORR));
    // Within `max_lag` of the highest proven height, agreement still counts.
    assert_eq!(
        judge(100, Own::Unproven, &[proven(110), at(112), at(113)], PROV),
        Judgement::Lagging { reference: 113 }
    );
}

#[test]
fn a_node_behind_one_that_proves_its_height_is_caught() {
    for rule in [CORR, PROV] {
        assert_eq!(
            plain(1000, &[proven(1010)], rule),
            Judgement::Lagging { reference: 1010 }
        );
        assert!(needs_proof(1010, &[at(1000)], rule));
    }
}

#[test]
fn only_healthy_backends_set_the_reference() {
    let quarantined = Claim {
        healthy: false,
        ..proven(1010)
    };
    for rule in [CORR, PROV] {
        assert_eq!(plain(1000, &[quarantined], rule), Judgement::Fine);
    }
}

#[test]
fn within_the_lag_nothing_needs_proof() {
    for rule in [CORR, PROV] {
        assert!(!needs_proof(1003, &[at(1000)], rule));
        assert!(needs_proof(1004, &[at(1000)], rule));
        assert!(!needs_proof(1000, &[], rule));
        assert_eq!(plain(1003, &[at(1000)], rule), Judgement::Fine);
        assert_eq!(plain(u64::MAX, &[at(u64::MAX)], rule), Judgement::Fine);
    }
    assert!(!needs_proof(20, &[at(20), at(LIAR)], CORR));
    assert!(needs_proof(20, &[at(20), at(LIAR)], PROV));
}

#[test]
fn two_claims_that_agree_with_each_other_corroborate() {
    for rule in [CORR, PROV] {
        // The judged backend's own height corroborates another's.
        assert_eq!(plain(1009, &[at(1010), at(900)], rule), Judgement::Fine);
    }
    assert_eq!(
        plain(900, &[at(1010), at(1009)], CORR),
        Judgement::Lagging { reference: 1010 }
    );
    assert_eq!(
        judge(900, Own::Unproven, &[at(1010), at(1009)], PROV),
        Judgement::Lagging { reference: 1010 }
    );
}
