use super::*;
use crate::config::Network;

/// A header from its fields; hashes in display (big-endian hex) order.
fn header(version: u32, prev: &str, merkle: &str, time: u32, bits: u32, nonce: u32) -> Header {
    let mut raw = [0u8; HEADER_LEN];
    raw[..4].copy_from_slice(&version.to_le_bytes());
    raw[4..36].copy_from_slice(&display(prev));
    raw[36..68].copy_from_slice(&display(merkle));
    raw[68..72].copy_from_slice(&time.to_le_bytes());
    raw[72..76].copy_from_slice(&bits.to_le_bytes());
    raw[76..80].copy_from_slice(&nonce.to_le_bytes());
    Header { raw }
}

fn display(hex: &str) -> Hash {
    let mut out = [0u8; 32];
    for i in 0..32 {
        out[31 - i] = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

const ZERO: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const LTC_MERKLE: &str = "97ddfbbae6be97fd6cdf3e7ca13232a3afff2353e29badfab7f73011edd4ced9";

fn litecoin_genesis() -> Header {
    header(
        1,
        ZERO,
        LTC_MERKLE,
        1_317_972_665,
        0x1e0f_fff0,
        2_084_524_493,
    )
}

/// A tip standing where genesis' parent would be, so genesis can be checked
/// as an ordinary successor.
fn before_genesis(bits: u32) -> Tip {
    Tip {
        height: 0,
        hash: [0u8; 32],
        bits,
        work: 0,
    }
}

#[test]
fn genesis_hashes_match_the_networks() {
    let ltc = params(Network::Litecoin).unwrap();
    assert_eq!(litecoin_genesis().hash(), ltc.genesis);
    let regtest = params(Network::LitecoinRegtest).unwrap();
    let g = header(1, ZERO, LTC_MERKLE, 1_296_688_602, 0x207f_ffff, 0);
    assert_eq!(g.hash(), regtest.genesis);
    let btc = params(Network::Bitcoin).unwrap();
    let merkle = "4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b";
    let g = header(1, ZERO, merkle, 1_231_006_505, 0x1d00_ffff, 2_083_236_893);
    assert_eq!(g.hash(), btc.genesis);
    assert!(params(Network::Custom).is_none());
}

#[test]
fn the_genesis_tip_carries_the_genesis_blocks_own_bits() {
    // Litecoin's genesis is not at its limit (0x1e0fffff); its successors
    // repeat the genesis block's bits until the first retarget.
    let ltc = params(Network::Litecoin).unwrap();
    assert_eq!(ltc.genesis_tip().bits, litecoin_genesis().bits());
    let btc = params(Network::Bitcoin).unwrap();
    assert_eq!(btc.genesis_tip().bits, 0x1d00_ffff);
    for net in [Network::LitecoinRegtest, Network::BitcoinRegtest] {
        let p = params(net).unwrap();
        assert_eq!(p.genesis_tip().bits, p.limit_bits, "{net:?}");
    }
}

#[test]
fn litecoins_first_block_follows_its_genesis() {
    // Block 1 of Litecoin's main chain, as mined (hash 80ca095e...c78f).
    let ltc = params(Network::Litecoin).unwrap();
    let one = header(
        1,
        "12a765e31ffd4059bada1e25190f6e98c99d9714d334efa41a195a7e7e04bfe2",
        "fa3906a4219078364372d0e2715f93e822edd0b47ce146c71ba7ba57179b50f6",
        1_318_055_359,
        0x1e0f_fff0,
        272_255,
    );
    assert_eq!(
        one.hash(),
        display("80ca095ed10b02e53d769eb6eaf92cd04e9e0759e5be4a8477b42911ba49c78f")
    );
    let tip = ltc.check(&ltc.genesis_tip(), &one).unwrap();
    assert_eq!(
        (tip.height, tip.hash, tip.bits),
        (1, one.hash(), 0x1e0f_fff0)
    );
    // Its chain's work: genesis's and its own, as Litecoin Core's
    // chainwork at block 1 (0x200020).
    assert_eq!(ltc.genesis_tip().work, 0x10_0010);
    assert_eq!(tip.work, 0x20_0020);
    // Bits other than the genesis block's are out of turn before the
    // first retarget, the limit's too.
    let limit = Tip {
        bits: ltc.limit_bits,
        ..ltc.genesis_tip()
    };
    assert_eq!(
        ltc.check(&limit, &one),
        Err(PowError::BadRetarget {
            height: 1,
            from: 0x1e0f_ffff,
            to: 0x1e0f_fff0
        })
    );
}

#[test]
fn genesis_hashes_print_as_explorers_show_them() {
    let regtest = params(Network::LitecoinRegtest).unwrap();
    assert_eq!(
        regtest.genesis_hex(),
        "530827f38f93b43ed12af0b3ad25a288dc02ed74d6d7857862df51fc56c416f9"
    );
    let btc = params(Network::Bitcoin).unwrap();
    assert_eq!(
        btc.genesis_hex(),
        "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f"
    );
}

#[test]
fn real_genesis_headers_carry_their_work() {
    // Litecoin: scrypt; the header's double SHA-256 is far above its target,
    // so only the scrypt rule accepts it.
    let ltc = params(Network::Litecoin).unwrap();
    let g = litecoin_genesis();
    let tip = ltc.check(&before_genesis(0x1e0f_fff0), &g).unwrap();
    assert_eq!(tip.hash, ltc.genesis);
    let as_bitcoin = ChainParams {
        pow: PowHash::Sha256d,
        ..*ltc
    };
    assert_eq!(
        as_bitcoin.check(&before_genesis(0x1e0f_fff0), &g),
        Err(PowError::NoWork { height: 1 })
    );
    // Bitcoin: double SHA-256.
    let btc = params(Network::Bitcoin).unwrap();
    let merkle = "4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b";
    let g = header(1, ZERO, merkle, 1_231_006_505, 0x1d00_ffff, 2_083_236_893);
    assert!(btc.check(&before_genesis(0x1d00_ffff), &g).is_ok());
}

#[test]
fn a_changed_nonce_loses_the_work() {
    let ltc = params(Network::Litecoin).unwrap();
    let mut g = litecoin_genesis();
    g.raw[76] ^= 1;
    assert_eq!(
        ltc.check(&before_genesis(0x1e0f_fff0), &g),
        Err(PowError::NoWork { height: 1 })
    );
}

#[test]
fn a_lone_header_is_judged_by_its_own_target() {
    let ltc = params(Network::Litecoin).unwrap();
    let g = litecoin_genesis();
    // No predecessor needed, whatever height it is said to be at.
    assert_eq!(ltc.check_alone(2_800_000, &g), Ok(()));
    let mut worse = g.clone();
    worse.raw[76] ^= 1;
    assert_eq!(
        ltc.check_alone(9, &worse),
        Err(PowError::NoWork { height: 9 })
    );
    // Easier than the network allows: refused before any hashing.
    let mut easy = g;
    easy.raw[72..76].copy_from_slice(&u32::to_le_bytes(0x207f_ffff));
    assert_eq!(
        ltc.check_alone(9, &easy),
        Err(PowError::BadTarget {
            height: 9,
            bits: 0x207f_ffff
        })
    );
}

#[test]
fn headers_must_link() {
    let ltc = params(Network::Litecoin).unwrap();
    let other = Tip {
        height: 7,
        hash: [1u8; 32],
        bits: 0x1e0f_fff0,
        work: 0,
    };
    assert_eq!(
        ltc.check(&other, &litecoin_genesis()),
        Err(PowError::Unlinked { height: 8 })
    );
}

#[test]
fn compact_targets() {
    let t = target(0x1d00_ffff).unwrap();
    assert_eq!(&t[..6], &[0, 0, 0, 0, 0xff, 0xff]);
    assert!(t[6..].iter().all(|b| *b == 0));
    let t = target(0x207f_ffff).unwrap();
    assert_eq!(&t[..3], &[0x7f, 0xff, 0xff]);
    let t = target(0x0300_1234).unwrap();
    assert_eq!(&t[29..], &[0x00, 0x12, 0x34]);
    let t = target(0x0112_3456).unwrap();
    assert_eq!(t[31], 0x12);
    assert_eq!(target(0x0480_0000), Some([0u8; 32])); // zero mantissa
    assert_eq!(target(0x0492_3456), None); // negative
    assert_eq!(target(0x2301_0000), None); // 2^272: too large
    assert_eq!(target(0xff12_3456), None);
}

#[test]
fn targets_beyond_the_limit_or_zero_are_refused() {
    let ltc = params(Network::Litecoin).unwrap();
    for bits in [0x1f00_ffff, 0x0000_0000, 0x1e80_0000 | 0x1234, 0xff7f_ffff] {
        let mut g = litecoin_genesis();
        g.raw[72..76].copy_from_slice(&u32::to_le_bytes(bits));
        assert_eq!(
            ltc.check(&before_genesis(bits), &g),
            Err(PowError::BadTarget { height: 1, bits }),
            "{bits:08x}"
        );
    }
}

#[test]
fn bits_change_only_in_turn() {
    let btc = params(Network::Bitcoin).unwrap();
    let at = |height: u64| Tip {
        height,
        hash: [0u8; 32],
        bits: 0x1c00_ffff,
        work: 0,
    };
    let with_bits = |bits: u32| {
        let mut h = header(1, ZERO, ZERO, 0, bits, 0);
        h.raw[4..36].fill(0);
        h
    };
    // Mid-period: any change is out of turn (checked before the work).
    assert_eq!(
        btc.check(&at(100), &with_bits(0x1c01_0000)),
        Err(PowError::BadRetarget {
            height: 101,
            from: 0x1c00_ffff,
            to: 0x1c01_0000
        })
    );
    // At a boundary: within a factor of 4 is in turn (then the work fails).
    let boundary = at(2015);
    assert_eq!(
        btc.check(&boundary, &with_bits(0x1c03_fffc)),
        Err(PowError::NoWork { height: 2016 })
    );
    assert_eq!(
        btc.check(&boundary, &with_bits(0x1c00_4000)),
        Err(PowError::NoWork { height: 2016 })
    );
    // Beyond a factor of 4 either way is not.
    for bits in [0x1c04_0000, 0x1c00_3fff] {
        assert_eq!(
            btc.check(&boundary, &with_bits(bits)),
            Err(PowError::BadRetarget {
                height: 2016,
                from: 0x1c00_ffff,
                to: bits
            }),
            "{bits:08x}"
        );
    }
    // Regtest never retargets; testnets may drop to the limit anywhere.
    let regtest = params(Network::BitcoinRegtest).unwrap();
    let tip = Tip {
        height: 2015,
        hash: [0u8; 32],
        bits: 0x207f_ffff,
        work: 0,
    };
    assert!(matches!(
        regtest.check(&tip, &with_bits(0x207f_fffe)),
        Err(PowError::BadRetarget { .. })
    ));
    let testnet = params(Network::BitcoinTestnet).unwrap();
    assert!(!matches!(
        testnet.check(&at(100), &with_bits(0x1d00_ffff)),
        Err(PowError::BadRetarget { .. })
    ));
}

#[test]
fn shifts_by_two_bits() {
    let mut x = [0u8; 32];
    x[31] = 0x81;
    x[30] = 0x01;
    let up = shl2(x);
    assert_eq!((up[30], up[31]), (0x06, 0x04));
    assert_eq!(shr2(up), x);
    let mut top = [0u8; 32];
    top[0] = 0x40;
    assert_eq!(shl2(top), [0xff; 32]);
}

/// What checking one header costs, and what weighing it (its chain work)
/// adds, for the note. Run:
/// `cargo test --release --lib pow::tests::timing -- --ignored --nocapture`
#[test]
#[ignore = "prints timings; asserts nothing on them"]
fn timing() {
    use std::hint::black_box;
    use std::time::Instant;

    let g = litecoin_genesis();
    let per = |rounds: u32, f: &dyn Fn()| {
        let start = Instant::now();
        for _ in 0..rounds {
            f();
        }
        start.elapsed().as_nanos() as f64 / f64::from(rounds)
    };
    let sha = per(200_000, &|| {
        black_box(black_box(&g).hash());
    });
    let scrypt = per(2_000, &|| {
        black_box(black_box(&g).pow_hash(PowHash::Scrypt));
    });
    let work = per(200_000, &|| {
        black_box(crate::probe::work::block_work(black_box(0x1703_4e3a)));
    });
    println!("| per header | ns |");
    println!("|---|---:|");
    println!("| double SHA-256 (Bitcoin's work, every header's hash) | {sha:.0} |");
    println!("| scrypt(1024, 1, 1) (Litecoin's work) | {scrypt:.0} |");
    println!("| chain work of its bits | {work:.0} |");
}
