//! Fuzz harness: the PROXY protocol header parser (`net::proxy_header`).
//!
//! Input: the first bytes a connection from a trusted source sends. Besides
//! "no panic": a header's length is within the buffer and its version's
//! bound; a header parses the same from its own bytes; the outcome over the
//! input's prefixes only moves from `Incomplete` to a final one and then
//! stays (so trailing bytes never change a header, and the parser never
//! waits for more once it answered); `Incomplete` never goes past a
//! version's bound; bytes that begin with neither signature are refused
//! within 12 bytes.

use pin_proxy::inspect::proxy_header::{MAX_V1, MAX_V2, Parse, parse};

/// The v2 signature.
const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

/// Parse `data` and each of its prefixes and check what comes out.
pub fn run(data: &[u8]) {
    let whole = parse(data);
    let v1 = data.first() == Some(&b'P');
    match &whole {
        Parse::Done { len, .. } => {
            assert!(*len <= data.len(), "{len} bytes of {}", data.len());
            let bound = if v1 { MAX_V1 } else { MAX_V2 };
            assert!(*len <= bound, "a header of {len} bytes");
            assert_eq!(
                parse(&data[..*len]),
                whole,
                "not the same from its own bytes"
            );
        }
        Parse::Incomplete => {
            let bound = if v1 { MAX_V1 } else { MAX_V2 };
            assert!(data.len() < bound, "Incomplete after {} bytes", data.len());
        }
        Parse::Invalid(reason) => {
            assert!(
                !reason.is_empty() && reason.len() <= 80,
                "reason {reason:?}"
            );
        }
    }
    let neither = !data.starts_with(V2_SIGNATURE) && !data.starts_with(b"PROXY ");
    if data.len() >= V2_SIGNATURE.len() && neither {
        assert!(
            matches!(whole, Parse::Invalid(_)),
            "{whole:?} for no signature"
        );
    }
    check_prefixes(data, &whole);
}

/// The outcome on each prefix (every one up to 4096 bytes, then a sample):
/// `Incomplete` until it settles, then always the same `Done`, or `Invalid`
/// from the first `Invalid` on.
fn check_prefixes(data: &[u8], whole: &Parse) {
    let sampled = (4096..data.len()).step_by(509).chain([data.len()]);
    let mut invalid_since = None;
    for cut in (0..data.len().min(4096)).chain(sampled) {
        let part = parse(&data[..cut]);
        match whole {
            Parse::Done { len, .. } if cut < *len => {
                assert_eq!(
                    part,
                    Parse::Incomplete,
                    "a prefix of {cut} bytes of a header"
                );
            }
            Parse::Done { .. } => assert_eq!(&part, whole, "{cut} bytes after the header"),
            Parse::Incomplete => assert_eq!(part, Parse::Incomplete, "{cut} bytes"),
            Parse::Invalid(_) => match part {
                Parse::Incomplete => assert!(
                    invalid_since.is_none(),
                    "Incomplete at {cut} bytes after Invalid at {invalid_since:?}"
                ),
                Parse::Invalid(_) => {
                    invalid_since.get_or_insert(cut);
                }
                Parse::Done { .. } => panic!("Done at {cut} bytes, Invalid on all: {part:?}"),
            },
        }
    }
}
