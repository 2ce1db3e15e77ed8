//! The PROXY header parser on headers HAProxy 2.6 sent, on built v1 and v2
//! headers, on every prefix of them, and on bytes no header begins with.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

use super::*;

/// Bytes from hex (test fixtures only).
fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn proxied(client: &str, dest: &str) -> ProxyHeader {
    ProxyHeader::Proxied {
        client: addr(client),
        dest: addr(dest),
    }
}

fn done(header: ProxyHeader, len: usize) -> Parse {
    Parse::Done { header, len }
}

/// The reason of an `Invalid`, or a panic naming what came instead.
fn reason(buf: &[u8]) -> String {
    match parse(buf) {
        Parse::Invalid(reason) => reason,
        other => panic!("{:?}: {other:?}, not Invalid", String::from_utf8_lossy(buf)),
    }
}

/// `header` (a whole header) parses to `expected`, with and without data
/// after it, and each of its proper prefixes is Incomplete.
fn check_header(header: &[u8], expected: ProxyHeader) {
    assert_eq!(parse(header), done(expected, header.len()));
    let mut with_data = header.to_vec();
    with_data.extend_from_slice(b"\xf9\xbe\xb4\xd9version");
    assert_eq!(parse(&with_data), done(expected, header.len()));
    for cut in 0..header.len() {
        assert_eq!(
            parse(&header[..cut]),
            Parse::Incomplete,
            "prefix of {cut} bytes of {header:?}"
        );
    }
}

/// A v2 header: version 2, `command`, `family_protocol`, then `block`
/// (addresses and TLVs).
fn v2_header(command: u8, family_protocol: u8, block: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(0x20 | command);
    out.push(family_protocol);
    out.extend_from_slice(&u16::try_from(block.len()).unwrap().to_be_bytes());
    out.extend_from_slice(block);
    out
}

// What HAProxy 2.6.12 (Debian 12) sent on loopback, `send-proxy` and
// `send-proxy-v2`, each followed by the client's `hello`.
const HAPROXY_V1_TCP4: &[u8] = b"PROXY TCP4 127.0.0.2 127.0.0.1 33255 19001\r\nhello";
const HAPROXY_V1_TCP6: &[u8] = b"PROXY TCP6 ::1 ::1 38772 19003\r\nhello";
const HAPROXY_V2_TCP4: &str = "0d0a0d0a000d0a515549540a2111000c7f0000037f000001d6154a3a68656c6c6f";
const HAPROXY_V2_TCP6: &str = "0d0a0d0a000d0a515549540a21210024\
     00000000000000000000000000000001000000000000000000000000000000019\
     8cc4a3c68656c6c6f";
/// `proxy-v2-options unique-id,crc32c`: a CRC32C and a unique-id TLV.
const HAPROXY_V2_TLVS: &str = "0d0a0d0a000d0a515549540a2111003f7f0000047f000001becb4a3d\
     030004fb7545c405002937463030303030343a424543425f37463030303030313a\
     344133445f36423131314430305f3030303468656c6c6f";
/// Its health check (`check-send-proxy`): LOCAL, no address.
const HAPROXY_V2_CHECK: &str = "0d0a0d0a000d0a515549540a20000000";

#[test]
fn haproxy_headers_parse_and_keep_the_client_data() {
    let cases = [
        (
            HAPROXY_V1_TCP4.to_vec(),
            proxied("127.0.0.2:33255", "127.0.0.1:19001"),
        ),
        (
            HAPROXY_V1_TCP6.to_vec(),
            proxied("[::1]:38772", "[::1]:19003"),
        ),
        (
            hex(HAPROXY_V2_TCP4),
            proxied("127.0.0.3:54805", "127.0.0.1:19002"),
        ),
        (hex(HAPROXY_V2_TCP6), proxied("[::1]:39116", "[::1]:19004")),
        (
            hex(HAPROXY_V2_TLVS),
            proxied("127.0.0.4:48843", "127.0.0.1:19005"),
        ),
    ];
    for (bytes, expected) in cases {
        let Parse::Done { header, len } = parse(&bytes) else {
            panic!("{bytes:?}: {:?}", parse(&bytes));
        };
        assert_eq!(header, expected);
        assert_eq!(&bytes[len..], b"hello", "the client's data follows");
        check_header(&bytes[..len], expected);
    }
    check_header(&hex(HAPROXY_V2_CHECK), ProxyHeader::Local);
}

#[test]
fn v1_tcp4_tcp6_unknown() {
    check_header(
        b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n",
        proxied("255.255.255.255:65535", "255.255.255.255:65535"),
    );
    check_header(
        b"PROXY TCP4 0.0.0.0 10.1.2.3 0 8333\r\n",
        proxied("0.0.0.0:0", "10.1.2.3:8333"),
    );
    check_header(
        b"PROXY TCP6 2001:db8::1 2001:DB8::2 51000 9333\r\n",
        proxied("[2001:db8::1]:51000", "[2001:db8::2]:9333"),
    );
    check_header(b"PROXY UNKNOWN\r\n", ProxyHeader::Local);
    // Whatever follows UNKNOWN is ignored.
    check_header(
        b"PROXY UNKNOWN ffff::1 ffff::2 1 2 and anything\r\n",
        ProxyHeader::Local,
    );
}

#[test]
fn v1_longest_lines() {
    let ip6 = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let tcp6 = format!("PROXY TCP6 {ip6} {ip6} 65535 65535\r\n");
    assert_eq!(tcp6.len(), 104);
    check_header(
        tcp6.as_bytes(),
        proxied(&format!("[{ip6}]:65535"), &format!("[{ip6}]:65535")),
    );
    let unknown = format!("PROXY UNKNOWN {ip6} {ip6} 65535 65535\r\n");
    assert_eq!(unknown.len(), MAX_V1);
    check_header(unknown.as_bytes(), ProxyHeader::Local);
}

#[test]
fn v1_without_crlf_within_107_bytes_is_invalid() {
    let line = format!("PROXY UNKNOWN {}", "a".repeat(MAX_V1 - 14));
    assert_eq!(line.len(), MAX_V1);
    assert_eq!(parse(&line.as_bytes()[..MAX_V1 - 1]), Parse::Incomplete);
    assert_eq!(reason(line.as_bytes()), "v1 line longer than 107 bytes");
    // 108 bytes with its CRLF: too long too, even with the CR in the window.
    let line = format!("PROXY UNKNOWN {}\r\n", "a".repeat(MAX_V1 - 15));
    assert_eq!(line.len(), MAX_V1 + 1);
    assert_eq!(reason(line.as_bytes()), "v1 line longer than 107 bytes");
    assert_eq!(reason(&[b'P'; 4096][..]), "not a PROXY header");
}

#[test]
fn v1_bad_lines_are_invalid() {
    let cases: [(&[u8], &str); 16] = [
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "CR or LF"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", "CR or LF"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n\r\n", "CR or LF"),
        (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "protocol"),
        (b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", "protocol"),
        (b"PROXY UNKNOWNX\r\n", "protocol"),
        (b"PROXY \r\n", "protocol"),
        (b"PROXY TCP4\r\n", "too few"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "too few"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "too many"),
        (b"PROXY TCP4  1.2.3.4 5.6.7.8 1\r\n", "source address"),
        (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", "source address"),
        (b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n", "destination address"),
        (b"PROXY TCP6 ::1 1.2.3.4 1 2\r\n", "destination address"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "source port"),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n",
            "destination port",
        ),
    ];
    for (line, expected) in cases {
        let got = reason(line);
        assert!(got.contains(expected), "{line:?}: {got}");
    }
}

#[test]
fn v1_hopeless_lines_fail_before_their_crlf() {
    let cases: [&[u8]; 10] = [
        b"PROXY X",
        b"PROXY TCP4X",
        b"PROXY TCP4 1.2.3.a",
        b"PROXY TCP4 1.2.3.4.5.6.7.8.9",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 ",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 99999",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 00",
        b"PROXY TCP6 ::g",
        b"PROXY TCP4 1.2.3.4\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r",
    ];
    for line in cases {
        reason(line);
    }
}

#[test]
fn not_a_header_is_invalid_at_the_first_wrong_byte() {
    let cases: [&[u8]; 8] = [
        b"GET / HTTP/1.1\r\n",
        b"\x16\x03\x01\x02\x00",
        b"\xf9\xbe\xb4\xd9version",
        b"\xfb\xc0\xb6\xdbversion",
        b"PROXX",
        b"PROXY\r\n",
        b"\r\n\r\nGET",
        b"\r\n\r\n\0\r\nQUIT\r",
    ];
    for bytes in cases {
        assert_eq!(reason(bytes), "not a PROXY header", "{bytes:?}");
    }
    // At most the 12-byte signature or `PROXY ` is ever waited for.
    let mut almost = V2_SIGNATURE.to_vec();
    almost[11] = b'X';
    assert_eq!(parse(&almost[..11]), Parse::Incomplete);
    assert_eq!(reason(&almost), "not a PROXY header");
}

#[test]
fn v2_proxy_v4_and_v6() {
    let mut block = vec![192, 0, 2, 7, 10, 0, 0, 1];
    block.extend_from_slice(&40000u16.to_be_bytes());
    block.extend_from_slice(&9333u16.to_be_bytes());
    check_header(
        &v2_header(1, 0x11, &block),
        proxied("192.0.2.7:40000", "10.0.0.1:9333"),
    );

    let client: std::net::Ipv6Addr = "2001:db8::7".parse().unwrap();
    let dest: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
    let mut block = client.octets().to_vec();
    block.extend_from_slice(&dest.octets());
    block.extend_from_slice(&[0x9c, 0x40, 0x24, 0x75]);
    check_header(
        &v2_header(1, 0x21, &block),
        proxied("[2001:db8::7]:40000", "[2001:db8::1]:9333"),
    );
}

#[test]
fn ipv4_mapped_addresses_become_ipv4() {
    let mapped: std::net::Ipv6Addr = "::ffff:192.0.2.7".parse().unwrap();
    let mut block = mapped.octets().to_vec();
    block.extend_from_slice(&[0; 16]);
    block.extend_from_slice(&[0x9c, 0x40, 0x24, 0x75]);
    check_header(
        &v2_header(1, 0x21, &block),
        proxied("192.0.2.7:40000", "[::]:9333"),
    );
    check_header(
        b"PROXY TCP6 ::ffff:192.0.2.7 ::1 40000 9333\r\n",
        proxied("192.0.2.7:40000", "[::1]:9333"),
    );
}

#[test]
fn v2_tlvs_are_skipped() {
    let mut block = vec![127, 0, 0, 9, 127, 0, 0, 1, 0x9c, 0x40, 0x24, 0x75];
    // ALPN "h2", NOOP of 300 bytes, a TLV claiming more than is left: not read.
    block.extend_from_slice(&[0x01, 0x00, 0x02, b'h', b'2']);
    block.extend_from_slice(&[0x04, 0x01, 0x2c]);
    block.extend_from_slice(&[0; 300]);
    block.extend_from_slice(&[0x20, 0xff, 0xff, 1]);
    check_header(
        &v2_header(1, 0x11, &block),
        proxied("127.0.0.9:40000", "127.0.0.1:9333"),
    );
}

#[test]
fn v2_local_and_unsupported_families_mean_the_connection_itself() {
    // LOCAL: any address block is skipped, its family byte ignored.
    check_header(&v2_header(0, 0x00, &[]), ProxyHeader::Local);
    check_header(&v2_header(0, 0x11, &[1; 12]), ProxyHeader::Local);
    check_header(&v2_header(0, 0xff, &[1; 3]), ProxyHeader::Local);
    // PROXY for what the spec lets a receiver fall back on.
    check_header(&v2_header(1, 0x00, &[]), ProxyHeader::Local);
    check_header(&v2_header(1, 0x10, &[1; 4]), ProxyHeader::Local);
    check_header(&v2_header(1, 0x12, &[1; 12]), ProxyHeader::Local);
    check_header(&v2_header(1, 0x22, &[1; 36]), ProxyHeader::Local);
    check_header(&v2_header(1, 0x31, &[b'/'; 216]), ProxyHeader::Local);
}

#[test]
fn v2_bad_fixed_bytes_are_invalid_as_they_arrive() {
    let cases = [
        (
            v2_header(1, 0x11, &[0; 12]),
            12,
            0x10,
            "v2 version is 1, not 2",
        ),
        (v2_header(1, 0x11, &[0; 12]), 12, 0x22, "not LOCAL or PROXY"),
        (v2_header(1, 0x11, &[0; 12]), 13, 0x41, "address family 0x4"),
        (
            v2_header(1, 0x11, &[0; 12]),
            13,
            0x13,
            "transport protocol 0x3",
        ),
    ];
    for (mut header, at, byte, expected) in cases {
        header[at] = byte;
        let got = reason(&header[..=at]);
        assert!(got.contains(expected), "{got}");
    }
}

#[test]
fn v2_address_length_is_checked_against_the_family() {
    for (family_protocol, short) in [(0x11, 11), (0x21, 35), (0x12, 0), (0x31, 215)] {
        let header = v2_header(1, family_protocol, &vec![0; short]);
        // Judged on the 16 fixed bytes, before the block arrives.
        let got = reason(&header[..16]);
        assert!(got.starts_with("bad v2 address length"), "{got}");
    }
}

#[test]
fn v2_longest_header() {
    let header = v2_header(1, 0x11, &[7; 65535]);
    assert_eq!(header.len(), MAX_V2);
    assert_eq!(parse(&header[..MAX_V2 - 1]), Parse::Incomplete);
    assert_eq!(
        parse(&header),
        done(proxied("7.7.7.7:1799", "7.7.7.7:1799"), MAX_V2)
    );
}

#[test]
fn client_or_falls_back_to_the_connection() {
    let peer = addr("10.0.0.5:4000");
    assert_eq!(ProxyHeader::Local.client_or(peer), peer);
    let header = proxied("192.0.2.7:40000", "10.0.0.1:9333");
    assert_eq!(header.client_or(peer), addr("192.0.2.7:40000"));
}

/// The cost of one header, for the note. Run:
/// `cargo test --release --lib proxy_header::tests::timing -- --ignored --nocapture`
#[test]
#[ignore = "prints timings; asserts nothing on them"]
fn timing() {
    let (v2_tcp4, v2_tcp6, v2_tlvs) = (
        hex(HAPROXY_V2_TCP4),
        hex(HAPROXY_V2_TCP6),
        hex(HAPROXY_V2_TLVS),
    );
    let cases: [(&str, &[u8]); 5] = [
        ("v2 TCP4 (HAProxy)", &v2_tcp4),
        ("v2 TCP6 (HAProxy)", &v2_tcp6),
        ("v2 TCP4 + TLVs (HAProxy)", &v2_tlvs),
        ("v1 TCP4 (HAProxy)", HAPROXY_V1_TCP4),
        ("v1 TCP6 (HAProxy)", HAPROXY_V1_TCP6),
    ];
    println!("| header | bytes | parse, ns |");
    println!("|---|---:|---:|");
    for (name, bytes) in cases {
        let Parse::Done { len, .. } = parse(bytes) else {
            panic!("{name}");
        };
        let rounds = 2_000_000u32;
        let start = Instant::now();
        for _ in 0..rounds {
            black_box(parse(black_box(bytes)));
        }
        let ns = start.elapsed().as_nanos() as f64 / f64::from(rounds);
        println!("| {name} | {len} | {ns:.1} |");
    }
}
