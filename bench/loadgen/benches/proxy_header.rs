//! Micro-benchmark: what reading a PROXY header costs a connection from a
//! trusted load balancer, in bytes on the wire and ns to parse.
//!
//! Each case is a header as a sender writes it (HAProxy's `send-proxy` and
//! `send-proxy-v2` layouts), followed by 64 bytes of the client's own data
//! that the parser must leave alone. It times `proxy_header::parse` on the
//! whole buffer (what the listener does once the header has arrived) and
//! on the first half of the header (the answer `Incomplete`, what a header
//! split across two segments costs first).
//!
//! Run: `cargo bench --manifest-path bench/loadgen/Cargo.toml --bench proxy_header`
//! (add `-- --quick` for shorter timings). Prints a Markdown table.

use std::hint::black_box;
use std::time::Instant;

use pin_proxy::net::proxy_header::{self, Parse};

/// A v2 header: signature, version/command, family/transport, length,
/// addresses, then `tlv` bytes of TLVs (one `PP2_TYPE_NOOP` padding TLV).
fn v2(command: u8, family: u8, addresses: &[u8], tlv: usize) -> Vec<u8> {
    let mut out = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    out.push(0x20 | command);
    out.push(family);
    let tlv_bytes = if tlv == 0 { 0 } else { tlv.max(3) };
    let len = u16::try_from(addresses.len() + tlv_bytes).expect("a header fits");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(addresses);
    if tlv_bytes > 0 {
        // PP2_TYPE_NOOP: 1 type byte, 2 length bytes, then its value.
        out.push(0x04);
        let value = u16::try_from(tlv_bytes - 3).expect("a TLV fits");
        out.extend_from_slice(&value.to_be_bytes());
        out.resize(out.len() + usize::from(value), 0);
    }
    out
}

fn v2_ipv4(tlv: usize) -> Vec<u8> {
    let mut a = vec![198, 18, 0, 7, 198, 18, 1, 1];
    a.extend_from_slice(&51_234u16.to_be_bytes());
    a.extend_from_slice(&9_333u16.to_be_bytes());
    v2(0x1, 0x11, &a, tlv)
}

fn v2_ipv6() -> Vec<u8> {
    let client: std::net::Ipv6Addr = "2001:db8::7".parse().unwrap();
    let dest: std::net::Ipv6Addr = "2001:db8::1:1".parse().unwrap();
    let mut a = client.octets().to_vec();
    a.extend_from_slice(&dest.octets());
    a.extend_from_slice(&51_234u16.to_be_bytes());
    a.extend_from_slice(&9_333u16.to_be_bytes());
    v2(0x1, 0x21, &a, 0)
}

/// (name, header bytes): the cases timed.
fn cases() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "v1 TCP4",
            b"PROXY TCP4 198.18.0.7 198.18.1.1 51234 9333\r\n".to_vec(),
        ),
        (
            "v1 TCP6",
            b"PROXY TCP6 2001:db8::7 2001:db8::1:1 51234 9333\r\n".to_vec(),
        ),
        ("v2 IPv4", v2_ipv4(0)),
        ("v2 IPv6", v2_ipv6()),
        ("v2 IPv4 + 100 B of TLVs", v2_ipv4(100)),
        ("v2 LOCAL", v2(0x0, 0x00, &[], 0)),
    ]
}

/// Median ns per call of `f` over `rounds` rounds of `iters` calls.
fn time(rounds: usize, iters: u32, mut f: impl FnMut()) -> f64 {
    let mut per_call: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(iters)
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[per_call.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, iters) = if quick { (5, 100_000) } else { (21, 1_000_000) };
    let client_data = [0x5au8; 64];
    println!("| header | bytes | parse whole, ns | parse half (Incomplete), ns |");
    println!("|---|---:|---:|---:|");
    let started = Instant::now();
    for (name, header) in cases() {
        let mut buf = header.clone();
        buf.extend_from_slice(&client_data);
        // The parser must find exactly the header, or the figure is of
        // something else.
        match proxy_header::parse(&buf) {
            Parse::Done { len, .. } => assert_eq!(len, header.len(), "{name}"),
            other => panic!("{name}: {other:?}"),
        }
        let half = &header[..header.len() / 2];
        assert_eq!(proxy_header::parse(half), Parse::Incomplete, "{name}");
        let whole = time(rounds, iters, || {
            black_box(proxy_header::parse(black_box(&buf)));
        });
        let partial = time(rounds, iters, || {
            black_box(proxy_header::parse(black_box(half)));
        });
        println!("| {name} | {} | {whole:.1} | {partial:.1} |", header.len());
    }
    let took = started.elapsed();
    eprintln!(
        "proxy_header: {rounds} rounds of {iters} calls per figure, median shown, {:.1} s",
        took.as_secs_f64()
    );
}
