//! What the running process and the new process say over the handover
//! channel, in order:
//!
//! 1. old → new `OFFER`: a fixed magic and the format number. This first
//!    message never changes shape, so any build can read any build's.
//! 2. new → old `ACCEPT` (the format it will read) or `REFUSE` (a reason):
//!    a build that cannot read the format refuses before anything moves.
//! 3. old → new `HANDOVER`: [`Handover`] (generation, next connection
//!    id, each pool's handed over state, the listeners) as JSON, with every
//!    listening socket attached.
//! 4. new → old `READY` once it serves (listeners adopted, new ones bound,
//!    health restored), or `REFUSE`. Until here nothing has moved: on any
//!    failure the old process just carries on.
//! 5. old → new `CONNS` batches ([`ConnMeta`]s as JSON, client and
//!    backend socket of each attached), then `END` with the count. The new
//!    process registers each connection but moves no byte on it yet: the
//!    old one may still take them all back.
//! 6. new → old `ADOPTED` with the count.
//!    (A new process of a build before step 7 splices each connection as
//!    it arrives; it says nothing after the format in its `ACCEPT`, where
//!    a build that holds says [`HOLDS`]: the old process sends `LET_GO`
//!    only to one that holds.)
//! 7. old → new `LET_GO`: the old process has given the connections up
//!    and exits; the new one splices them from here. Until this is sent,
//!    a failure (the new process hangs, exits, miscounts) has the old
//!    process kill the new one and splice every connection on itself,
//!    where it stood: one of them the new process had touched would lose
//!    or repeat bytes. The new process also splices them when the channel
//!    closes without it (the old process is gone), never otherwise.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::pool::handed::HandedPool;
use crate::pool::registry::ConnId;

/// The format this build sends and reads.
pub const FORMAT: u32 = 1;
/// The start of every offer.
pub const MAGIC: &[u8] = b"pin-proxy handover";

/// Packet tags.
pub mod tag {
    /// Old → new: magic + format (u32, little-endian).
    pub const OFFER: u8 = b'O';
    /// New → old: format (u32, little-endian).
    pub const ACCEPT: u8 = b'A';
    /// Either way: a reason (UTF-8); the upgrade stops.
    pub const REFUSE: u8 = b'R';
    /// Old → new: [`super::Handover`] + listening sockets.
    pub const HANDOVER: u8 = b'I';
    /// New → old: serving.
    pub const READY: u8 = b'Y';
    /// Old → new: [`super::ConnMeta`]s + their sockets.
    pub const CONNS: u8 = b'C';
    /// Old → new: [`super::Count`] of connections sent.
    pub const END: u8 = b'E';
    /// New → old: [`super::Count`] of connections adopted.
    pub const ADOPTED: u8 = b'D';
    /// Old → new: the connections are the new process's to splice.
    pub const LET_GO: u8 = b'G';
}

/// Connections per `CONNS` message (two sockets each).
pub const CONNS_PER_MESSAGE: usize = 100;

/// The body of an `OFFER`.
pub fn offer(format: u32) -> Vec<u8> {
    let mut body = MAGIC.to_vec();
    body.extend_from_slice(&format.to_le_bytes());
    body
}

/// The format an `OFFER` body names, if it is one.
pub fn read_offer(body: &[u8]) -> Option<u32> {
    let rest = body.strip_prefix(MAGIC)?;
    Some(u32::from_le_bytes(rest.get(..4)?.try_into().ok()?))
}

/// The body of an `ACCEPT` for `format`, saying this build holds the
/// connections it is sent until `LET_GO` ([`HOLDS`] after the format;
/// builds before it send the format alone and splice each connection as
/// it arrives).
pub fn accept(format: u32) -> Vec<u8> {
    let mut body = format.to_le_bytes().to_vec();
    body.push(HOLDS);
    body
}

/// The byte after an `ACCEPT`'s format by which a new process says it
/// holds its connections until `LET_GO`.
pub const HOLDS: u8 = b'H';

/// Whether the new process that sent this `ACCEPT` body holds the
/// connections until `LET_GO`.
pub fn accept_holds(body: &[u8]) -> bool {
    body.get(4) == Some(&HOLDS)
}

/// The format an `ACCEPT` body names.
pub fn read_accept(body: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(body.get(..4)?.try_into().ok()?))
}

/// Whether this build reads `format`, and if not, the refusal's reason.
pub fn readable(format: u32) -> Result<(), String> {
    if format == FORMAT {
        Ok(())
    } else {
        Err(format!(
            "handover format {format} offered, this build reads only format {FORMAT}"
        ))
    }
}

/// What the new process takes over besides connections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handover {
    /// The old process's generation (the new one is one more).
    pub generation: u64,
    /// The next connection id the old process would have given.
    pub next_conn: ConnId,
    /// Each pool's handed over state.
    pub pools: Vec<HandedPool>,
    /// The listening sockets, in the order they are attached.
    pub listeners: Vec<HandedListener>,
}

/// One listen address and its sockets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedListener {
    /// `admin` for the admin endpoint, else the pool's name.
    pub owner: Owner,
    /// As configured (`127.0.0.1:0` stays `:0`): what the new config is
    /// matched against.
    pub configured: SocketAddr,
    /// Where it is bound.
    pub local: SocketAddr,
    /// How many sockets (one per data worker) are attached for it.
    pub sockets: usize,
}

/// Whose listener it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    /// The admin endpoint.
    Admin,
    /// A pool, by name.
    Pool(String),
}

/// One spliced connection, as sent beside its two sockets.
pub use crate::net::handover::ConnMeta;

/// A count of connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    /// How many.
    pub connections: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_biggest_batch_fits_a_message() {
        use crate::net::{pipe, splice};
        let held = pipe::MAX_PIPES * pipe::PIPE_BYTES + CONNS_PER_MESSAGE * 2 * splice::CHUNK;
        // 4 bytes of JSON a held byte ("255,"), and 8 KiB a connection for the rest.
        let worst = 4 * held + CONNS_PER_MESSAGE * 8 * 1024;
        assert!(
            worst < crate::runtime::handover::wire::MAX_MESSAGE,
            "{worst}"
        );
    }

    #[test]
    fn an_offer_reads_back_and_anything_else_is_no_offer() {
        assert_eq!(read_offer(&offer(FORMAT)), Some(FORMAT));
        assert_eq!(read_offer(&offer(7)), Some(7));
        assert_eq!(read_offer(b"pin-proxy handove"), None);
        assert_eq!(read_offer(&offer(1)[..MAGIC.len() + 3]), None);
        assert_eq!(read_offer(b"GET / HTTP/1.1\r\n"), None);
        assert_eq!(read_accept(&accept(3)), Some(3));
        assert_eq!(read_accept(&[1, 0]), None);
        // This build says it holds; a build before it sent the format alone.
        assert!(accept_holds(&accept(1)));
        assert!(!accept_holds(&1u32.to_le_bytes()));
    }

    #[test]
    fn only_this_builds_format_is_readable() {
        assert!(readable(FORMAT).is_ok());
        let err = readable(FORMAT + 1).unwrap_err();
        assert!(err.contains(&format!("format {}", FORMAT + 1)), "{err}");
    }

    #[test]
    fn a_carried_connection_survives_json_with_its_held_bytes() {
        use crate::net::splice::SpliceState;
        use std::time::SystemTime;
        let mut splice = SpliceState::default();
        splice.up.moved = 5;
        splice.down.held = vec![0, 255, 7];
        splice.up.done = true;
        let conn = ConnMeta {
            conn: 42,
            pool: "p".into(),
            backend: "a".into(),
            addr: "127.0.0.1:9".into(),
            peer: "127.0.0.1:5000".parse().unwrap(),
            via: Some("10.0.0.1:40000".parse().unwrap()),
            started: SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123),
            splice,
            idle_ms: 61_500,
            owes: true,
        };
        let json = serde_json::to_vec(&[&conn]).unwrap();
        let back: Vec<ConnMeta> = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, [conn]);
    }
}
