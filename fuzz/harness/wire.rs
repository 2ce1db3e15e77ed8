//! Fuzz harness: the P2P message decoder and `version` parser (`probe::wire`).
//!
//! Input: one control byte, then the bytes a peer sends. Control bits:
//! - `0x80`: rewrite each complete frame's checksum first, so mutated payloads
//!   get past the double-SHA256 check the fuzzer cannot forge;
//! - `0x40`: cap payloads at [`SMALL_CAP`] bytes, so the oversize check is hit;
//! - `0x3f`: feed the stream in chunks of this many bytes (0: all at once).

use std::mem::discriminant;

use pin_proxy::inspect::wire::{
    self, Decoder, HEADER_LEN, MAX_PAYLOAD, MAX_USER_AGENT, Magic, Message, Version, WireError,
};

/// Bitcoin mainnet, the magic of the spec vectors in the seed corpus.
const MAGIC: Magic = [0xf9, 0xbe, 0xb4, 0xd9];
/// The payload cap when control bit `0x40` is set.
const SMALL_CAP: usize = 64;

/// Decode `data` as described above and check what comes out.
pub fn run(data: &[u8]) {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let mut stream = stream.to_vec();
    if control & 0x80 != 0 {
        fix_checksums(&mut stream);
    }
    let cap = if control & 0x40 != 0 {
        SMALL_CAP
    } else {
        MAX_PAYLOAD
    };
    let chunk = usize::from(control & 0x3f);

    let (messages, error) = decode(&stream, cap, stream.len());
    if chunk != 0 {
        // A peer chooses how its bytes are split into reads; the result may not depend on it.
        let (split, split_error) = decode(&stream, cap, chunk);
        assert_eq!(split, messages, "messages depend on the read sizes");
        assert_eq!(
            split_error.as_ref().map(discriminant),
            error.as_ref().map(discriminant),
            "error kind depends on the read sizes: {split_error:?} vs {error:?}"
        );
    }
    // Each message is exactly the bytes it was framed from.
    let framed: Vec<u8> = messages
        .iter()
        .flat_map(|m| wire::encode(MAGIC, &m.command, &m.payload))
        .collect();
    assert!(
        stream.starts_with(&framed),
        "messages are not the stream's frames"
    );
    for message in messages.iter().filter(|m| m.command == "version") {
        check_version(&message.payload);
    }
    // Straight on the raw bytes too: payloads behind a valid checksum are
    // rare in mutated input.
    check_version(&stream);
}

/// Feed `stream` to a decoder `chunk` bytes at a time, taking every message
/// after each feed; the messages, then the first error (or `finish`'s).
fn decode(stream: &[u8], cap: usize, chunk: usize) -> (Vec<Message>, Option<WireError>) {
    let mut decoder = Decoder::with_max_payload(MAGIC, cap);
    let mut messages = Vec::new();
    for piece in stream.chunks(chunk.max(1)) {
        decoder.feed(piece);
        loop {
            match decoder.next_message() {
                Ok(Some(message)) => messages.push(message),
                Ok(None) => break,
                Err(err) => {
                    // A failed stream stays failed, whatever comes after.
                    decoder.feed(b"more");
                    assert_eq!(decoder.next_message(), Err(err.clone()), "error not sticky");
                    assert_eq!(
                        decoder.finish(),
                        Err(err.clone()),
                        "finish forgot the error"
                    );
                    return (messages, Some(err));
                }
            }
        }
        // Drained: less than one whole frame is left.
        let buffered = decoder.buffered();
        assert!(
            buffered < HEADER_LEN + cap,
            "{buffered} bytes buffered with cap {cap}"
        );
    }
    (messages, decoder.finish().err())
}

/// Parse a `version` payload; a parsed user agent stays within its cap
/// (each invalid byte may become a 3-byte U+FFFD).
fn check_version(payload: &[u8]) {
    if let Ok(version) = Version::parse(payload) {
        let len = version.user_agent.len();
        assert!(len <= 3 * MAX_USER_AGENT, "user agent of {len} bytes");
    }
}

/// Give every complete frame in `stream` its correct checksum.
fn fix_checksums(stream: &mut [u8]) {
    let mut at = 0;
    while let Some(header) = stream.get(at..at + HEADER_LEN) {
        let len = u32::from_le_bytes([header[16], header[17], header[18], header[19]]);
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|len| (at + HEADER_LEN).checked_add(len))
        else {
            return;
        };
        let Some(payload) = stream.get(at + HEADER_LEN..end) else {
            return;
        };
        let sum = wire::checksum(payload);
        stream[at + 20..at + HEADER_LEN].copy_from_slice(&sum);
        at = end;
    }
}
