//! Chain work: what a block's proof of work counts for when two chains are
//! weighed. A chain's work is the sum over its blocks, so a long run of
//! blocks at the easiest target weighs less than a shorter, harder one:
//! height alone proves nothing about which chain the network follows.
//!
//! Pure arithmetic, as Bitcoin Core's `GetBlockProof`: 2^256 / (target + 1).

use super::pow::target;

/// The work of one block whose compact target is `bits`:
/// `2^256 / (target + 1)`, exactly, saturating at `u128::MAX` (a target
/// under 2^128, far beyond any network's difficulty); 0 for bits that
/// encode no valid, non-zero target.
pub fn block_work(bits: u32) -> u128 {
    let Some(target) = target(bits) else {
        return 0;
    };
    let t = U256::from_be(target);
    if t == U256::ZERO {
        return 0;
    }
    let Some(d) = t.plus_one() else {
        return 1;
    };
    // 2^256 / d needs 257 bits; (2^256 - 1 - t) / d + 1 is the same and
    // needs 256.
    if d.hi <= 1 && (d.hi == 0 || d.lo == 0) {
        // d <= 2^128: the quotient is 2^128 or more.
        return u128::MAX;
    }
    quotient_below_2_128(t.not(), d).saturating_add(1)
}

/// `n / d` for `d > 2^128`, which keeps the quotient under 2^128: restoring
/// division over the low 128 bits of `n`, from the remainder `n >> 128`
/// (already below `d`).
fn quotient_below_2_128(n: U256, d: U256) -> u128 {
    let mut r = U256 { hi: 0, lo: n.hi };
    let mut q = 0u128;
    for i in (0..128).rev() {
        let (shifted, carry) = r.shl1((n.lo >> i) & 1);
        // With the carry the true remainder is 2^256 + shifted, above d.
        r = if carry || shifted >= d {
            q |= 1 << i;
            shifted.wrapping_sub(d)
        } else {
            shifted
        };
    }
    q
}

/// An unsigned 256-bit number; fields ordered so the derived order is the
/// numeric one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct U256 {
    hi: u128,
    lo: u128,
}

impl U256 {
    const ZERO: U256 = U256 { hi: 0, lo: 0 };

    fn from_be(bytes: [u8; 32]) -> U256 {
        let mut hi = [0u8; 16];
        let mut lo = [0u8; 16];
        hi.copy_from_slice(&bytes[..16]);
        lo.copy_from_slice(&bytes[16..]);
        U256 {
            hi: u128::from_be_bytes(hi),
            lo: u128::from_be_bytes(lo),
        }
    }

    fn plus_one(self) -> Option<U256> {
        match self.lo.checked_add(1) {
            Some(lo) => Some(U256 { hi: self.hi, lo }),
            None => self.hi.checked_add(1).map(|hi| U256 { hi, lo: 0 }),
        }
    }

    fn not(self) -> U256 {
        U256 {
            hi: !self.hi,
            lo: !self.lo,
        }
    }

    /// `self * 2 + bit`, and whether a bit was shifted out.
    fn shl1(self, bit: u128) -> (U256, bool) {
        let shifted = U256 {
            hi: self.hi << 1 | self.lo >> 127,
            lo: self.lo << 1 | bit,
        };
        (shifted, self.hi >> 127 == 1)
    }

    fn wrapping_sub(self, other: U256) -> U256 {
        let (lo, borrow) = self.lo.overflowing_sub(other.lo);
        U256 {
            hi: self
                .hi
                .wrapping_sub(other.hi)
                .wrapping_sub(u128::from(borrow)),
            lo,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_work_of_known_targets() {
        // Bitcoin's genesis difficulty: Bitcoin Core's chainwork per block
        // at difficulty 1.
        assert_eq!(block_work(0x1d00_ffff), 0x1_0001_0001);
        // Regtest: about every second hash passes.
        assert_eq!(block_work(0x207f_ffff), 2);
        // Litecoin's limit and genesis bits.
        assert_eq!(block_work(0x1e0f_ffff), 0x10_0001);
        assert_eq!(block_work(0x1e0f_fff0), 0x10_0010);
        // Bitcoin's block 840,000, worked out with big integers.
        assert_eq!(block_work(0x1703_4219), 0x4e92_35f0_4363_4662_e0cb);
    }

    #[test]
    fn harder_targets_count_more() {
        // Down to a unit of work: 0x207ffffe counts 2, as 0x207fffff does.
        let easy_to_hard = [
            0x207f_ffff,
            0x203f_ffff,
            0x2000_ffff,
            0x1e0f_ffff,
            0x1d00_ffff,
            0x1d00_fffe,
            0x1b04_04cb,
            0x1703_4219,
            0x1100_0001,
        ];
        for pair in easy_to_hard.windows(2) {
            assert!(
                block_work(pair[0]) < block_work(pair[1]),
                "{:08x} {:08x}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn no_work_for_invalid_or_zero_targets_and_a_cap_for_tiny_ones() {
        assert_eq!(block_work(0), 0);
        assert_eq!(block_work(0x0480_0001), 0); // negative
        assert_eq!(block_work(0xff12_3456), 0); // beyond 256 bits
        // Target 1: 2^255.
        assert_eq!(block_work(0x0300_0001), u128::MAX);
        // Target 2^127: about 2^129.
        assert_eq!(block_work(0x1100_8000), u128::MAX);
        // Targets 2^128 and 2^129: 2^128 - 1 and 2^127 - 1, exactly.
        assert_eq!(block_work(0x1101_0000), u128::MAX);
        assert_eq!(block_work(0x1102_0000), u128::MAX >> 1);
    }
}
