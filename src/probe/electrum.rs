//! Electrum server probe (`electrum`, `electrum-tls`): newline-delimited
//! JSON-RPC 2.0 on the server's own address.
//!
//! Connect (for TLS, handshake accepting any certificate: see
//! [`super::tls`]), send `server.version` (protocol 1.6 requires it first),
//! then `server.features` (its newest protocol and its chain's genesis hash,
//! for the report's [`NodeFacts`]; a server that answers it with an error
//! gives facts without them), then `blockchain.headers.subscribe`, whose
//! answer is the tip: its height and its 80-byte header. The header's proof of work must be under its own
//! target, within the network's limit (a network that is not the servers'
//! fails here, and the detail says so). One header proves nothing about its
//! height: when the pool wants the claim proven, the same session fetches
//! the headers behind it ([`super::electrum_headers`]). On a named
//! network it also gives the server's claim, and once per height to agree
//! on the header it has there, to the agreement of the network's servers
//! ([`super::agreed`]). A failed connect is `down`, and so is a server
//! that accepts and then closes before answering (what ElectrumX does at
//! `MAX_SESSIONS`). An error reply, garbage, a line over [`MAX_LINE`]
//! bytes, a header without its work, or no answer within the timeout is
//! `unknown`. The whole probe,
//! connect included, ends within its timeout and reads at most
//! [`MAX_READ`] bytes, and [`electrum_headers::MAX_READ`] more to prove.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, timeout_at};
use tracing::debug;

use super::Failure;
use super::chain::Proving;
use super::electrum_headers;
use super::p2p;
use super::pow::{ChainParams, HEADER_LEN, Header};
use super::tls::AnyCertTls;
use crate::pool::node::NodeFacts;
use crate::pool::report::{Proof, Report, Verdict};

/// Longest line read from a server.
pub const MAX_LINE: usize = 64 * 1024;

/// Most bytes read in one probe (notifications may come between answers).
pub const MAX_READ: usize = 4 * MAX_LINE;

/// Our `client_name` in `server.version`.
const CLIENT: &str = concat!("pin-proxy/", env!("CARGO_PKG_VERSION"));

/// The protocol versions asked for: 1.4 is the oldest whose
/// `blockchain.headers.subscribe` answers with the raw header.
const PROTOCOLS: [&str; 2] = ["1.4", "1.6"];

/// Why a tip on a custom network is not proven.
const NO_RULES: &str = "no proof-of-work rules for a custom network";

/// Most characters of server-supplied text kept in a detail.
const MAX_SHOWN: usize = 80;

/// Probe the Electrum server at `addr` (`host:port`), over TLS when `tls`
/// is given; its tip header is checked under `params` (none: a custom
/// network, whose heights can only be corroborated), and its height proven
/// when `proving` wants it.
///
/// Never panics; returns within `timeout` (plus scheduling delay and one
/// proof-of-work hash).
pub async fn probe(
    addr: &str,
    tls: Option<&AnyCertTls>,
    params: Option<&ChainParams>,
    proving: Option<Proving<'_>>,
    timeout: Duration,
) -> Report {
    let now = Instant::now();
    // A timeout too large to add is as good as none; a day bounds it anyway.
    let deadline = now
        .checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(86_400));
    let stream = match p2p::connect(addr, deadline).await {
        Ok(stream) => stream,
        Err(detail) => return Report::new(Verdict::Down, detail),
    };
    let ask = Ask {
        server: addr,
        params,
        proving: proving.as_ref(),
        deadline,
        timeout,
    };
    let (tip, facts) = match tls {
        None => ask.run(stream).await,
        Some(tls) => match timeout_at(deadline, tls.connect(addr, stream)).await {
            Ok(Ok(stream)) => ask.run(stream).await,
            Ok(Err(err)) => (Err(handshake_failure(&err)), None),
            Err(_) => (
                Err(Failure::Garbled(format!(
                    "no TLS handshake within {}",
                    crate::config::span(timeout)
                ))),
                None,
            ),
        },
    };
    let report = judged_tip(tip);
    match facts {
        Some(facts) => report.with_node(facts),
        None => report,
    }
}

/// The report of what a server sends on `stream` once connected, read as
/// [`probe`] reads it, without the deadline, a network's proof-of-work
/// rules or a proof (as for a custom network): the fuzz harness
/// (fuzz/harness/electrum.rs) drives it with a server's bytes.
pub async fn answers<S>(stream: S) -> Report
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut session = Session::new(stream);
    let tip = session.tip().await;
    session.close().await;
    let report = judged_tip(tip.map(|tip| (tip, Proof::Unproven(NO_RULES.into()))));
    match session.facts.take() {
        Some(facts) => report.with_node(facts),
        None => report,
    }
}

/// The report of a tip and its proof, or of why there is none.
fn judged_tip(tip: Result<(Announced, Proof), Failure>) -> Report {
    let (tip, proof) = match tip {
        Ok(tip) => tip,
        Err(Failure::Closed(detail)) => return Report::new(Verdict::Down, detail),
        Err(Failure::Garbled(detail)) => return Report::new(Verdict::Unknown, detail),
    };
    let height = tip.height;
    Report {
        proof,
        ..Report::with_height(
            Verdict::Healthy,
            height,
            format!(
                "height {height} ({}, protocol {})",
                tip.software, tip.protocol
            ),
        )
    }
}

/// What a server said its tip is.
pub(super) struct Announced {
    software: String,
    protocol: String,
    /// The height it claims.
    pub(super) height: u64,
    /// The header it says is at that height.
    pub(super) header: Header,
}

/// A TLS handshake that ended with the server hanging up refuses us as
/// a closed connection does; anything else is a server we do not understand.
fn handshake_failure(err: &std::io::Error) -> Failure {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    let detail = format!("TLS handshake: {err}");
    match err.kind() {
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => Failure::Closed(detail),
        _ => Failure::Garbled(detail),
    }
}

/// What one probe asks of a server once connected.
struct Ask<'a> {
    /// The address probed: who the server is among its network's.
    server: &'a str,
    params: Option<&'a ChainParams>,
    proving: Option<&'a Proving<'a>>,
    deadline: Instant,
    timeout: Duration,
}

impl Ask<'_> {
    /// Ask for the version, the features and the tip on `stream`, check
    /// the tip, prove it if wanted, then close the stream. The node's
    /// facts come back whatever became of the tip, once they were read.
    async fn run<S>(&self, stream: S) -> (Result<(Announced, Proof), Failure>, Option<NodeFacts>)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let mut session = Session::new(stream);
        let tip = match timeout_at(self.deadline, session.tip()).await {
            Ok(tip) => tip,
            Err(_) => Err(Failure::Garbled(format!(
                "no answer to {} within {}",
                session.awaiting,
                crate::config::span(self.timeout)
            ))),
        };
        let result = match tip {
            Ok(tip) => self.judge(&mut session, tip).await,
            Err(failure) => Err(failure),
        };
        session.close().await;
        (result, session.facts.take())
    }

    /// The tip's own work under the network's rules, then the proof.
    async fn judge<S>(
        &self,
        session: &mut Session<S>,
        tip: Announced,
    ) -> Result<(Announced, Proof), Failure>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let Some(params) = self.params else {
            return Ok((tip, Proof::Unproven(NO_RULES.into())));
        };
        if let Err(err) = params.check_alone(tip.height, &tip.header) {
            return Err(Failure::Garbled(format!(
                "tip {err}: health.network {} may not be the servers' chain",
                params.name()
            )));
        }
        let proof = match self.proving {
            Some(p) => {
                let wanted = (p.wanted)(tip.height);
                if wanted {
                    session.budget += electrum_headers::MAX_READ;
                }
                let (chain, server) = (p.chain, self.server);
                electrum_headers::prove(session, chain, server, &tip, wanted, self.deadline).await
            }
            None => Proof::NotAsked,
        };
        Ok((tip, proof))
    }
}

/// A line-framed JSON-RPC connection within a read budget.
pub(super) struct Session<S> {
    stream: S,
    /// Bytes read and not yet returned as lines.
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
    read: usize,
    /// Most bytes it may read.
    budget: usize,
    next_id: u64,
    /// The method whose answer we wait for, for errors.
    awaiting: &'static str,
    /// What the server said of itself, once it did.
    facts: Option<NodeFacts>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    fn new(stream: S) -> Session<S> {
        Session {
            stream,
            buf: Vec::new(),
            scanned: 0,
            read: 0,
            budget: MAX_READ,
            next_id: 0,
            awaiting: "server.version",
            facts: None,
        }
    }

    async fn tip(&mut self) -> Result<Announced, Failure> {
        let version = self
            .call("server.version", json!([CLIENT, PROTOCOLS]))
            .await?;
        let (software, protocol) = match version.as_array().map(Vec::as_slice) {
            Some([Value::String(software), Value::String(protocol)]) => (software, protocol),
            _ => return Err(self.odd(&version)),
        };
        let features = match self.request("server.features", json!([])).await? {
            Ok(Value::Object(features)) => features,
            // Not knowing it withholds facts, it is no failure.
            Ok(_) | Err(_) => serde_json::Map::new(),
        };
        let text = |key: &str| features.get(key).and_then(Value::as_str);
        self.facts = Some(NodeFacts::electrum(
            software,
            protocol,
            text("protocol_max"),
            text("genesis_hash"),
        ));
        let (software, protocol) = (shown(software), shown(protocol));
        let tip = self.call("blockchain.headers.subscribe", json!([])).await?;
        let height = tip.get("height").and_then(Value::as_u64);
        let header = tip.get("hex").and_then(Value::as_str).and_then(header);
        match (height, header) {
            (Some(height), Some(header)) => Ok(Announced {
                software,
                protocol,
                height,
                header,
            }),
            _ => Err(self.odd(&tip)),
        }
    }

    /// Send a request and return its `result`, skipping notifications; an
    /// error answer is a failure.
    pub(super) async fn call(
        &mut self,
        method: &'static str,
        params: Value,
    ) -> Result<Value, Failure> {
        self.request(method, params)
            .await?
            .map_err(|message| Failure::Garbled(format!("{method} answered error: {message}")))
    }

    /// Send a request and return its `result`, or the message of its error
    /// answer, skipping notifications.
    async fn request(
        &mut self,
        method: &'static str,
        params: Value,
    ) -> Result<Result<Value, String>, Failure> {
        self.awaiting = method;
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        let sent = match self.stream.write_all(&line).await {
            Ok(()) => self.stream.flush().await,
            Err(err) => Err(err),
        };
        sent.map_err(|err| Failure::Closed(format!("send {method}: {err}")))?;
        loop {
            let line = self.line().await?;
            if line.trim_ascii().is_empty() {
                continue;
            }
            let Ok(Value::Object(mut reply)) = serde_json::from_slice::<Value>(&line) else {
                return Err(Failure::Garbled(format!(
                    "answer to {method} is not a JSON-RPC object"
                )));
            };
            let answer_id = reply.get("id").filter(|id| !id.is_null());
            if answer_id.is_none() && reply.contains_key("method") {
                continue; // a notification
            }
            if let Some(error) = reply.get("error").filter(|e| !e.is_null()) {
                let message = error.get("message").and_then(Value::as_str);
                return Ok(Err(message.map_or_else(|| shown(&error.to_string()), shown)));
            }
            if answer_id != Some(&json!(id)) {
                return Err(Failure::Garbled(format!(
                    "answer to {method} has the wrong id"
                )));
            }
            return reply
                .remove("result")
                .map(Ok)
                .ok_or_else(|| Failure::Garbled(format!("answer to {method} has no result")));
        }
    }

    /// An answer of the wrong shape.
    fn odd(&self, answer: &Value) -> Failure {
        Failure::Garbled(format!(
            "{} answered {}",
            self.awaiting,
            shown(&answer.to_string())
        ))
    }

    /// The next line, newline included, within the line and read budgets.
    async fn line(&mut self) -> Result<Vec<u8>, Failure> {
        let mut chunk = [0u8; 8 * 1024];
        loop {
            if let Some(at) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
                let end = self.scanned + at + 1;
                self.scanned = 0;
                if end > MAX_LINE {
                    return Err(self.too_long());
                }
                return Ok(self.buf.drain(..end).collect());
            }
            self.scanned = self.buf.len();
            if self.buf.len() > MAX_LINE {
                return Err(self.too_long());
            }
            if self.read >= self.budget {
                return Err(Failure::Garbled(format!(
                    "no answer to {} in the first {} bytes",
                    self.awaiting, self.budget
                )));
            }
            let want = chunk.len().min(self.budget - self.read);
            let n = match self.stream.read(&mut chunk[..want]).await {
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Err(Failure::Closed(format!(
                        "reset before the answer to {}",
                        self.awaiting
                    )));
                }
                Err(err) => return Err(Failure::Closed(format!("read: {err}"))),
            };
            if n == 0 {
                return Err(Failure::Closed(format!(
                    "closed before the answer to {}",
                    self.awaiting
                )));
            }
            self.read += n;
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn too_long(&self) -> Failure {
        Failure::Garbled(format!(
            "a line over {MAX_LINE} bytes while waiting for {}",
            self.awaiting
        ))
    }

    async fn close(&mut self) {
        if let Err(err) = self.stream.shutdown().await {
            debug!(err = %err, "probe_shutdown_failed");
        }
    }
}

/// An 80-byte header from its hex.
pub(super) fn header(hex: &str) -> Option<Header> {
    let hex = hex.as_bytes();
    if hex.len() != 2 * HEADER_LEN {
        return None;
    }
    let nibble = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let mut raw = [0u8; HEADER_LEN];
    for (byte, pair) in raw.iter_mut().zip(hex.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(Header { raw })
}

/// Server-supplied text as it may appear in a detail: no control
/// characters, at most [`MAX_SHOWN`] characters.
fn shown(text: &str) -> String {
    let mut out: String = text.chars().filter(|c| !c.is_control()).collect();
    if let Some((cut, _)) = out.char_indices().nth(MAX_SHOWN) {
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

#[cfg(test)]
#[path = "electrum_tests.rs"]
mod tests;
