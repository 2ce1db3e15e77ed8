use super::*;
use crate::config::Network;
use crate::probe::pow::params;

/// A fake run of tips after `from` up to height `to`, each block adding
/// `work`; hashes from heights and `fork`. The chain checks no headers,
/// only where runs attach and what they weigh.
fn after(from: &Tip, to: u64, fork: u8, work: u128) -> Vec<Tip> {
    let mut total = from.work;
    (from.height + 1..=to)
        .map(|h| {
            let mut hash = [fork; 32];
            hash[..8].copy_from_slice(&h.to_le_bytes());
            total += work;
            Tip {
                height: h,
                hash,
                bits: 0x207f_ffff,
                work: total,
            }
        })
        .collect()
}

/// The tip of `run` at `height`.
fn at(run: &[Tip], height: u64) -> Tip {
    *run.iter().find(|t| t.height == height).unwrap()
}

/// A node's whole chain, indexed by height: genesis, then `parts` in
/// order, each cut to what follows the one before.
fn line(genesis: Tip, parts: &[&[Tip]]) -> Vec<Tip> {
    let mut out = vec![genesis];
    for part in parts {
        let next = out.len() as u64;
        out.extend(part.iter().filter(|t| t.height >= next));
    }
    assert!(out.iter().enumerate().all(|(h, t)| t.height == h as u64));
    out
}

fn chain() -> Chain {
    Chain::new(params(Network::LitecoinRegtest).unwrap())
}

#[test]
fn starts_at_genesis() {
    let c = chain();
    assert_eq!(c.tip().height, 0);
    let locator = c.locator(100);
    assert_eq!(locator.len(), 1);
    assert_eq!(locator[0].hash, c.params().genesis);
    assert!(c.branches().is_empty());
}

#[test]
fn learns_a_heavier_run_and_builds_locators_below_a_height() {
    let c = chain();
    let genesis = c.tip();
    c.learn(genesis, &after(&genesis, 5000, 1, 2));
    assert_eq!(c.tip().height, 5000);
    let heights: Vec<u64> = c.locator(4001).iter().map(|t| t.height).collect();
    assert_eq!(
        &heights[..10],
        &[4000, 3999, 3998, 3997, 3996, 3995, 3994, 3993, 3992, 3991]
    );
    assert_eq!(heights.last(), Some(&0));
    assert!(heights.windows(2).all(|w| w[0] > w[1]), "{heights:?}");
    assert!(heights.len() < 40, "{heights:?}");
    // Above the tip: starts at the tip.
    assert_eq!(c.locator(u64::MAX)[0].height, 5000);
    // Sparse below the dense tail, dense in it.
    let record = c.lock();
    assert!(
        record
            .best
            .iter()
            .all(|t| t.height >= 5000 - DENSE || t.height.is_multiple_of(SPARSE))
    );
    assert!(record.best.len() < 3000);
}

#[test]
fn a_lighter_fork_is_a_side_branch_and_a_detached_run_changes_nothing() {
    let c = chain();
    let genesis = c.tip();
    let one = after(&genesis, 100, 1, 2);
    c.learn(genesis, &one);
    let fork = after(&at(&one, 50), 90, 2, 2);
    c.learn(at(&one, 50), &fork);
    assert_eq!(c.tip(), at(&one, 100));
    assert_eq!(c.branches(), [at(&fork, 90)]);
    // A node on the best chain finds its newest first, a node on the
    // fork the branch's newest (none of the best chain's above 50 is on
    // its chain).
    let locator = c.locator(u64::MAX);
    assert_eq!(locator[0], at(&one, 100));
    let on_fork = line(genesis, &[&one[..50], &fork]);
    assert_eq!(fork_point(&locator, &on_fork), Some(at(&fork, 90)));
    let stranger = after(&genesis, 7, 9, 2)[6];
    c.learn(stranger, &after(&stranger, 500, 9, 2));
    assert_eq!(c.tip().height, 100);
    assert_eq!(c.branches().len(), 1);
}

#[test]
fn a_heavier_fork_replaces_the_tail_which_becomes_a_side_branch() {
    let c = chain();
    let genesis = c.tip();
    let one = after(&genesis, 100, 1, 2);
    c.learn(genesis, &one);
    let fork = after(&at(&one, 50), 120, 2, 2);
    c.learn(at(&one, 50), &fork);
    assert_eq!(c.tip(), at(&fork, 120));
    assert!(c.find(&at(&one, 100).hash).is_none());
    assert!(c.find(&at(&one, 50).hash).is_some());
    assert_eq!(c.branches(), [at(&one, 100)]);
}

#[test]
fn a_long_cheap_run_gives_way_to_a_shorter_one_with_more_work() {
    let c = chain();
    let genesis = c.tip();
    let cheap = after(&genesis, 5000, 1, 2);
    c.learn(genesis, &cheap);
    assert_eq!(c.tip(), at(&cheap, 5000));
    // 1500 blocks four times as hard: 12,000 against 10,000.
    let hard = after(&genesis, 1500, 2, 8);
    c.learn(genesis, &hard);
    assert_eq!(c.tip(), at(&hard, 1500));
    assert_eq!(c.branches(), [at(&cheap, 5000)]);
    // The cheap chain learned again changes nothing.
    c.learn(genesis, &cheap);
    assert_eq!(c.tip(), at(&hard, 1500));
}

#[test]
fn an_honest_chain_resumes_from_its_side_branch_until_it_outweighs_the_best() {
    let c = chain();
    let genesis = c.tip();
    let cheap = after(&genesis, 5000, 1, 2);
    c.learn(genesis, &cheap);
    // The first proof reaches 1000 (8,000 against 10,000): kept aside.
    let hard = after(&genesis, 1500, 2, 8);
    c.learn(genesis, &hard[..1000]);
    assert_eq!(c.tip(), at(&cheap, 5000));
    assert_eq!(c.branches(), [at(&hard, 1000)]);
    // The next proof of a claim of 1500 starts where it stopped.
    let locator = c.locator(1500);
    let best: Vec<u64> = c.best_locator(1500).iter().map(|t| t.height).collect();
    assert_eq!(&best[..2], [1000, 0]);
    let on_hard = line(genesis, &[&hard]);
    let from = fork_point(&locator, &on_hard).unwrap();
    assert_eq!(from, at(&hard, 1000));
    c.learn(from, &hard[1000..]);
    assert_eq!(c.tip(), at(&hard, 1500));
    // The cheap chain waits aside; its node's next proof starts on it.
    assert_eq!(c.branches(), [at(&cheap, 5000)]);
    let on_cheap = line(genesis, &[&cheap]);
    assert_eq!(
        fork_point(&c.locator(5000), &on_cheap),
        Some(at(&cheap, 4999))
    );
}

#[test]
fn on_a_tie_the_chain_seen_first_stays_until_the_other_outweighs_it() {
    let c = chain();
    let genesis = c.tip();
    let one = after(&genesis, 100, 1, 2);
    c.learn(genesis, &one);
    let two = after(&at(&one, 90), 101, 2, 2);
    c.learn(at(&one, 90), &two[..10]);
    assert_eq!(c.tip(), at(&one, 100));
    assert_eq!(c.branches(), [at(&two, 100)]);
    let on_two = line(genesis, &[&one[..90], &two]);
    let from = fork_point(&c.locator(101), &on_two).unwrap();
    assert_eq!(from, at(&two, 100));
    c.learn(from, &two[10..]);
    assert_eq!(c.tip(), at(&two, 101));
    assert_eq!(c.branches(), [at(&one, 100)]);
}

#[test]
fn a_long_proof_learned_chunk_by_chunk_is_kept_whole() {
    // The point it started from leaves the dense tail as it grows.
    let c = chain();
    let genesis = c.tip();
    c.learn(genesis, &after(&genesis, 3333, 1, 2));
    let from = c.tip();
    let run = after(&from, 9333, 1, 2);
    for end in (100..=run.len()).step_by(100) {
        c.learn(from, &run[..end]);
    }
    assert_eq!(c.tip(), at(&run, 9333));
}

#[test]
fn a_run_on_the_best_chain_makes_no_side_branch() {
    let c = chain();
    let genesis = c.tip();
    let one = after(&genesis, 5000, 1, 2);
    c.learn(genesis, &one);
    // A node behind: in the dense tail, and between sparse entries.
    let from = c.locator(4000)[0];
    c.learn(from, &one[from.height as usize..4000]);
    let from = c.locator(1500)[0];
    assert_eq!(from.height, 1000);
    c.learn(from, &one[1000..1500]);
    assert_eq!(c.tip(), at(&one, 5000));
    assert!(c.branches().is_empty());
}

#[test]
fn a_side_branch_learned_chunk_by_chunk_stays_one_branch() {
    let c = chain();
    let genesis = c.tip();
    c.learn(genesis, &after(&genesis, 5000, 1, 2));
    let hard = after(&genesis, 1000, 2, 8);
    for end in (100..=1000).step_by(100) {
        c.learn(genesis, &hard[..end]);
    }
    assert_eq!(c.branches(), [at(&hard, 1000)]);
}

#[test]
fn side_branches_are_bounded_the_least_recently_extended_going_first() {
    let c = chain();
    let genesis = c.tip();
    let one = after(&genesis, 100, 1, 2);
    c.learn(genesis, &one);
    let forks: Vec<Vec<Tip>> = (2..=6).map(|f| after(&at(&one, 50), 60, f, 2)).collect();
    for fork in &forks {
        c.learn(at(&one, 50), fork);
    }
    let tips = |ids: &[usize]| -> Vec<Tip> { ids.iter().map(|&i| at(&forks[i], 60)).collect() };
    assert_eq!(c.branches(), tips(&[4, 3, 2, 1]));
    // Extending one puts it first.
    let more = after(&at(&forks[1], 60), 70, 3, 2);
    c.learn(at(&forks[1], 60), &more);
    assert_eq!(c.branches()[0], at(&more, 70));
    assert_eq!(c.branches().len(), MAX_BRANCHES);
}

#[test]
fn above_the_best_tip_a_claim_needs_the_best_tips_work() {
    let c = chain();
    let genesis = c.tip();
    let hard = after(&genesis, 100, 1, 8);
    c.learn(genesis, &hard);
    let cheap = after(&genesis, 300, 2, 2);
    c.learn(genesis, &cheap);
    assert_eq!(c.tip(), at(&hard, 100));
    let detail = c.weigh(&at(&cheap, 300)).unwrap_err();
    assert!(detail.starts_with("not enough work"), "{detail}");
    // Below or at the best tip's height: a node behind, or a fork.
    assert_eq!(c.weigh(&at(&cheap, 100)), Ok(()));
    assert_eq!(c.weigh(&at(&cheap, 60)), Ok(()));
    // Above it with as much work: the best chain's own successor.
    assert_eq!(c.weigh(&after(&at(&hard, 100), 101, 1, 8)[0]), Ok(()));
}

/// What Bitcoin Core answers a `getheaders` from: the first locator entry
/// on its active chain, `chain` (indexed by height).
fn fork_point(locator: &[Tip], chain: &[Tip]) -> Option<Tip> {
    locator
        .iter()
        .find(|t| usize::try_from(t.height).is_ok_and(|h| chain.get(h) == Some(*t)))
        .copied()
}

/// A side branch may hold headers of the best chain (those between a
/// sparse root and where it really leaves it). A node on the best chain
/// still finds the best chain's newest header first, not the branch's
/// (it would re-send from there at every probe, never reaching a tip more
/// than a probe's headers away), while a node on the branch finds its
/// branch's.
#[test]
fn a_branch_holding_best_chain_headers_does_not_hold_back_best_chain_proofs() {
    let c = chain();
    let genesis = c.tip();
    let mut a = vec![genesis];
    a.extend(after(&genesis, 60_000, 1, 2));
    c.learn(genesis, &a[1..]);
    // A fork that leaves at 1998, learnt from 1000 (the best chain keeps
    // nothing between 1000 and 2000): A1001..A1998, then F1999, F2000.
    let from = a[1000];
    let mut fork: Vec<Tip> = a[..=1998].to_vec();
    fork.extend(after(&a[1998], 2000, 7, 2));
    c.learn(from, &fork[1001..]);
    assert_eq!(c.branches(), [fork[2000]]);
    let mut a2 = a.clone();
    a2.extend(after(&a[60_000], 60_001, 1, 2));
    assert_eq!(fork_point(&c.locator(60_001), &a2), Some(a[60_000]));
    // The node on the fork, one block further, continues its branch.
    fork.extend(after(&fork[2000], 2001, 7, 2));
    assert_eq!(fork_point(&c.locator(2001), &fork), Some(fork[2000]));
    // Re-sent, the branch's headers on the best chain change nothing.
    c.learn(from, &a[1001..2000]);
    assert_eq!(fork_point(&c.locator(60_001), &a2), Some(a[60_000]));
}
