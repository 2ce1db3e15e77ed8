//! Tests of the wire format: spec vectors, every error, and garbage that must not panic.

use super::*;

const BITCOIN: Magic = [0xf9, 0xbe, 0xb4, 0xd9];
const LITECOIN: Magic = [0xfb, 0xc0, 0xb6, 0xdb];

/// The `version` hexdump of the Bitcoin wiki's protocol documentation
/// (protocol 60002, `/Satoshi:0.7.2/`, height 212672, no relay byte).
const WIKI_VERSION: &str = "
    f9 be b4 d9 76 65 72 73 69 6f 6e 00 00 00 00 00
    64 00 00 00 35 8d 49 32 62 ea 00 00 01 00 00 00
    00 00 00 00 11 b2 d0 50 00 00 00 00 01 00 00 00
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 ff ff
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    00 00 00 00 00 00 00 00 ff ff 00 00 00 00 00 00
    3b 2e b3 5d 8c e6 17 65 0f 2f 53 61 74 6f 73 68
    69 3a 30 2e 37 2e 32 2f c0 3e 03 00";

/// A `version` as Bitcoin Core 23.0 sends it (protocol 70016, height 759438, relay on).
const CORE_VERSION: &str = "
    f9be b4d9 7665 7273 696f 6e00 0000 0000
    6600 0000 bdca d498 8011 0100 0d04 0000
    0000 0000 5083 5063 0000 0000 0000 0000
    0000 0000 0000 0000 0000 0000 0000 0000
    0000 0000 0000 0d04 0000 0000 0000 0000
    0000 0000 0000 0000 0000 0000 0000 0000
    ff0a e912 84bd d3e2 102f 5361 746f 7368
    693a 3233 2e30 2e30 2f8e 960b 0001";

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn decode_all(magic: Magic, bytes: &[u8]) -> Result<Vec<Message>, WireError> {
    let mut d = Decoder::new(magic);
    d.feed(bytes);
    let mut out = Vec::new();
    while let Some(m) = d.next_message()? {
        out.push(m);
    }
    d.finish()?;
    Ok(out)
}

fn params() -> VersionParams {
    VersionParams {
        services: 0,
        timestamp: 1_700_000_000,
        receiver: "10.0.0.9:9333".parse().unwrap(),
        sender: "[2001:db8::1]:19335".parse().unwrap(),
        nonce: 0x0102_0304_0506_0708,
        user_agent: user_agent(),
        start_height: 0,
    }
}

#[test]
fn checksum_vectors() {
    assert_eq!(checksum(b""), [0x5d, 0xf6, 0xe0, 0xe2]);
    // The wiki's double-SHA256 example: "hello" -> 9595c9df...
    assert_eq!(checksum(b"hello"), [0x95, 0x95, 0xc9, 0xdf]);
}

#[test]
fn verack_is_the_spec_bytes() {
    let want = hex("fbc0b6db 76657261636b000000000000 00000000 5df6e0e2");
    assert_eq!(encode(LITECOIN, "verack", &[]), want);
    let msgs = decode_all(LITECOIN, &want).unwrap();
    assert_eq!(
        msgs,
        vec![Message {
            command: "verack".into(),
            payload: vec![]
        }]
    );
}

#[test]
fn wiki_version_decodes_and_reencodes() {
    let bytes = hex(WIKI_VERSION);
    let msgs = decode_all(BITCOIN, &bytes).unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].command, "version");
    assert_eq!(encode(BITCOIN, "version", &msgs[0].payload), bytes);
    let v = Version::parse(&msgs[0].payload).unwrap();
    assert_eq!(v.version, 60002);
    assert_eq!(v.services, 1);
    assert_eq!(v.timestamp, 0x50d0_b211);
    assert_eq!(v.sender, "0.0.0.0:0".parse().unwrap());
    assert_eq!(v.nonce, 0x6517_e68c_5db3_2e3b);
    assert_eq!(v.user_agent, "/Satoshi:0.7.2/");
    assert_eq!(v.start_height, 212_672);
    assert_eq!(v.relay, None, "60002 predates the relay byte");
}

#[test]
fn wiki_version_with_litecoin_magic() {
    let mut bytes = hex(WIKI_VERSION);
    bytes[..4].copy_from_slice(&LITECOIN);
    let msgs = decode_all(LITECOIN, &bytes).unwrap();
    assert_eq!(
        Version::parse(&msgs[0].payload).unwrap().start_height,
        212_672
    );
    let err = decode_all(BITCOIN, &bytes).unwrap_err();
    assert!(matches!(err, WireError::WrongMagic { .. }), "{err}");
}

#[test]
fn core_version_capture_decodes() {
    let msgs = decode_all(BITCOIN, &hex(CORE_VERSION)).unwrap();
    let v = Version::parse(&msgs[0].payload).unwrap();
    assert_eq!(v.version, 70016);
    assert_eq!(v.services, 0x040d);
    assert_eq!(v.user_agent, "/Satoshi:23.0.0/");
    assert_eq!(v.start_height, 759_438);
    assert_eq!(v.relay, Some(true));
}

#[test]
fn our_version_round_trips() {
    let p = params();
    let payload = version_payload(&p);
    let ua = format!("/pin-proxy:{}/", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        payload.len(),
        4 + 8 + 8 + 26 + 26 + 8 + 1 + ua.len() + 4 + 1
    );
    assert_eq!(payload[..4], hex("80110100")[..], "70016 little-endian");
    // addr_recv: services 0, ::ffff:10.0.0.9, port 9333 big-endian.
    assert_eq!(
        payload[20..46],
        hex("0000000000000000 00000000000000000000ffff0a000009 2475")[..]
    );
    assert_eq!(payload.last(), Some(&0), "relay false");
    let v = Version::parse(&payload).unwrap();
    assert_eq!(v.version, PROTOCOL_VERSION);
    assert_eq!(v.services, 0);
    assert_eq!(v.timestamp, p.timestamp);
    assert_eq!(v.receiver, p.receiver);
    assert_eq!(v.sender, p.sender);
    assert_eq!(v.nonce, p.nonce);
    assert_eq!(v.user_agent, ua);
    assert_eq!(v.start_height, 0);
    assert_eq!(v.relay, Some(false));
}

#[test]
fn decoder_handles_any_split_and_back_to_back_messages() {
    let mut stream = encode(LITECOIN, "wtxidrelay", &[]);
    stream.extend(encode(LITECOIN, "version", &version_payload(&params())));
    stream.extend(encode(LITECOIN, "ping", &7u64.to_le_bytes()));
    let whole = decode_all(LITECOIN, &stream).unwrap();
    assert_eq!(whole.len(), 3);
    for chunk in 1..=stream.len() {
        let mut d = Decoder::new(LITECOIN);
        let mut got = Vec::new();
        for piece in stream.chunks(chunk) {
            d.feed(piece);
            while let Some(m) = d.next_message().unwrap() {
                got.push(m);
            }
        }
        d.finish().unwrap();
        assert_eq!(got, whole, "chunk size {chunk}");
        assert_eq!(d.buffered(), 0);
    }
}

#[test]
fn wrong_magic_is_refused_from_the_first_byte() {
    let mut d = Decoder::new(LITECOIN);
    d.feed(b"H");
    let err = d.next_message().unwrap_err();
    assert_eq!(
        err,
        WireError::WrongMagic {
            expected: LITECOIN,
            got: b"H".to_vec()
        }
    );
    assert_eq!(err.to_string(), "wrong magic 48 (expected fbc0b6db)");
    // The decoder stays failed.
    d.feed(&encode(LITECOIN, "verack", &[]));
    assert_eq!(d.next_message().unwrap_err(), err);
    assert_eq!(d.finish().unwrap_err(), err);
}

#[test]
fn bad_checksum_is_refused() {
    let mut bytes = encode(LITECOIN, "ping", &1u64.to_le_bytes());
    *bytes.last_mut().unwrap() ^= 1;
    let err = decode_all(LITECOIN, &bytes).unwrap_err();
    assert_eq!(
        err,
        WireError::BadChecksum {
            command: "ping".into()
        }
    );
}

#[test]
fn oversized_length_is_refused_from_the_header_alone() {
    let mut header = encode(LITECOIN, "block", &[]);
    header[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut d = Decoder::new(LITECOIN);
    d.feed(&header);
    let err = d.next_message().unwrap_err();
    assert_eq!(
        err,
        WireError::Oversized {
            command: "block".into(),
            len: u32::MAX,
            max: MAX_PAYLOAD
        }
    );
    // A length at the cap is fine (it waits for the payload).
    let mut d = Decoder::with_max_payload(LITECOIN, 100);
    let mut at_cap = header.clone();
    at_cap[16..20].copy_from_slice(&100u32.to_le_bytes());
    d.feed(&at_cap);
    assert_eq!(d.next_message(), Ok(None));
    assert_eq!(
        d.finish(),
        Err(WireError::Truncated {
            have: 24,
            need: 124
        })
    );
}

#[test]
fn truncation_at_eof_is_reported() {
    let msg = encode(LITECOIN, "ping", &9u64.to_le_bytes());
    for cut in 1..msg.len() {
        let mut d = Decoder::new(LITECOIN);
        d.feed(&msg[..cut]);
        assert_eq!(d.next_message(), Ok(None), "cut {cut}");
        let need = if cut < 20 { HEADER_LEN } else { msg.len() };
        assert_eq!(d.finish(), Err(WireError::Truncated { have: cut, need }));
    }
}

#[test]
fn garbage_commands_are_refused() {
    for raw in [
        &b"vers\xffon\0\0\0\0\0"[..],
        b"version\0x\0\0\0",
        b"\0\0\0\0\0\0\0\0\0\0\0\0",
        b"ver\nion\0\0\0\0\0",
    ] {
        let mut bytes = LITECOIN.to_vec();
        bytes.extend_from_slice(raw);
        bytes.extend_from_slice(&hex("00000000 5df6e0e2"));
        let err = decode_all(LITECOIN, &bytes).unwrap_err();
        assert_eq!(err, WireError::BadCommand(raw.to_vec()));
    }
    // Refused as soon as the bad byte arrives.
    let mut d = Decoder::new(LITECOIN);
    d.feed(&LITECOIN);
    d.feed(b"ve\x01");
    assert!(matches!(d.next_message(), Err(WireError::BadCommand(_))));
}

#[test]
fn version_payload_errors() {
    let good = version_payload(&params());
    // Cut anywhere before the end of start_height: malformed. Without the relay byte: fine.
    for cut in 0..good.len() - 1 {
        let err = Version::parse(&good[..cut]).unwrap_err();
        assert!(
            matches!(
                err,
                WireError::Malformed {
                    command: "version",
                    ..
                }
            ),
            "{err}"
        );
    }
    assert_eq!(Version::parse(&good[..good.len() - 1]).unwrap().relay, None);
    // Trailing bytes from a newer protocol are ignored.
    let mut longer = good.clone();
    longer.extend_from_slice(b"future");
    assert_eq!(Version::parse(&longer).unwrap().relay, Some(false));

    let with_agent = |agent_len: &[u8], agent: &[u8]| {
        let mut p = good[..80].to_vec();
        p.extend_from_slice(agent_len);
        p.extend_from_slice(agent);
        p.extend_from_slice(&5i32.to_le_bytes());
        Version::parse(&p)
    };
    let max = vec![b'a'; MAX_USER_AGENT];
    assert_eq!(
        with_agent(&hex("fd0001"), &max).unwrap().user_agent.len(),
        256
    );
    // A longer one is cut to the first 256 bytes; what follows it is read.
    let mut long = vec![b'a'; MAX_USER_AGENT];
    long.push(b'b');
    let cut = with_agent(&hex("fd0101"), &long).unwrap();
    assert_eq!(cut.user_agent, "a".repeat(MAX_USER_AGENT));
    assert_eq!(cut.start_height, 5);
    // A length beyond the payload is cut short, not read.
    let err = with_agent(&hex("fd0101"), b"abc").unwrap_err();
    assert!(err.to_string().contains("cut short"), "{err}");
    // A huge announced length is refused before anything is read or allocated.
    assert!(with_agent(&hex("ffffffffffffffffff"), b"").is_err());
    // Non-canonical lengths are refused, as Bitcoin Core does.
    let err = with_agent(&hex("fd0300"), b"abc").unwrap_err();
    assert!(err.to_string().contains("non-canonical"), "{err}");
    // Invalid UTF-8 is replaced, not fatal.
    assert_eq!(with_agent(&[2], b"\xffa").unwrap().user_agent, "\u{fffd}a");
    assert_eq!(with_agent(&[0], b"").unwrap().start_height, 5);
}

#[test]
fn var_int_encoding_is_canonical() {
    for (n, want) in [
        (0xfc, "fc"),
        (0xfd, "fdfd00"),
        (0xffff, "fdffff"),
        (0x1_0000, "fe00000100"),
        (0x1_0000_0000, "ff0000000001000000"),
    ] {
        let mut out = Vec::new();
        put_var_int(&mut out, n);
        assert_eq!(out, hex(want), "{n:#x}");
        assert_eq!(Reader(&out).var_int().unwrap(), n);
    }
}

/// xorshift64*: deterministic, so a failure is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn random_garbage_and_mutations_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut valid = encode(LITECOIN, "version", &version_payload(&params()));
    let core_at = valid.len();
    valid.extend(hex(CORE_VERSION));
    valid[core_at..core_at + 4].copy_from_slice(&LITECOIN);
    valid.extend(encode(LITECOIN, "verack", &[]));
    let (mut parsed, mut errors, mut truncated) = (0, 0, 0);
    for round in 0..3000 {
        let mut bytes = match round % 3 {
            // Pure noise, sometimes behind a valid magic so the header parser is reached.
            0 => {
                let mut b = if rng.below(2) == 0 {
                    LITECOIN.to_vec()
                } else {
                    Vec::new()
                };
                b.extend((0..rng.below(200)).map(|_| rng.next() as u8));
                b
            }
            // A valid stream, truncated.
            1 => valid[..rng.below(valid.len())].to_vec(),
            // A valid stream with a few bytes flipped.
            _ => {
                let mut b = valid.clone();
                for _ in 0..=rng.below(4) {
                    let i = rng.below(b.len());
                    b[i] ^= (rng.next() as u8) | 1;
                }
                b
            }
        };
        if rng.below(4) == 0 {
            bytes.truncate(rng.below(bytes.len() + 1));
        }
        let mut d = Decoder::with_max_payload(LITECOIN, 1 + rng.below(4096));
        for piece in bytes.chunks(1 + rng.below(64)) {
            d.feed(piece);
            loop {
                match d.next_message() {
                    // Whatever decodes, the version parser must also survive.
                    Ok(Some(m)) => parsed += usize::from(Version::parse(&m.payload).is_ok()),
                    Ok(None) => break,
                    Err(_) => {
                        errors += 1;
                        break;
                    }
                }
            }
        }
        truncated += usize::from(matches!(d.finish(), Err(WireError::Truncated { .. })));
        assert!(Version::parse(&bytes).is_err() || bytes.len() >= 85);
        assert!(d.buffered() <= bytes.len());
    }
    // The rounds reached every outcome, not just the first check.
    assert!(
        parsed > 100 && errors > 100 && truncated > 100,
        "{parsed} {errors} {truncated}"
    );
}
