//! Bitcoin-family P2P wire format: message framing and the `version` payload.
//!
//! Pure and defensive: no I/O here, and no input can make it panic or buffer
//! more than one header plus the payload cap. A message is a 24-byte header
//! (magic, NUL-padded command, payload length LE, checksum = first 4 bytes of
//! SHA256(SHA256(payload))) followed by the payload.

use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use thiserror::Error;

/// The protocol version we announce (70016: `wtxidrelay` era).
pub const PROTOCOL_VERSION: i32 = 70016;
/// Length of a message header.
pub const HEADER_LEN: usize = 24;
/// Default cap on a payload's length; longer ones are refused from the header.
pub const MAX_PAYLOAD: usize = 1 << 20;
/// Longest user agent kept (Bitcoin Core's `MAX_SUBVERSION_LENGTH`); the
/// rest of a longer one is cut.
pub const MAX_USER_AGENT: usize = 256;

const COMMAND_LEN: usize = 12;

/// The 4 message-start bytes, in wire order (litecoin `fbc0b6db`).
pub type Magic = [u8; 4];

/// A framed message whose checksum has been verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The command, without its NUL padding (`version`, `verack` ...).
    pub command: String,
    /// The payload bytes.
    pub payload: Vec<u8>,
}

/// Why bytes are not a well-formed message stream.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// The stream does not start with the network's magic (the bytes seen so far).
    #[error("wrong magic {} (expected {})", Hex(.got), Hex(.expected))]
    WrongMagic {
        /// The magic we expected.
        expected: Magic,
        /// The first bytes received (1 to 4 of them).
        got: Vec<u8>,
    },
    /// The command field is not printable ASCII followed by NUL padding.
    #[error("garbage command {}", Hex(.0))]
    BadCommand(Vec<u8>),
    /// The header announces a payload longer than the cap.
    #[error("oversized {command} payload: {len} bytes (max {max})")]
    Oversized {
        /// The message's command.
        command: String,
        /// The announced payload length.
        len: u32,
        /// The cap.
        max: usize,
    },
    /// The payload does not match the header's checksum.
    #[error("bad checksum on {command}")]
    BadChecksum {
        /// The message's command.
        command: String,
    },
    /// The stream ended in the middle of a message.
    #[error("truncated message: {have} of {need} bytes")]
    Truncated {
        /// Bytes of the message received.
        have: usize,
        /// Bytes needed for the header, or for the whole message once the header is known.
        need: usize,
    },
    /// A payload that cannot be parsed.
    #[error("malformed {command} payload: {reason}")]
    Malformed {
        /// The message's command.
        command: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Lower-case hex, for magic and command bytes in errors.
struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// The first 4 bytes of SHA256(SHA256(`payload`)).
pub fn checksum(payload: &[u8]) -> [u8; 4] {
    let hash = Sha256::digest(Sha256::digest(payload));
    [hash[0], hash[1], hash[2], hash[3]]
}

/// Frame `payload` as a `command` message for the network of `magic`.
///
/// `command` is one of our constants; bytes beyond 12 would be cut off.
pub fn encode(magic: Magic, command: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&magic);
    let mut name = [0u8; COMMAND_LEN];
    for (slot, byte) in name.iter_mut().zip(command.bytes()) {
        *slot = byte;
    }
    out.extend_from_slice(&name);
    // Payloads we build are a few hundred bytes; saturating never triggers.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(payload));
    out.extend_from_slice(payload);
    out
}

/// What we put in a `version` message (relay is always false).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionParams {
    /// Service bits we announce (0: we serve nothing).
    pub services: u64,
    /// Unix time in seconds.
    pub timestamp: i64,
    /// The peer's address as we see it.
    pub receiver: SocketAddr,
    /// Our own address.
    pub sender: SocketAddr,
    /// Random; lets a node detect a connection to itself.
    pub nonce: u64,
    /// Our user agent, e.g. [`user_agent`].
    pub user_agent: String,
    /// Our best block height (0 for a probe).
    pub start_height: i32,
}

/// `/pin-proxy:VERSION/`, the user agent a probe announces.
pub fn user_agent() -> String {
    format!("/pin-proxy:{}/", env!("CARGO_PKG_VERSION"))
}

/// The body of a `version` message with [`PROTOCOL_VERSION`].
pub fn version_payload(params: &VersionParams) -> Vec<u8> {
    let mut out = Vec::with_capacity(86 + params.user_agent.len() + 9);
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    out.extend_from_slice(&params.services.to_le_bytes());
    out.extend_from_slice(&params.timestamp.to_le_bytes());
    put_net_addr(&mut out, params.receiver);
    put_net_addr(&mut out, params.sender);
    out.extend_from_slice(&params.nonce.to_le_bytes());
    put_var_int(&mut out, params.user_agent.len() as u64);
    out.extend_from_slice(params.user_agent.as_bytes());
    out.extend_from_slice(&params.start_height.to_le_bytes());
    out.push(0); // relay: false, we want no transactions
    out
}

/// Network address without time: services, IPv6 (IPv4-mapped), port big-endian.
fn put_net_addr(out: &mut Vec<u8>, addr: SocketAddr) {
    let ip = match addr.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&ip.octets());
    out.extend_from_slice(&addr.port().to_be_bytes());
}

/// Append `n` as a CompactSize.
pub fn put_var_int(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=0xfc => out.push(n as u8),
        0xfd..=0xffff => {
            out.push(0xfd);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xfe);
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        _ => {
            out.push(0xff);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// A parsed `version` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The peer's protocol version.
    pub version: i32,
    /// The peer's service bits.
    pub services: u64,
    /// The peer's clock, Unix seconds.
    pub timestamp: i64,
    /// Our address as the peer sees it.
    pub receiver: SocketAddr,
    /// The peer's own address as it states it.
    pub sender: SocketAddr,
    /// The peer's nonce.
    pub nonce: u64,
    /// The peer's user agent: its first [`MAX_USER_AGENT`] bytes, invalid
    /// UTF-8 replaced.
    pub user_agent: String,
    /// The peer's best block height; negative from a broken or hostile peer.
    pub start_height: i32,
    /// The relay flag; `None` when absent, as in versions before 70001.
    pub relay: Option<bool>,
}

impl Version {
    /// Parse a `version` payload. Bytes after the relay flag are ignored.
    ///
    /// # Errors
    /// [`WireError::Malformed`] when a field is cut short or a length is not
    /// canonically encoded. A user agent longer than [`MAX_USER_AGENT`] is
    /// cut, not refused.
    pub fn parse(payload: &[u8]) -> Result<Version, WireError> {
        let mut r = Reader(payload);
        let version = i32::from_le_bytes(r.array()?);
        let services = u64::from_le_bytes(r.array()?);
        let timestamp = i64::from_le_bytes(r.array()?);
        let receiver = r.net_addr()?;
        let sender = r.net_addr()?;
        let nonce = u64::from_le_bytes(r.array()?);
        let len = r.var_int()?;
        // More than the payload holds is refused by `take`, before anything is copied.
        let len =
            usize::try_from(len).map_err(|_| malformed(format!("user agent of {len} bytes")))?;
        let agent = r.take(len)?;
        let agent = &agent[..len.min(MAX_USER_AGENT)];
        let user_agent = String::from_utf8_lossy(agent).into_owned();
        let start_height = i32::from_le_bytes(r.array()?);
        let relay = r.0.first().map(|&b| b != 0);
        Ok(Version {
            version,
            services,
            timestamp,
            receiver,
            sender,
            nonce,
            user_agent,
            start_height,
            relay,
        })
    }
}

/// Read a CompactSize off the front of `bytes`, part of a `command` payload.
///
/// # Errors
/// [`WireError::Malformed`] when cut short or not canonically encoded.
pub fn take_var_int(bytes: &mut &[u8], command: &'static str) -> Result<u64, WireError> {
    let mut r = Reader(bytes);
    let n = r.var_int().map_err(|err| match err {
        WireError::Malformed { reason, .. } => WireError::Malformed { command, reason },
        other => other,
    })?;
    *bytes = r.0;
    Ok(n)
}

fn malformed(reason: impl Into<String>) -> WireError {
    WireError::Malformed {
        command: "version",
        reason: reason.into(),
    }
}

/// A cursor over a `version` payload.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(malformed(format!(
                "cut short ({} bytes left)",
                self.0.len()
            )));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A CompactSize; non-canonical encodings are refused, as Bitcoin Core does.
    fn var_int(&mut self) -> Result<u64, WireError> {
        let [first] = self.array()?;
        let (n, min) = match first {
            0xfd => (u64::from(u16::from_le_bytes(self.array()?)), 0xfd),
            0xfe => (u64::from(u32::from_le_bytes(self.array()?)), 0x1_0000),
            0xff => (u64::from_le_bytes(self.array()?), 0x1_0000_0000),
            small => return Ok(u64::from(small)),
        };
        if n < min {
            return Err(malformed("non-canonical length"));
        }
        Ok(n)
    }

    fn net_addr(&mut self) -> Result<SocketAddr, WireError> {
        let _services: [u8; 8] = self.array()?;
        let ip = Ipv6Addr::from(self.array::<16>()?);
        let port = u16::from_be_bytes(self.array()?);
        let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
        Ok(SocketAddr::new(ip, port))
    }
}

/// Splits a byte stream into [`Message`]s, checking every header field as
/// soon as its bytes arrive so garbage is refused early.
///
/// After an error the stream cannot be resynchronised: the decoder keeps
/// returning that error and the caller should close the connection.
#[derive(Debug)]
pub struct Decoder {
    magic: Magic,
    max_payload: usize,
    buf: Vec<u8>,
    failed: Option<WireError>,
}

impl Decoder {
    /// A decoder for `magic` with the [`MAX_PAYLOAD`] cap.
    pub fn new(magic: Magic) -> Decoder {
        Decoder::with_max_payload(magic, MAX_PAYLOAD)
    }

    /// A decoder for `magic` refusing payloads longer than `max_payload`.
    pub fn with_max_payload(magic: Magic, max_payload: usize) -> Decoder {
        Decoder {
            magic,
            max_payload,
            buf: Vec::new(),
            failed: None,
        }
    }

    /// Append received bytes. Call [`Decoder::next_message`] until it returns
    /// `Ok(None)` after each feed; the buffer then never holds more than one
    /// message plus the last feed.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// Bytes received but not yet returned as a message.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete message, or `None` until more bytes are fed.
    ///
    /// # Errors
    /// Wrong magic, garbage command, oversized length or bad checksum.
    pub fn next_message(&mut self) -> Result<Option<Message>, WireError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let result = self.try_next();
        if let Err(err) = &result {
            self.failed = Some(err.clone());
            self.buf = Vec::new();
        }
        result
    }

    /// Call at end of stream.
    ///
    /// # Errors
    /// [`WireError::Truncated`] when a message was cut off, or the error
    /// [`Decoder::next_message`] already returned.
    pub fn finish(&self) -> Result<(), WireError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        match self.buf.len() {
            0 => Ok(()),
            have => Err(WireError::Truncated {
                have,
                need: self.frame_len().unwrap_or(HEADER_LEN),
            }),
        }
    }

    /// Header plus payload length, once the header's length field is here.
    fn frame_len(&self) -> Option<usize> {
        let len = self.buf.get(16..20)?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
        Some(HEADER_LEN.saturating_add(usize::try_from(len).unwrap_or(usize::MAX)))
    }

    fn try_next(&mut self) -> Result<Option<Message>, WireError> {
        let buf = &self.buf;
        let seen = buf.len().min(4);
        if buf[..seen] != self.magic[..seen] {
            return Err(WireError::WrongMagic {
                expected: self.magic,
                got: buf[..seen].to_vec(),
            });
        }
        let raw_command = buf.get(4..).unwrap_or_default();
        let raw_command = &raw_command[..raw_command.len().min(COMMAND_LEN)];
        let command = parse_command(raw_command)?;
        let Some(frame_len) = self.frame_len() else {
            return Ok(None);
        };
        let len = frame_len - HEADER_LEN;
        if len > self.max_payload {
            return Err(WireError::Oversized {
                command,
                len: u32::try_from(len).unwrap_or(u32::MAX),
                max: self.max_payload,
            });
        }
        if buf.len() < frame_len {
            return Ok(None);
        }
        let payload = &buf[HEADER_LEN..frame_len];
        if buf[20..HEADER_LEN] != checksum(payload) {
            return Err(WireError::BadChecksum { command });
        }
        let payload = payload.to_vec();
        self.buf.drain(..frame_len);
        Ok(Some(Message { command, payload }))
    }
}

/// Check a (possibly partial) command field: printable ASCII, then only NULs.
fn parse_command(raw: &[u8]) -> Result<String, WireError> {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    let printable = raw[..end].iter().all(|b| (b' '..=b'~').contains(b));
    let padded = raw[end..].iter().all(|&b| b == 0);
    if !printable || !padded || (end == 0 && !raw.is_empty()) {
        return Err(WireError::BadCommand(raw.to_vec()));
    }
    Ok(raw[..end].iter().map(|&b| char::from(b)).collect())
}

/// A nonce for a `version` or `ping`: unpredictable enough to tell our own
/// connections apart, not for cryptography.
pub fn random_nonce() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    if let Ok(since) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
        hasher.write_u128(since.as_nanos());
    }
    hasher.finish()
}

/// Unix time in seconds, 0 if the clock is before 1970.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
