//! The P2P load's messages: a 2-byte length, a kind, the sender's
//! `CLOCK_MONOTONIC` nanoseconds (one clock for every process on the
//! machine, so client and backend can compare stamps), then filler up to
//! the length. And the buffer that cuts a byte stream into them.

use anyhow::{Context, bail};
use rustix::time::{ClockId, clock_gettime};

/// Length (2), kind (1), timestamp (8).
pub const HEADER: usize = 11;

/// The longest message either side sends; also the read buffer's unit.
pub const MAX: usize = 512;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The backend's first message on a connection: the path works end to end.
    Hello,
    /// Client to backend, to be echoed.
    Ping,
    /// A ping coming back, its stamp unchanged.
    Echo,
    /// Backend to client on its own schedule, stamped when sent.
    Announce,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Hello => 0,
            Kind::Ping => 1,
            Kind::Echo => 2,
            Kind::Announce => 3,
        }
    }

    fn of(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Hello),
            1 => Some(Kind::Ping),
            2 => Some(Kind::Echo),
            3 => Some(Kind::Announce),
            _ => None,
        }
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    // The monotonic clock counts from boot: never negative.
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// Write a message of `len` bytes (at least [`HEADER`], at most [`MAX`])
/// into the front of `out`; returns those bytes.
pub fn encode(out: &mut [u8; MAX], kind: Kind, stamp_ns: u64, len: usize) -> &[u8] {
    let len = len.clamp(HEADER, MAX);
    out[..2].copy_from_slice(&(len as u16).to_be_bytes());
    out[2] = kind.byte();
    out[3..HEADER].copy_from_slice(&stamp_ns.to_be_bytes());
    &out[..len]
}

/// Turn an echoed ping's bytes into its echo (same length and stamp).
pub fn into_echo(msg: &mut [u8]) {
    msg[2] = Kind::Echo.byte();
}

/// Bytes read from a connection, cut into messages.
pub struct Reader {
    buf: Box<[u8; 2 * MAX]>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

impl Reader {
    /// An empty buffer.
    pub fn new() -> Reader {
        Reader {
            buf: Box::new([0; 2 * MAX]),
            start: 0,
            end: 0,
        }
    }

    /// Where the next read goes. Once [`next`](Reader::next) has returned
    /// `None`, less than one message is pending, so this is at least
    /// [`MAX`] bytes long.
    pub fn space(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes were read into [`space`](Reader::space).
    pub fn filled(&mut self, n: usize) {
        self.end += n;
    }

    /// The next whole message (its kind, stamp and bytes) if one has
    /// arrived.
    ///
    /// # Errors
    /// A length or kind no sender writes.
    pub fn next(&mut self) -> anyhow::Result<Option<(Kind, u64, &mut [u8])>> {
        let pending = &self.buf[self.start..self.end];
        if pending.len() < 2 {
            return Ok(None);
        }
        let len = usize::from(u16::from_be_bytes([pending[0], pending[1]]));
        if !(HEADER..=MAX).contains(&len) {
            bail!("message length {len}");
        }
        if pending.len() < len {
            return Ok(None);
        }
        let kind = Kind::of(pending[2]).with_context(|| format!("message kind {}", pending[2]))?;
        let mut stamp = [0u8; 8];
        stamp.copy_from_slice(&pending[3..HEADER]);
        let at = self.start;
        self.start += len;
        Ok(Some((
            kind,
            u64::from_be_bytes(stamp),
            &mut self.buf[at..at + len],
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_split_and_joined_across_reads_come_out_whole() {
        let mut a = [0u8; MAX];
        let mut b = [0u8; MAX];
        let mut stream = encode(&mut a, Kind::Ping, 7, 100).to_vec();
        stream.extend_from_slice(encode(&mut b, Kind::Announce, 9, 300));
        let mut r = Reader::new();
        let mut got = Vec::new();
        for chunk in stream.chunks(37) {
            r.space()[..chunk.len()].copy_from_slice(chunk);
            r.filled(chunk.len());
            while let Some((kind, stamp, msg)) = r.next().unwrap() {
                got.push((kind, stamp, msg.len()));
            }
        }
        assert_eq!(got, [(Kind::Ping, 7, 100), (Kind::Announce, 9, 300)]);
    }

    #[test]
    fn a_bad_length_is_an_error() {
        let mut r = Reader::new();
        r.space()[..3].copy_from_slice(&[0, 2, 1]);
        r.filled(3);
        assert!(r.next().is_err());
    }
}
