//! Block headers and the proof-of-work rules of each known network: what a
//! header must carry for a height claim to count as proven.
//!
//! Pure: no I/O, no clock. A header passes when its proof-of-work hash
//! (double SHA-256 for Bitcoin, scrypt(1024, 1, 1) for Litecoin) is at or
//! below the target its `bits` encode, that target is within the network's
//! limit, and `bits` only changes where the network allows it to. Its
//! [`Tip`] carries the work of its chain (see [`super::work`]).

use std::fmt;

use sha2::{Digest, Sha256};

use super::work::block_work;
use crate::config::Network;

/// A block hash in wire (internal, little-endian) byte order.
pub type Hash = [u8; 32];

/// Length of a serialized block header.
pub const HEADER_LEN: usize = 80;

/// Blocks per difficulty period on every network we know.
const RETARGET_INTERVAL: u64 = 2016;

/// How a network hashes a header for its proof of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowHash {
    /// Double SHA-256 (Bitcoin).
    Sha256d,
    /// scrypt with N=1024, r=1, p=1 over the header (Litecoin).
    Scrypt,
}

/// When a network lets `bits` change from one header to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retarget {
    /// Every 2016 blocks, by at most a factor of 4 either way.
    Periodic,
    /// Any block may carry the limit; others as the chain sets them
    /// (testnets): only the limit is checked.
    MinDifficulty,
    /// Never (regtest).
    Never,
}

/// What a network's headers must satisfy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainParams {
    /// The network.
    pub network: Network,
    /// The genesis block's hash, wire order.
    pub genesis: Hash,
    /// The proof-of-work hash.
    pub pow: PowHash,
    /// The easiest target allowed, as compact bits.
    pub limit_bits: u32,
    /// The genesis block's own bits, which the blocks up to the first
    /// retarget repeat; not always the limit (Litecoin's are 0x1e0ffff0).
    pub genesis_bits: u32,
    /// The difficulty rule.
    pub retarget: Retarget,
}

impl ChainParams {
    /// The network's name in the config (`litecoin-regtest` ...).
    pub fn name(&self) -> &'static str {
        self.network.name()
    }

    /// The genesis block's hash as explorers and Electrum servers print it
    /// (display order, lower-case hex).
    pub fn genesis_hex(&self) -> String {
        self.genesis
            .iter()
            .rev()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// The parameters of a network named in the config; `None` for a custom
/// magic, whose headers cannot be checked.
pub fn params(network: Network) -> Option<&'static ChainParams> {
    NETWORKS.iter().find(|p| p.network == network)
}

const NETWORKS: [ChainParams; 6] = [
    ChainParams {
        network: Network::Litecoin,
        genesis: display_hash("12a765e31ffd4059bada1e25190f6e98c99d9714d334efa41a195a7e7e04bfe2"),
        pow: PowHash::Scrypt,
        limit_bits: 0x1e0f_ffff,
        genesis_bits: 0x1e0f_fff0,
        retarget: Retarget::Periodic,
    },
    ChainParams {
        network: Network::LitecoinTestnet,
        genesis: display_hash("4966625a4b2851d9fdee139e56211a0d88575f59ed816ff5e6a63deb4e3e29a0"),
        pow: PowHash::Scrypt,
        limit_bits: 0x1e0f_ffff,
        genesis_bits: 0x1e0f_fff0,
        retarget: Retarget::MinDifficulty,
    },
    ChainParams {
        network: Network::LitecoinRegtest,
        genesis: display_hash("530827f38f93b43ed12af0b3ad25a288dc02ed74d6d7857862df51fc56c416f9"),
        pow: PowHash::Scrypt,
        limit_bits: 0x207f_ffff,
        genesis_bits: 0x207f_ffff,
        retarget: Retarget::Never,
    },
    ChainParams {
        network: Network::Bitcoin,
        genesis: display_hash("000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f"),
        pow: PowHash::Sha256d,
        limit_bits: 0x1d00_ffff,
        genesis_bits: 0x1d00_ffff,
        retarget: Retarget::Periodic,
    },
    ChainParams {
        network: Network::BitcoinTestnet,
        genesis: display_hash("000000000933ea01ad0ee984209779baaec3ced90fa3f408719526f8d77f4943"),
        pow: PowHash::Sha256d,
        limit_bits: 0x1d00_ffff,
        genesis_bits: 0x1d00_ffff,
        retarget: Retarget::MinDifficulty,
    },
    ChainParams {
        network: Network::BitcoinRegtest,
        genesis: display_hash("0f9188f13cb7b2c71f2a335e3a4fc328bf5beb436012afca590b1a11466e2206"),
        pow: PowHash::Sha256d,
        limit_bits: 0x207f_ffff,
        genesis_bits: 0x207f_ffff,
        retarget: Retarget::Never,
    },
];

/// A hash as block explorers print it (big-endian hex) in wire order.
const fn display_hash(hex: &str) -> Hash {
    const fn nibble(c: u8) -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => panic!("not a lower-case hex digit"),
        }
    }
    let hex = hex.as_bytes();
    assert!(hex.len() == 64, "a hash is 64 hex digits");
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[31 - i] = nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]);
        i += 1;
    }
    out
}

/// A parsed 80-byte block header.
#[derive(Clone, PartialEq, Eq)]
pub struct Header {
    /// The serialized header.
    pub raw: [u8; HEADER_LEN],
}

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Header(bits {:08x})", self.bits())
    }
}

impl Header {
    /// The previous block's hash, wire order.
    pub fn prev(&self) -> Hash {
        let mut out = [0u8; 32];
        out.copy_from_slice(&self.raw[4..36]);
        out
    }

    /// The compact target.
    pub fn bits(&self) -> u32 {
        u32::from_le_bytes([self.raw[72], self.raw[73], self.raw[74], self.raw[75]])
    }

    /// The block's identity: double SHA-256 of the header.
    pub fn hash(&self) -> Hash {
        Sha256::digest(Sha256::digest(self.raw)).into()
    }

    /// The hash its proof of work is judged by.
    pub fn pow_hash(&self, pow: PowHash) -> Hash {
        match pow {
            PowHash::Sha256d => self.hash(),
            PowHash::Scrypt => scrypt_hash(&self.raw),
        }
    }
}

/// Litecoin's proof-of-work hash: scrypt(N=1024, r=1, p=1) with the header
/// as both password and salt, 32 bytes.
fn scrypt_hash(raw: &[u8; HEADER_LEN]) -> Hash {
    let mut out = [0u8; 32];
    // Fixed, valid parameters and a 32-byte output: neither call can fail.
    if let Ok(params) = scrypt::Params::new(10, 1, 1) {
        let _ = scrypt::scrypt(raw, raw, &params, &mut out);
    }
    out
}

/// Why a header does not pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PowError {
    /// It does not name the block before it.
    #[error("header at height {height} does not link to the one before")]
    Unlinked {
        /// Its height.
        height: u64,
    },
    /// Its `bits` are not a valid target within the network's limit.
    #[error("header at height {height} has target bits {bits:08x} beyond the network's limit")]
    BadTarget {
        /// Its height.
        height: u64,
        /// Its bits.
        bits: u32,
    },
    /// Its `bits` changed where the network does not allow it.
    #[error("header at height {height} changes target bits {from:08x} to {to:08x} out of turn")]
    BadRetarget {
        /// Its height.
        height: u64,
        /// The previous bits.
        from: u32,
        /// Its bits.
        to: u32,
    },
    /// Its hash is above its target.
    #[error("header at height {height} lacks the proof of work its target asks for")]
    NoWork {
        /// Its height.
        height: u64,
    },
}

/// A header known to be valid: where the next one must attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tip {
    /// Its height.
    pub height: u64,
    /// Its hash.
    pub hash: Hash,
    /// Its compact target.
    pub bits: u32,
    /// The work of its chain, genesis included (see [`block_work`]); what
    /// chains are weighed by.
    pub work: u128,
}

impl ChainParams {
    /// The genesis block as a starting point, with its own work.
    pub fn genesis_tip(&self) -> Tip {
        Tip {
            height: 0,
            hash: self.genesis,
            bits: self.genesis_bits,
            work: block_work(self.genesis_bits),
        }
    }

    /// Check `header` as the successor of `prev`; its [`Tip`] if it passes.
    ///
    /// # Errors
    /// The first rule it breaks.
    pub fn check(&self, prev: &Tip, header: &Header) -> Result<Tip, PowError> {
        let height = prev.height.saturating_add(1);
        if header.prev() != prev.hash {
            return Err(PowError::Unlinked { height });
        }
        let bits = header.bits();
        let goal = self.goal(height, bits)?;
        let in_turn = match self.retarget {
            Retarget::Never => bits == prev.bits,
            Retarget::MinDifficulty => true,
            Retarget::Periodic if !height.is_multiple_of(RETARGET_INTERVAL) => bits == prev.bits,
            Retarget::Periodic => {
                target(prev.bits).is_some_and(|old| shr2(old) <= goal && goal <= shl2(old))
            }
        };
        if !in_turn {
            return Err(PowError::BadRetarget {
                height,
                from: prev.bits,
                to: bits,
            });
        }
        self.has_work(height, header, &goal)?;
        Ok(Tip {
            height,
            hash: header.hash(),
            bits,
            work: prev.work.saturating_add(block_work(bits)),
        })
    }

    /// Check `header`, said to be at `height`, on its own: its target is
    /// valid and within the network's limit, and its hash is under it. What
    /// a lone tip header (an Electrum server's) can show: that work was
    /// done at a difficulty the network allows, not where the block sits.
    ///
    /// # Errors
    /// [`PowError::BadTarget`] or [`PowError::NoWork`].
    pub fn check_alone(&self, height: u64, header: &Header) -> Result<(), PowError> {
        let goal = self.goal(height, header.bits())?;
        self.has_work(height, header, &goal)
    }

    /// The target `bits` encode, if valid, non-zero and within the limit.
    fn goal(&self, height: u64, bits: u32) -> Result<[u8; 32], PowError> {
        let limit = target(self.limit_bits);
        target(bits)
            .filter(|t| *t != [0u8; 32] && limit.is_some_and(|l| *t <= l))
            .ok_or(PowError::BadTarget { height, bits })
    }

    /// `header`'s proof-of-work hash is at or below `goal`.
    fn has_work(&self, height: u64, header: &Header, goal: &[u8; 32]) -> Result<(), PowError> {
        let mut work = header.pow_hash(self.pow);
        work.reverse(); // to big-endian, as the target is
        if work > *goal {
            return Err(PowError::NoWork { height });
        }
        Ok(())
    }
}

/// The 256-bit target `bits` encode, big-endian; `None` when negative or
/// larger than 256 bits (Bitcoin Core's `SetCompact` rules).
pub fn target(bits: u32) -> Option<[u8; 32]> {
    let size = (bits >> 24) as usize;
    let mut word = bits & 0x007f_ffff;
    if word == 0 {
        return Some([0u8; 32]);
    }
    if bits & 0x0080_0000 != 0 {
        return None;
    }
    let shift = if size <= 3 {
        word >>= 8 * (3 - size);
        0
    } else {
        size - 3
    };
    let mut out = [0u8; 32];
    for (j, byte) in word.to_le_bytes()[..3].iter().enumerate() {
        let significance = j + shift;
        if *byte != 0 && significance >= 32 {
            return None;
        }
        if significance < 32 {
            out[31 - significance] = *byte;
        }
    }
    Some(out)
}

/// `x * 4`, saturating at 2^256 - 1.
fn shl2(x: [u8; 32]) -> [u8; 32] {
    if x[0] & 0xc0 != 0 {
        return [0xff; 32];
    }
    let mut out = [0u8; 32];
    for i in 0..32 {
        out[i] = x[i] << 2 | x.get(i + 1).map_or(0, |next| next >> 6);
    }
    out
}

/// `x / 4`.
fn shr2(x: [u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for i in 0..32 {
        let high = if i == 0 { 0 } else { x[i - 1] << 6 };
        out[i] = x[i] >> 2 | high;
    }
    out
}

#[cfg(test)]
#[path = "pow_tests.rs"]
mod tests;
