//! The lag rule: which heights may serve as the reference, who trails it,
//! and which claims must be proven before they count.
//!
//! A height is the reference only when it is corroborated (another backend
//! within `max_lag_blocks` of it) or proven (the node served the headers
//! behind it). A single backend's claim therefore never makes another
//! backend `lagging`: a node that lies about its height, or is on a chain
//! of its own, cannot drain the honest ones. Where the pool can prove
//! heights, proof outranks corroboration: a height above a proven one
//! counts only when it is proven itself, so liars that agree with each
//! other cannot outvote a node that shows its headers. Pure, table-tested.

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

/// How the pool weighs heights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// `health.max_lag_blocks`.
    pub max_lag: u64,
    /// Its probes can prove a height (`bitcoin-p2p` or `electrum*` on a
    /// named network): proof outranks corroboration.
    pub provable: bool,
}

/// What became of the judged backend's own claim in this probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    /// No proof was asked for.
    NotAsked,
    /// Its headers proved it.
    Proven,
    /// A proof was asked for and did not succeed.
    Unproven,
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
    /// More than `max_lag_blocks` above another backend, and neither
    /// proven nor (where proof outranks it) corroborated: it must not
    /// count, and its state says so.
    Unproven {
        /// The lowest height of the others: the one it would make lag.
        lowest_other: u64,
    },
}

/// True when a backend claiming `height` must be asked to prove it: it
/// would make another backend lag and no other backend is near it; where
/// the pool can prove, whenever it is that far above another (agreeing
/// liars must prove too) or below another (so its proof can outrank
/// claims above it that are only corroborated).
pub fn needs_proof(height: u64, others: &[Claim], rule: Rule) -> bool {
    let max_lag = rule.max_lag;
    let Some(lowest) = others.iter().map(|c| c.height).min() else {
        return false;
    };
    let above = height > lowest.saturating_add(max_lag);
    if rule.provable {
        let below = others
            .iter()
            .any(|c| c.height > height.saturating_add(max_lag));
        return above || below;
    }
    above && !others.iter().any(|c| near(c.height, height, max_lag))
}

/// Judge a backend at `height` whose own proof came out as `own`, against
/// the `others`.
pub fn judge(height: u64, own: Own, others: &[Claim], rule: Rule) -> Judgement {
    let max_lag = rule.max_lag;
    let proven_own = (own == Own::Proven).then_some(height);
    let reference = others
        .iter()
        .filter(|c| c.healthy && counts(c, others, height, proven_own, rule))
        .max_by_key(|c| (c.height, c.proven));
    if let Some(reference) = reference
        && reference.height > height.saturating_add(max_lag)
    {
        // Its own proof may outrank a reference that is only corroborated:
        // not judged until it was asked for one (the next probe is).
        if rule.provable && !reference.proven && own == Own::NotAsked {
            return Judgement::Fine;
        }
        return Judgement::Lagging {
            reference: reference.height,
        };
    }
    let Some(lowest_other) = others.iter().map(|c| c.height).min() else {
        return Judgement::Fine;
    };
    let proven = own == Own::Proven;
    let corroborated = others.iter().any(|c| near(c.height, height, max_lag));
    let counted = proven || (corroborated && !outranked(height, others, proven_own, rule));
    if height > lowest_other.saturating_add(max_lag) && !counted {
        return Judgement::Unproven { lowest_other };
    }
    Judgement::Fine
}

/// Whether claim `c` may set the reference: proven, or corroborated and
/// not outranked. `height` is the judged backend's, `proven_own` that
/// height when its headers proved it.
fn counts(c: &Claim, others: &[Claim], height: u64, proven_own: Option<u64>, rule: Rule) -> bool {
    c.proven
        || (corroborated(others, c, height, rule.max_lag)
            && !outranked(c.height, others, proven_own, rule))
}

/// Where proof outranks corroboration: `height` is more than `max_lag`
/// above the highest proven height (of the `others` and `proven_own`).
fn outranked(height: u64, others: &[Claim], proven_own: Option<u64>, rule: Rule) -> bool {
    let proven = others.iter().filter(|o| o.proven).map(|o| o.height);
    let highest = proven.chain(proven_own).max();
    rule.provable && highest.is_some_and(|p| height > p.saturating_add(rule.max_lag))
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
#[path = "lag_tests.rs"]
mod tests;
