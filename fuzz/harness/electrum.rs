//! Fuzz harness: an Electrum server's answers as the probe reads them
//! (`probe::electrum`: line framing, JSON-RPC replies, `server.version`,
//! `server.features`, `blockchain.headers.subscribe`) and the
//! `blockchain.block.headers` results a proof reads
//! (`probe::electrum_headers::parse`).
//!
//! Input: one control byte, then the bytes a server sends. Control bits:
//! - `0x3f`: the most bytes a read returns (0: as many as asked);
//! - `0x40`: 70,000 spaces go before the first newline (ElectrumX pads its
//!   answers with spaces), so the line bound is hit;
//! - `0x80`: the connection is reset after the bytes instead of closed.
//!
//! Besides "no panic": the same report whatever the read sizes; at most
//! `MAX_READ` bytes read; a height only when healthy, never `unhealthy`; a
//! detail without control characters, short; the node's facts printable,
//! bounded, a genesis hash in lower case, and the same back from JSON (as
//! `/status`, the state file and a live upgrade carry them); the requests
//! sent are one line each, numbered from 0. Each line's `result` is also
//! read as a `blockchain.block.headers` answer: headers read are as many
//! as its `count`, each the 80 bytes of its hex.

use std::io;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use pin_proxy::inspect::{NodeFacts, Proof, Report, Verdict, electrum_answers, electrum_headers};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The probe's read bound (`electrum::MAX_READ`).
const MAX_READ: usize = 4 * 64 * 1024;
/// Longest detail expected: 80 characters of server text and the words
/// around them.
const MAX_DETAIL: usize = 256;
/// Longest server text kept in a fact (`node::MAX_TEXT`).
const MAX_TEXT: usize = 80;

/// Read `data` as described above and check what comes out.
pub fn run(data: &[u8]) {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let mut bytes = stream.to_vec();
    if control & 0x40 != 0 {
        let at = bytes
            .iter()
            .position(|b| *b == b'\n')
            .unwrap_or(bytes.len());
        bytes.splice(at..at, std::iter::repeat_n(b' ', 70_000));
    }
    let reset = control & 0x80 != 0;
    let chunk = usize::from(control & 0x3f);
    let (report, server) = answers(&bytes, 0, reset);
    if chunk != 0 {
        let (split, _) = answers(&bytes, chunk, reset);
        assert_eq!(split, report, "the report depends on the read sizes");
    }
    assert!(server.read <= MAX_READ, "{} bytes read", server.read);
    check_report(&report);
    check_requests(&server.written);
    for line in stream.split(|b| *b == b'\n') {
        check_headers(line);
    }
}

/// The probe's report on `bytes` read at most `chunk` bytes at a time.
fn answers(bytes: &[u8], chunk: usize, reset: bool) -> (Report, Server<'_>) {
    let mut server = Server {
        bytes,
        chunk,
        reset,
        read: 0,
        written: Vec::new(),
    };
    let report = {
        let mut future = pin!(electrum_answers(&mut server));
        // The server never makes it wait: done in one poll.
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(report) => report,
            Poll::Pending => panic!("the probe waited on a server that never blocks"),
        }
    };
    (report, server)
}

fn check_report(report: &Report) {
    let detail = &report.detail;
    assert!(
        !detail.chars().any(char::is_control),
        "control character in {detail:?}"
    );
    let chars = detail.chars().count();
    assert!(chars <= MAX_DETAIL, "detail of {chars} chars: {detail}");
    assert!(report.unfit.is_none(), "judged without a requirement");
    match report.verdict {
        Verdict::Healthy => {
            let height = report.height.expect("healthy without a height");
            assert!(
                detail.starts_with(&format!("height {height} (")),
                "{detail}"
            );
            assert!(matches!(report.proof, Proof::Unproven(_)));
        }
        Verdict::Down | Verdict::Unknown => {
            assert_eq!(report.height, None, "a height without a tip");
            assert_eq!(report.proof, Proof::NotAsked);
        }
        Verdict::Unhealthy => panic!("unhealthy: {detail}"),
    }
    if let Some(facts) = &report.node {
        check_facts(facts);
    }
}

/// An Electrum server's facts: printable, bounded, and the same from JSON.
fn check_facts(facts: &NodeFacts) {
    let NodeFacts::Electrum(e) = facts else {
        panic!("not an Electrum server's facts: {facts:?}");
    };
    let texts = [
        Some(&e.server_version),
        Some(&e.protocol),
        e.protocol_max.as_ref(),
    ];
    for text in texts.into_iter().flatten() {
        check_text(text);
    }
    if let Some(genesis) = &e.genesis_hash {
        let hash = genesis.len() == 64 && genesis.bytes().all(|b| b.is_ascii_hexdigit());
        if hash {
            assert!(
                !genesis.bytes().any(|b| b.is_ascii_uppercase()),
                "{genesis}"
            );
        } else {
            check_text(genesis);
        }
    }
    let json = serde_json::to_string(facts).expect("facts encode");
    let back: NodeFacts = serde_json::from_str(&json).expect("facts decode");
    assert_eq!(&back, facts, "not the same facts back from {json}");
    let shown = facts.to_string();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
}

fn check_text(text: &str) {
    assert!(text.len() <= MAX_TEXT, "{} bytes kept", text.len());
    assert!(
        text.bytes().all(|b| b == b' ' || b.is_ascii_graphic()),
        "not printable: {text:?}"
    );
}

/// The requests: JSON-RPC lines, ids 0, 1, 2 ... in order.
fn check_requests(written: &[u8]) {
    assert!(written.ends_with(b"\n") || written.is_empty());
    let lines = written.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    for (i, line) in lines.enumerate() {
        let request: Value = serde_json::from_slice(line).expect("a request is JSON");
        assert_eq!(request["id"], i, "request {i}: {request}");
        assert!(request["method"].is_string(), "{request}");
        assert!(i < 3, "more than three requests");
    }
}

/// A line's `result`, read as a `blockchain.block.headers` answer.
fn check_headers(line: &[u8]) {
    let Ok(reply) = serde_json::from_slice::<Value>(line) else {
        return;
    };
    let Some(result) = reply.get("result") else {
        return;
    };
    let Some(headers) = electrum_headers(result) else {
        return;
    };
    assert_eq!(Some(headers.len() as u64), result["count"].as_u64());
    let hex: String = match (&result["headers"], &result["hex"]) {
        (Value::Array(list), _) => list.iter().filter_map(Value::as_str).collect(),
        (_, Value::String(hex)) => hex.clone(),
        _ => panic!("headers read from neither form: {result}"),
    };
    let read: String = headers
        .iter()
        .flat_map(|h| h.raw)
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(read, hex.to_ascii_lowercase(), "headers not as sent");
}

/// A server that sends `bytes` (at most `chunk` a read, when not 0), then
/// closes or resets, and takes every request.
struct Server<'a> {
    bytes: &'a [u8],
    chunk: usize,
    reset: bool,
    /// Bytes read so far.
    read: usize,
    /// What the probe sent.
    written: Vec<u8>,
}

impl AsyncRead for Server<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let rest = &this.bytes[this.read..];
        if rest.is_empty() && this.reset {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        let mut n = rest.len().min(buf.remaining());
        if this.chunk != 0 {
            n = n.min(this.chunk);
        }
        buf.put_slice(&rest[..n]);
        this.read += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Server<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().written.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
