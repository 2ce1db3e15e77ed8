//! A deterministic header chain for the simulated node: regtest headers
//! mined on demand (regtest's target passes about every second hash), so
//! the simulated node can prove the heights it announces, as a real one does.
//!
//! Every chain of the same network is the same chain: two simulated nodes at
//! heights 100 and 110 agree on the first 100 blocks, like synced nodes.

use std::sync::{Mutex, PoisonError};

use sha2::{Digest, Sha256};

use crate::probe::headers::MAX_PER_MESSAGE;
use crate::probe::pow::{ChainParams, HEADER_LEN, Hash, Header, Tip};

/// Seconds between simulated blocks (Litecoin's 2.5 minutes).
const SPACING: u32 = 150;
/// Genesis time of the regtest networks.
const GENESIS_TIME: u32 = 1_296_688_602;

/// Headers mined so far, extended on demand.
#[derive(Debug)]
pub struct SimChain {
    params: &'static ChainParams,
    /// Header at height `i + 1` with its tip.
    mined: Mutex<Vec<(Header, Tip)>>,
}

impl SimChain {
    /// A chain of `params`' network; only networks with a trivial target
    /// (regtest) can be mined in reasonable time.
    pub fn new(params: &'static ChainParams) -> SimChain {
        SimChain {
            params,
            mined: Mutex::new(Vec::new()),
        }
    }

    /// What a node at `height` answers to a `getheaders` with `locator`:
    /// the headers after the first locator hash on its chain (genesis when
    /// none is), up to `height`, at most [`MAX_PER_MESSAGE`]. Mines what is
    /// missing: call it off the async threads.
    pub fn headers_after(&self, locator: &[Hash], height: u64) -> Vec<Header> {
        let mut mined = self.mined.lock().unwrap_or_else(PoisonError::into_inner);
        let known = |hash: &Hash| -> Option<u64> {
            if *hash == self.params.genesis {
                return Some(0);
            }
            mined
                .iter()
                .position(|(_, tip)| tip.hash == *hash)
                .map(|i| i as u64 + 1)
                .filter(|h| *h <= height)
        };
        let from = locator.iter().find_map(known).unwrap_or(0);
        let to = height.min(from + MAX_PER_MESSAGE as u64);
        while (mined.len() as u64) < to {
            let prev = mined
                .last()
                .map_or(self.params.genesis_tip(), |(_, tip)| *tip);
            let next = mine(self.params, &prev, prev.bits);
            mined.push(next);
        }
        let (from, to) = (from as usize, to as usize);
        mined[from..to.max(from)]
            .iter()
            .map(|(h, _)| h.clone())
            .collect()
    }
}

/// The header after `prev` on `params`' network with target `bits`, which
/// the network must allow there (or this never returns), with its tip.
/// Regtest's limit needs about two hashes, each halving of the target twice
/// as many. Every call with the same arguments mines the same header.
pub fn mine(params: &ChainParams, prev: &Tip, bits: u32) -> (Header, Tip) {
    let height = prev.height + 1;
    let mut raw = [0u8; HEADER_LEN];
    raw[..4].copy_from_slice(&0x2000_0000u32.to_le_bytes());
    raw[4..36].copy_from_slice(&prev.hash);
    let merkle: [u8; 32] = Sha256::digest(height.to_le_bytes()).into();
    raw[36..68].copy_from_slice(&merkle);
    let mut time = GENESIS_TIME.wrapping_add(SPACING.wrapping_mul(height as u32));
    raw[72..76].copy_from_slice(&bits.to_le_bytes());
    let mut nonce = 0u32;
    loop {
        raw[68..72].copy_from_slice(&time.to_le_bytes());
        raw[76..80].copy_from_slice(&nonce.to_le_bytes());
        let header = Header { raw };
        if let Ok(tip) = params.check(prev, &header) {
            return (header, tip);
        }
        nonce = nonce.wrapping_add(1);
        if nonce == 0 {
            time = time.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Network;
    use crate::probe::pow::params;

    #[test]
    fn serves_valid_linked_headers_after_the_locator() {
        let chain = SimChain::new(params(Network::LitecoinRegtest).unwrap());
        let p = chain.params;
        let first = chain.headers_after(&[p.genesis], 30);
        assert_eq!(first.len(), 30);
        let mut tip = p.genesis_tip();
        for h in &first {
            tip = p.check(&tip, h).unwrap();
        }
        assert_eq!(tip.height, 30);
        // After a known hash: the rest; at the tip: nothing.
        let after_ten = chain.headers_after(&[first[9].hash(), p.genesis], 30);
        assert_eq!(after_ten, first[10..]);
        assert!(chain.headers_after(&[tip.hash], 30).is_empty());
        // A hash above the node's height is not on its chain.
        assert_eq!(chain.headers_after(&[tip.hash, p.genesis], 20), first[..20]);
        // Unknown hashes: from genesis.
        assert_eq!(chain.headers_after(&[[7u8; 32]], 5), first[..5]);
    }
}
