//! The lag rule: which heights may serve as the reference, who trails it,
//! and which claims must be proven before they count.
//!
//! A height is the reference only when it is corroborated (another backend
//! within `max_lag_blocks` of it) or proven (the node served the headers
//! behind it). A single backend's claim therefore never makes another
//! backend `lagging`: a node that lies about its height, or is on a chain
//! of its own, cannot drain the honest ones. Pure, table-tested.

/// Another backend's height, as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The height its last probe read.
    pub height: u64,
    /// The node proved that height with its headers.
    pub proven: bool,
    /// Its state is `healthy`: only those set the reference.
    pub healthy: bool,
}

/// What the rule says of one backend's height.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// Nothing to act on.
    Fine,
    /// Trails `reference` by more than `max_lag_blocks`.
    Lagging {
        /// The corroborated or proven height it trails.
        reference: u64,
    },
    /// More than `max_lag_blocks` above another backend, near none, and
    /// not proven: it must not count, and its state says so.
    Unproven {
        /// The lowest height of the others: the one it would make lag.
        lowest_other: u64,
    },
}

/// True when a backend claiming `height` would make another backend lag,
/// with no other backend near it: the claim counts only once proven.
pub fn needs_proof(height: u64, others: &[Claim], max_lag: u64) -> bool {
    let Some(lowest) = others.iter().map(|c| c.height).min() else {
        return false;
    };
    height > lowest.saturating_add(max_lag)
        && !others.iter().any(|c| near(c.height, height, max_lag))
}

/// Judge a backend at `height` (`proven` when its headers showed it)
/// against the `others`.
pub fn judge(height: u64, proven: bool, others: &[Claim], max_lag: u64) -> Judgement {
    let reference = others
        .iter()
        .filter(|c| c.healthy && (c.proven || corroborated(others, c, height, max_lag)))
        .map(|c| c.height)
        .max();
    if let Some(reference) = reference
        && reference > height.saturating_add(max_lag)
    {
        return Judgement::Lagging { reference };
    }
    if !proven && needs_proof(height, others, max_lag) {
        let lowest_other = others.iter().map(|c| c.height).min().unwrap_or(0);
        return Judgement::Unproven { lowest_other };
    }
    Judgement::Fine
}

/// Another claim than `c` (among `others`, or the judged backend's own
/// `height`) is within `max_lag` of it.
fn corroborated(others: &[Claim], c: &Claim, height: u64, max_lag: u64) -> bool {
    let same = others
        .iter()
        .filter(|o| near(o.height, c.height, max_lag))
        .count();
    // `c` is near itself: a second one is needed.
    same >= 2 || near(height, c.height, max_lag)
}

fn near(a: u64, b: u64, max_lag: u64) -> bool {
    a.abs_diff(b) <= max_lag
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: u64 = 3;

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

    const LIAR: u64 = 2_000_000_000;

    #[test]
    fn a_lone_claim_makes_nobody_lag() {
        // Two honest at 20, a liar far ahead: the honest are fine.
        assert_eq!(judge(20, false, &[at(20), at(LIAR)], LAG), Judgement::Fine);
        // One honest, one liar.
        assert_eq!(judge(20, false, &[at(LIAR)], LAG), Judgement::Fine);
        assert_eq!(
            judge(20, false, &[at(i32::MAX as u64)], LAG),
            Judgement::Fine
        );
        // Two that disagree, nothing proven: nobody is drained.
        assert_eq!(judge(1000, false, &[at(1010)], LAG), Judgement::Fine);
    }

    #[test]
    fn the_liar_itself_is_unproven() {
        assert_eq!(
            judge(LIAR, false, &[at(20), at(20)], LAG),
            Judgement::Unproven { lowest_other: 20 }
        );
        assert_eq!(
            judge(1010, false, &[at(1000)], LAG),
            Judgement::Unproven { lowest_other: 1000 }
        );
        // Far above one, far below another: named by the one it would drain.
        assert_eq!(
            judge(1000, false, &[at(20), at(LIAR)], LAG),
            Judgement::Unproven { lowest_other: 20 }
        );
        // Proven, it is fine (and the others then trail it).
        assert_eq!(judge(1010, true, &[at(1000)], LAG), Judgement::Fine);
    }

    #[test]
    fn a_node_that_stopped_is_caught_by_two_that_agree() {
        assert_eq!(
            judge(1000, false, &[at(1010), at(1011)], LAG),
            Judgement::Lagging { reference: 1011 }
        );
        // ... and the two ahead need no proof: they corroborate each other.
        assert!(!needs_proof(1010, &[at(1000), at(1011)], LAG));
        assert_eq!(
            judge(1010, false, &[at(1000), at(1011)], LAG),
            Judgement::Fine
        );
    }

    #[test]
    fn a_node_behind_one_that_proves_its_height_is_caught() {
        assert_eq!(
            judge(1000, false, &[proven(1010)], LAG),
            Judgement::Lagging { reference: 1010 }
        );
        assert!(needs_proof(1010, &[at(1000)], LAG));
    }

    #[test]
    fn only_healthy_backends_set_the_reference() {
        let quarantined = Claim {
            healthy: false,
            ..proven(1010)
        };
        assert_eq!(judge(1000, false, &[quarantined], LAG), Judgement::Fine);
    }

    #[test]
    fn within_the_lag_nothing_needs_proof() {
        assert!(!needs_proof(1003, &[at(1000)], LAG));
        assert!(needs_proof(1004, &[at(1000)], LAG));
        assert!(!needs_proof(1000, &[], LAG));
        assert!(!needs_proof(20, &[at(20), at(LIAR)], LAG));
        assert_eq!(judge(1003, false, &[at(1000)], LAG), Judgement::Fine);
        assert_eq!(
            judge(u64::MAX, false, &[at(u64::MAX)], LAG),
            Judgement::Fine
        );
    }

    #[test]
    fn two_claims_that_agree_with_each_other_corroborate() {
        // The judged backend's own height corroborates another's.
        assert_eq!(
            judge(1009, false, &[at(1010), at(900)], LAG),
            Judgement::Fine
        );
        assert_eq!(
            judge(900, false, &[at(1010), at(1009)], LAG),
            Judgement::Lagging { reference: 1010 }
        );
    }
}
