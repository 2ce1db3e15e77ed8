//! What the prober knows of one network's header chain: the best tip any
//! node has proven, and enough of its ancestors to build a `getheaders`
//! locator and resume a proof where the last one stopped.
//!
//! Only headers that passed [`ChainParams::check`] enter. The last
//! `DENSE` heights are kept whole, older ones every `SPARSE` blocks, so
//! the record stays a few thousand entries on any chain.

use std::sync::{Mutex, PoisonError};

use super::agreed::Agreement;
use super::pow::{ChainParams, Tip};

/// Heights below the tip kept one by one.
const DENSE: u64 = 2048;
/// Older heights kept at this spacing (and genesis).
const SPARSE: u64 = 1000;
/// Hashes taken one by one from the top of a locator before it starts
/// doubling its steps, as Bitcoin Core builds them.
const LOCATOR_STEP_ONE: usize = 10;

/// What a probe may prove: the network's chain, and which claims need it.
pub struct Proving<'a> {
    /// What is known of the network's chain.
    pub chain: &'a Chain,
    /// True for a claimed height that must be proven.
    pub wanted: &'a (dyn Fn(u64) -> bool + Send + Sync),
}

/// The proven chain of one network; shared by every probe of it.
#[derive(Debug)]
pub struct Chain {
    params: &'static ChainParams,
    /// Ascending by height; the first is genesis. Locked for short,
    /// synchronous sections only.
    known: Mutex<Vec<Tip>>,
    /// What the network's Electrum servers agree on: an anchor assumed,
    /// never entered into `known`.
    agreement: Agreement,
}

impl Chain {
    /// A chain that knows only its genesis block.
    pub fn new(params: &'static ChainParams) -> Chain {
        Chain {
            params,
            known: Mutex::new(vec![params.genesis_tip()]),
            agreement: Agreement::default(),
        }
    }

    /// The network's rules.
    pub fn params(&self) -> &'static ChainParams {
        self.params
    }

    /// What the network's Electrum servers agree on (see
    /// [`super::agreed`]); apart from the proven record.
    pub fn agreement(&self) -> &Agreement {
        &self.agreement
    }

    /// The best proven tip.
    pub fn tip(&self) -> Tip {
        let known = self.lock();
        known
            .last()
            .copied()
            .unwrap_or_else(|| self.params.genesis_tip())
    }

    /// Known headers below `height`, newest first, spaced as a locator
    /// (ten one by one, then doubling steps) and ending at genesis. A node
    /// answers with the headers after the first of them on its chain, so a
    /// node that has `height` always sends at least one.
    pub fn locator(&self, height: u64) -> Vec<Tip> {
        let known = self.lock();
        let below = known.partition_point(|t| t.height < height);
        let Some(mut i) = below.checked_sub(1) else {
            return vec![self.params.genesis_tip()];
        };
        let mut out = Vec::new();
        let mut step = 1u64;
        loop {
            let tip = known[i];
            out.push(tip);
            if tip.height == 0 {
                return out;
            }
            if out.len() >= LOCATOR_STEP_ONE {
                step = step.saturating_mul(2);
            }
            let want = tip.height.saturating_sub(step);
            // The newest known entry at or below `want`; genesis at worst.
            i = known[..i]
                .partition_point(|t| t.height <= want)
                .saturating_sub(1);
        }
    }

    /// The known header with `hash`, if any.
    #[cfg(test)]
    pub fn find(&self, hash: &super::pow::Hash) -> Option<Tip> {
        self.lock().iter().rev().find(|t| t.hash == *hash).copied()
    }

    /// Learn `run`, validated headers that follow the known header `from`
    /// in order. Adopted only when it ends above the best known tip (a
    /// longer chain); anything else changes nothing.
    pub fn learn(&self, from: Tip, run: &[Tip]) {
        let Some(end) = run.last() else { return };
        let mut known = self.lock();
        let best = known.last().map_or(0, |t| t.height);
        let attached = known.contains(&from);
        if end.height <= best || !attached {
            return;
        }
        known.retain(|t| t.height <= from.height);
        known.extend_from_slice(run);
        let dense_from = end.height.saturating_sub(DENSE);
        known
            .retain(|t| t.height == 0 || t.height >= dense_from || t.height.is_multiple_of(SPARSE));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Tip>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Network;
    use crate::probe::pow::params;

    /// A fake run of tips (hashes from heights); the chain does not check
    /// work, only where runs attach.
    fn run(from: u64, to: u64, fork: u8) -> Vec<Tip> {
        (from..=to)
            .map(|h| {
                let mut hash = [fork; 32];
                hash[..8].copy_from_slice(&h.to_le_bytes());
                Tip {
                    height: h,
                    hash,
                    bits: 0x207f_ffff,
                    work: 2 * u128::from(h + 1),
                }
            })
            .collect()
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
    }

    #[test]
    fn learns_a_longer_run_and_builds_locators_below_a_height() {
        let c = chain();
        let genesis = c.tip();
        c.learn(genesis, &run(1, 5000, 1));
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
        let known = c.lock();
        assert!(
            known
                .iter()
                .all(|t| t.height >= 5000 - DENSE || t.height.is_multiple_of(SPARSE))
        );
        assert!(known.len() < 3000);
    }

    #[test]
    fn a_shorter_or_detached_run_changes_nothing() {
        let c = chain();
        let genesis = c.tip();
        c.learn(genesis, &run(1, 100, 1));
        let fork_point = c.find(&run(50, 50, 1)[0].hash).unwrap();
        c.learn(fork_point, &run(51, 90, 2));
        assert_eq!(c.tip(), run(100, 100, 1)[0]);
        let stranger = run(7, 7, 9)[0];
        c.learn(stranger, &run(8, 500, 9));
        assert_eq!(c.tip().height, 100);
    }

    #[test]
    fn a_longer_fork_replaces_the_tail() {
        let c = chain();
        let genesis = c.tip();
        c.learn(genesis, &run(1, 100, 1));
        let fork_point = c.find(&run(50, 50, 1)[0].hash).unwrap();
        c.learn(fork_point, &run(51, 120, 2));
        assert_eq!(c.tip(), run(120, 120, 2)[0]);
        assert!(c.find(&run(100, 100, 1)[0].hash).is_none());
        assert!(c.find(&run(50, 50, 1)[0].hash).is_some());
    }
}
