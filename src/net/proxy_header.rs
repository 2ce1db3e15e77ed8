//! The PROXY protocol header (v1 text, v2 binary) a trusted load balancer
//! puts before its client's bytes: parsed from a buffer, pure and bounded.
//!
//! The spec is HAProxy's `doc/proxy-protocol.txt`. [`parse`] is called on
//! whatever has arrived so far and answers at once when the bytes cannot
//! become a header (a client of the wrong source is never held up); it
//! asks for more only while they can. v1 lines are at most [`MAX_V1`]
//! bytes, v2 headers at most [`MAX_V2`]; v2 TLVs are skipped unread.
//!
//! Addresses sent in the header are taken as sent, except that an
//! IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, what a dual-stack sender
//! writes for an IPv4 client) becomes the IPv4 address, so that IPv4
//! allow-lists and per-source limits match it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The longest v1 line, CRLF included (`PROXY UNKNOWN` with two full IPv6
/// addresses and ports).
pub const MAX_V1: usize = 107;

/// The longest v2 header: 16 fixed bytes and a 16-bit length.
pub const MAX_V2: usize = 16 + 65535;

/// The v2 signature, its first 12 bytes.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// What a v1 line begins with.
const V1_PREFIX: &[u8; 6] = b"PROXY ";
/// The reasons for a bad field of a v1 `TCP4`/`TCP6` line, in its order.
const V1_BAD_FIELD: [&str; 4] = [
    "v1 source address is not valid",
    "v1 destination address is not valid",
    "v1 source port is not valid",
    "v1 destination port is not valid",
];

/// What a PROXY header says about the connection it begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyHeader {
    /// Relayed for a client: v1 `TCP4`/`TCP6`, v2 `PROXY` over TCP.
    Proxied {
        /// The client's address: the one to judge and log.
        client: SocketAddr,
        /// The address the client connected to at the sender.
        dest: SocketAddr,
    },
    /// The connection's own address stands: v2 `LOCAL` (the sender's own
    /// health check), v1 `UNKNOWN`, and v2 `PROXY` for a family or
    /// transport other than TCP (see [`parse`]).
    Local,
}

impl ProxyHeader {
    /// The client's address: the header's, or `peer` (the connection's
    /// own) for [`ProxyHeader::Local`].
    pub fn client_or(self, peer: SocketAddr) -> SocketAddr {
        match self {
            ProxyHeader::Proxied { client, .. } => client,
            ProxyHeader::Local => peer,
        }
    }
}

/// The outcome of [`parse`] on the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse {
    /// The bytes are a proper prefix of a header: read more.
    Incomplete,
    /// A whole header of `len` bytes; the bytes after it are the client's
    /// first data and must be kept.
    Done {
        /// What the header says.
        header: ProxyHeader,
        /// The header's length in bytes, at most the buffer's.
        len: usize,
    },
    /// No header can begin with these bytes: close the connection.
    Invalid(String),
}

/// Parse the PROXY header at the start of `buf`.
///
/// The outcome for a buffer holds for every longer buffer that begins with
/// it: `Done` stays the same `Done`, `Invalid` stays `Invalid`. A buffer
/// that begins with neither the 12-byte v2 signature nor `PROXY ` is
/// `Invalid` as soon as a byte differs; a v1 line without its CRLF within
/// [`MAX_V1`] bytes is `Invalid`.
///
/// v2 `PROXY` with `AF_UNSPEC`, `AF_UNIX`, or a transport other than
/// `STREAM` is [`ProxyHeader::Local`], not `Invalid`: the spec asks a
/// receiver to fall back to the connection's own addresses for valid
/// combinations it does not implement, and the sender is trusted (only
/// listed sources are parsed).
pub fn parse(buf: &[u8]) -> Parse {
    match buf.first() {
        None => Parse::Incomplete,
        Some(b'\r') => v2(buf),
        Some(b'P') => v1(buf),
        Some(_) => invalid("not a PROXY header"),
    }
}

fn invalid(reason: impl Into<String>) -> Parse {
    Parse::Invalid(reason.into())
}

/// Whether `buf` and `signature` agree over their common length.
fn agrees(buf: &[u8], signature: &[u8]) -> bool {
    let n = buf.len().min(signature.len());
    buf[..n] == signature[..n]
}

// ---- v1 ------------------------------------------------------------------

fn v1(buf: &[u8]) -> Parse {
    if !agrees(buf, V1_PREFIX) {
        return invalid("not a PROXY header");
    }
    let window = &buf[..buf.len().min(MAX_V1)];
    let Some(body) = window.get(V1_PREFIX.len()..) else {
        return Parse::Incomplete;
    };
    if let Some(cr) = body.windows(2).position(|w| w == b"\r\n") {
        return match line(&body[..cr]) {
            Ok(header) => Parse::Done {
                header,
                len: V1_PREFIX.len() + cr + 2,
            },
            Err(reason) => invalid(reason),
        };
    }
    if buf.len() >= MAX_V1 {
        return invalid(format!("v1 line longer than {MAX_V1} bytes"));
    }
    match partial_line(body) {
        Ok(()) => Parse::Incomplete,
        Err(reason) => invalid(reason),
    }
}

/// A whole v1 line after `PROXY `, without its CRLF.
fn line(body: &[u8]) -> Result<ProxyHeader, String> {
    if body.iter().any(|&b| b == b'\r' || b == b'\n') {
        return Err("v1 line has a CR or LF before its CRLF".into());
    }
    let (protocol, rest) = match body.iter().position(|&b| b == b' ') {
        Some(space) => (&body[..space], Some(&body[space + 1..])),
        None => (body, None),
    };
    let v6 = match protocol {
        // The spec: ignore whatever follows UNKNOWN before the CRLF.
        b"UNKNOWN" => return Ok(ProxyHeader::Local),
        b"TCP4" => false,
        b"TCP6" => true,
        _ => return Err("v1 protocol is not TCP4, TCP6 or UNKNOWN".into()),
    };
    let mut fields = rest.unwrap_or_default().split(|&b| b == b' ');
    let mut next = || fields.next().ok_or("v1 line has too few fields");
    let (src, dst, src_port, dst_port) = (next()?, next()?, next()?, next()?);
    if fields.next().is_some() {
        return Err("v1 line has too many fields".into());
    }
    let client = address(src, v6).ok_or(V1_BAD_FIELD[0])?;
    let dest = address(dst, v6).ok_or(V1_BAD_FIELD[1])?;
    let src_port = port(src_port).ok_or(V1_BAD_FIELD[2])?;
    let dst_port = port(dst_port).ok_or(V1_BAD_FIELD[3])?;
    Ok(ProxyHeader::Proxied {
        client: SocketAddr::new(client, src_port),
        dest: SocketAddr::new(dest, dst_port),
    })
}

/// An address of the line's family, in the spec's text form (std's
/// parsers: no leading zeros in IPv4, at most 128 bits in IPv6).
fn address(text: &[u8], v6: bool) -> Option<IpAddr> {
    let text = std::str::from_utf8(text).ok()?;
    if v6 {
        text.parse::<Ipv6Addr>().ok().map(canonical)
    } else {
        text.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    }
}

/// A decimal port in 0..=65535 without leading zeros.
fn port(text: &[u8]) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || (text[0] == b'0' && text.len() > 1) {
        return None;
    }
    if !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = text.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    u16::try_from(value).ok()
}

/// Whether `body` (after `PROXY `, no CRLF yet) can still become a valid
/// line. Complete fields are checked in full; the last, cut-off one by
/// its characters and length, so a line no CRLF could save fails now.
fn partial_line(body: &[u8]) -> Result<(), String> {
    // A CR at the very end may be the first half of the CRLF: then the
    // line before it must be whole and valid.
    if let Some(before) = body.strip_suffix(b"\r") {
        return line(before).map(|_| ());
    }
    if body.iter().any(|&b| b == b'\r' || b == b'\n') {
        return Err("v1 line has a CR or LF before its CRLF".into());
    }
    let Some(space) = body.iter().position(|&b| b == b' ') else {
        let could_be = [&b"TCP4"[..], b"TCP6", b"UNKNOWN"]
            .iter()
            .any(|p| p.starts_with(body));
        return if could_be {
            Ok(())
        } else {
            Err("v1 protocol is not TCP4, TCP6 or UNKNOWN".into())
        };
    };
    let v6 = match &body[..space] {
        b"UNKNOWN" => return Ok(()),
        b"TCP4" => false,
        b"TCP6" => true,
        _ => return Err("v1 protocol is not TCP4, TCP6 or UNKNOWN".into()),
    };
    let fields = body[space + 1..].split(|&b| b == b' ');
    let count = fields.clone().count();
    if count > V1_BAD_FIELD.len() {
        return Err("v1 line has too many fields".into());
    }
    for ((i, field), bad) in fields.enumerate().zip(V1_BAD_FIELD) {
        let cut_off = i + 1 == count;
        let ok = match (i < 2, cut_off) {
            (true, false) => address(field, v6).is_some(),
            (true, true) => address_prefix(field, v6),
            (false, false) => port(field).is_some(),
            (false, true) => port_prefix(field),
        };
        if !ok {
            return Err(bad.into());
        }
    }
    Ok(())
}

/// Whether `text` can begin an address of the family: its characters and
/// the family's longest text form (15; 45 for IPv6 with an IPv4 tail).
fn address_prefix(text: &[u8], v6: bool) -> bool {
    if v6 {
        text.len() <= 45
            && text
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    } else {
        text.len() <= 15 && text.iter().all(|&b| b.is_ascii_digit() || b == b'.')
    }
}

/// Whether `text` can begin a port.
fn port_prefix(text: &[u8]) -> bool {
    text.is_empty() || port(text).is_some()
}

// ---- v2 ------------------------------------------------------------------

/// Sizes of the v2 address block: two IPv4 or IPv6 addresses and two
/// ports, or two 108-byte UNIX paths.
const INET_LEN: usize = 12;
const INET6_LEN: usize = 36;
const UNIX_LEN: usize = 216;

fn v2(buf: &[u8]) -> Parse {
    if !agrees(buf, V2_SIGNATURE) {
        return invalid("not a PROXY header");
    }
    // Each fixed byte is judged as soon as it arrives.
    let Some(&version_command) = buf.get(12) else {
        return Parse::Incomplete;
    };
    if version_command >> 4 != 2 {
        return invalid(format!("v2 version is {}, not 2", version_command >> 4));
    }
    let local = match version_command & 0x0f {
        0 => true,
        1 => false,
        c => return invalid(format!("v2 command {c:#x} is not LOCAL or PROXY")),
    };
    let Some(&family_protocol) = buf.get(13) else {
        return Parse::Incomplete;
    };
    let (family, protocol) = (family_protocol >> 4, family_protocol & 0x0f);
    // LOCAL ignores the family byte (the spec: the block is discarded).
    if !local && family > 3 {
        return invalid(format!("v2 address family {family:#x} is unknown"));
    }
    if !local && protocol > 2 {
        return invalid(format!("v2 transport protocol {protocol:#x} is unknown"));
    }
    let Some(&[hi, lo]) = buf.get(14..16) else {
        return Parse::Incomplete;
    };
    let block = usize::from(u16::from_be_bytes([hi, lo]));
    // The spec sizes the address block only for STREAM and DGRAM.
    let needed = match (family, protocol) {
        (1, 1 | 2) => INET_LEN,
        (2, 1 | 2) => INET6_LEN,
        (3, 1 | 2) => UNIX_LEN,
        _ => 0,
    };
    if !local && block < needed {
        return invalid(format!(
            "bad v2 address length: {block} bytes, the family needs {needed}"
        ));
    }
    let len = 16 + block;
    let Some(addresses) = buf.get(16..len) else {
        return Parse::Incomplete;
    };
    let header = match (local, family, protocol) {
        (false, 1, 1) => proxied(addresses, |ip: [u8; 4]| IpAddr::from(ip)),
        (false, 2, 1) => proxied(addresses, |ip: [u8; 16]| canonical(Ipv6Addr::from(ip))),
        _ => Some(ProxyHeader::Local),
    };
    match header {
        Some(header) => Parse::Done { header, len },
        None => invalid("bad v2 address length"),
    }
}

/// The client and destination from an address block of two `N`-byte
/// addresses and two ports; TLVs after them are skipped. None when the
/// block is too short (checked before, so never).
fn proxied<const N: usize>(block: &[u8], ip: fn([u8; N]) -> IpAddr) -> Option<ProxyHeader> {
    let (src, rest) = block.split_first_chunk::<N>()?;
    let (dst, rest) = rest.split_first_chunk::<N>()?;
    let (src_port, rest) = rest.split_first_chunk::<2>()?;
    let (dst_port, _tlvs) = rest.split_first_chunk::<2>()?;
    Some(ProxyHeader::Proxied {
        client: SocketAddr::new(ip(*src), u16::from_be_bytes(*src_port)),
        dest: SocketAddr::new(ip(*dst), u16::from_be_bytes(*dst_port)),
    })
}

/// An IPv6 address, or the IPv4 address it maps.
fn canonical(ip: Ipv6Addr) -> IpAddr {
    IpAddr::V6(ip).to_canonical()
}

#[cfg(test)]
#[path = "proxy_header_tests.rs"]
mod tests;
