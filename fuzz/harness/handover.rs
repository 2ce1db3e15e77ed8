//! Fuzz harness: what the two processes of a live upgrade read from each
//! other (`runtime::handover`): datagrams put together into messages
//! (`wire::Assembly`), then each message's body as its reader decodes it
//! (`OFFER`, `ACCEPT`, `HANDOVER`, `CONNS`, `END`/`ADOPTED`).
//!
//! Input: one control byte, then
//! - control bit `0x80` clear: datagrams, each one length byte and its
//!   bytes (`[tag, more]` + a slice of the body), put together as a
//!   channel receives them, with a body limit of `(control & 0x7f) * 8`
//!   bytes (0: the real limit); each message is then decoded;
//! - set: one message body, decoded as each kind of message.
//!
//! Besides "no panic": a message is exactly its datagrams' slices, under
//! one tag, within the limit; an empty datagram is the peer gone and any
//! other error is `InvalidData`; a message split as `Channel::send` splits
//! it comes back whole, its descriptors in order; an offer or accept reads
//! its format back; a decoded `Handover`, connection batch or count
//! encodes to JSON that decodes and encodes to the same bytes.

use std::io::ErrorKind;

use pin_proxy::inspect::handover::{
    self, ConnMeta, Count, FORMAT, Handover, MAGIC, read_accept, read_offer, readable, tag,
};
use pin_proxy::inspect::handover_wire::{
    Assembly, DATAGRAM, FDS_PER_DATAGRAM, HEAD, MAX_MESSAGE, Packet, datagrams,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Decode `data` as described above and check what comes out.
pub fn run(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    if control & 0x80 != 0 {
        decode_body(tag::HANDOVER, rest);
        decode_body(tag::CONNS, rest);
        decode_body(tag::END, rest);
        decode_body(tag::OFFER, rest);
        decode_body(tag::ACCEPT, rest);
        return;
    }
    let max = match usize::from(control & 0x7f) * 8 {
        0 => MAX_MESSAGE,
        max => max,
    };
    receive(rest, max);
}

/// Put the datagrams in `stream` together as a channel does, one message
/// after another, and check each step against a plain model of the rule.
fn receive(mut stream: &[u8], max: usize) {
    let mut assembly = Assembly::new(max);
    // The model: the tag and the body so far of the message in progress.
    let mut model: Option<(u8, Vec<u8>)> = None;
    while let Some((&len, rest)) = stream.split_first() {
        let len = usize::from(len).min(rest.len());
        let (datagram, rest) = rest.split_at(len);
        stream = rest;
        let got = assembly.push(datagram, Vec::new());
        let &[tag, more, ref part @ ..] = datagram else {
            let want = match datagram.is_empty() {
                true => ErrorKind::UnexpectedEof,
                false => ErrorKind::InvalidData,
            };
            let err = got.expect_err("a datagram shorter than its head taken");
            assert_eq!(err.kind(), want, "{err}");
            // A channel gives up on the first error.
            return;
        };
        let (was, body) = model.get_or_insert_with(|| (tag, Vec::new()));
        if *was != tag || body.len() + part.len() > max {
            let err = got.expect_err("a datagram of another message or over the limit taken");
            assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
            return;
        }
        body.extend_from_slice(part);
        match got.expect("a datagram refused") {
            None => assert_ne!(more, 0, "the last datagram did not end its message"),
            Some(packet) => {
                assert_eq!(more, 0, "a message ended before its last datagram");
                let (tag, body) = model.take().unwrap_or_default();
                assert_eq!((packet.tag, &packet.body), (tag, &body));
                assert!(packet.fds.is_empty());
                check_split(&packet);
                decode_body(packet.tag, &packet.body);
            }
        }
    }
}

/// `packet` split as `Channel::send` splits it, with a few descriptors'
/// places, comes back whole, each datagram within its bounds.
fn check_split(packet: &Packet) {
    let fds = packet.body.len() % 500;
    let mut assembly = Assembly::new(packet.body.len());
    let mut next_fd = 0;
    let mut whole = None;
    for (head, part, these) in datagrams(packet.tag, &packet.body, fds) {
        assert!(whole.is_none(), "a datagram after the last");
        assert!(HEAD + part.len() <= DATAGRAM, "a datagram too large");
        assert!(these.len() <= FDS_PER_DATAGRAM, "too many descriptors");
        assert_eq!(these.start, next_fd, "descriptors out of order");
        next_fd = these.end;
        let datagram = [&head[..], part].concat();
        whole = assembly
            .push(&datagram, Vec::new())
            .expect("a datagram of a split message");
    }
    assert_eq!(next_fd, fds, "descriptors left out");
    let whole = whole.expect("the split message ends");
    assert_eq!((whole.tag, &whole.body), (packet.tag, &packet.body));
}

/// Decode `body` as the reader of a `tag` message does.
fn decode_body(tag: u8, body: &[u8]) {
    match tag {
        tag::OFFER => {
            let format = read_offer(body);
            assert_eq!(
                format.is_some(),
                body.starts_with(MAGIC) && body.len() >= MAGIC.len() + 4
            );
            if let Some(format) = format {
                assert!(body.starts_with(&handover::offer(format)));
                assert_eq!(readable(format).is_ok(), format == FORMAT);
            }
        }
        tag::ACCEPT => {
            if let Some(format) = read_accept(body) {
                assert!(body.starts_with(&format.to_le_bytes()));
                // It holds its connections when its accept says so.
                let holds = handover::accept_holds(body);
                assert_eq!(holds, body.get(4) == Some(&handover::HOLDS));
                assert_eq!(holds, body.starts_with(&handover::accept(format)));
            } else {
                assert!(body.len() < 4);
            }
        }
        tag::HANDOVER => round_trip::<Handover>(body),
        tag::CONNS => round_trip::<Vec<ConnMeta>>(body),
        tag::END | tag::ADOPTED => round_trip::<Count>(body),
        _ => {}
    }
}

/// A `T` decoded from `body` encodes to JSON that decodes and encodes
/// to the same bytes.
fn round_trip<T: Serialize + DeserializeOwned>(body: &[u8]) {
    let Ok(value) = serde_json::from_slice::<T>(body) else {
        return;
    };
    let json = serde_json::to_vec(&value).expect("a decoded message encodes");
    let back: T = serde_json::from_slice(&json).expect("an encoded message decodes");
    let again = serde_json::to_vec(&back).expect("a decoded message encodes");
    assert_eq!(
        String::from_utf8_lossy(&again),
        String::from_utf8_lossy(&json),
        "not the same message back"
    );
}
