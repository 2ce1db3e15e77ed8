//! Bitcoin-family P2P probe: the `version` handshake reads a node's
//! `start_height`, and its services, protocol version and user agent for
//! the report's [`NodeFacts`]; when a backend's claim needs proving, the
//! same connection asks for the headers behind it ([`super::headers`]).
//!
//! Connect, send our `version`, read until the node's `version` (skipping
//! whatever comes before it), send `verack`, prove if asked, close. A failed
//! connect is `down`, and so is a node that accepts and then closes or
//! resets before its `version`: that is how a node that banned us (or stopped
//! taking peers) treats every client too. A node that was reached but gave
//! no answer we understand is `unknown`. The whole probe, connect included,
//! ends within its timeout and reads at most [`MAX_READ`] bytes before the
//! `version`.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tracing::debug;

use super::Failure;
use super::chain::Proving;
use super::headers;
use super::wire::{self, Decoder, Magic, Message, Version, VersionParams};
use crate::pool::node::NodeFacts;
use crate::pool::report::Proof;
use crate::pool::report::{Report, Verdict};

/// Most bytes read from a node while waiting for its `version`.
pub const MAX_READ: usize = 64 * 1024;

/// Most bytes read from a node while proving, on top of [`MAX_READ`].
const MAX_PROOF_READ: usize =
    (headers::MAX_PER_PROBE / headers::MAX_PER_MESSAGE + 1) * (headers::MAX_PAYLOAD + MAX_READ);

/// Probe the node at `addr` (`host:port`) on the network of `magic`.
///
/// Never panics; returns within `timeout` (plus scheduling delay).
#[cfg(all(test, feature = "sim"))]
pub async fn probe(addr: &str, magic: Magic, timeout: Duration) -> Report {
    probe_proving(addr, magic, timeout, None).await
}

/// [`probe`], and prove the claimed height when `proving` wants it.
pub async fn probe_proving(
    addr: &str,
    magic: Magic,
    timeout: Duration,
    proving: Option<Proving<'_>>,
) -> Report {
    let now = Instant::now();
    // A timeout too large to add is as good as none; a day bounds it anyway.
    let deadline = now
        .checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(86_400));
    let stream = match connect(addr, deadline).await {
        Ok(stream) => stream,
        Err(detail) => return Report::new(Verdict::Down, detail),
    };
    let mut peer = Peer::new(stream, magic);
    let version = match timeout_at(deadline, peer.handshake()).await {
        Ok(Ok(version)) => version,
        Ok(Err(Failure::Closed(detail))) => return Report::new(Verdict::Down, detail),
        Ok(Err(Failure::Garbled(detail))) => return Report::new(Verdict::Unknown, detail),
        Err(_) => {
            return Report::new(
                Verdict::Unknown,
                format!("no version within {}", crate::config::span(timeout)),
            );
        }
    };
    let facts = NodeFacts::p2p(
        version.services,
        version.version,
        &version.user_agent,
        version.start_height,
    );
    let Ok(height) = u64::try_from(version.start_height) else {
        peer.close().await;
        let detail = format!("negative start height {}", version.start_height);
        return Report::new(Verdict::Unknown, detail).with_node(facts);
    };
    let proof = match proving {
        Some(p) if (p.wanted)(height) => {
            peer.budget = MAX_PROOF_READ;
            headers::prove(&mut peer, p.chain, height, deadline).await
        }
        _ => Proof::NotAsked,
    };
    peer.close().await;
    Report {
        proof,
        ..Report::with_height(Verdict::Healthy, height, format!("height {height}"))
    }
    .with_node(facts)
}

/// Resolve and connect, trying each address in turn, before `deadline`.
pub(super) async fn connect(addr: &str, deadline: Instant) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = match timeout_at(deadline, tokio::net::lookup_host(addr)).await {
        Err(_) => return Err("resolve timed out".into()),
        Ok(Err(err)) => return Err(format!("resolve: {err}")),
        Ok(Ok(addrs)) => addrs.collect(),
    };
    let mut last = String::from("resolve: no addresses");
    for target in addrs {
        match timeout_at(deadline, TcpStream::connect(target)).await {
            Err(_) => return Err("connect timed out".into()),
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(err)) if err.kind() == io::ErrorKind::ConnectionRefused => {
                last = "refused".into();
            }
            Ok(Err(err)) => last = format!("connect: {err}"),
        }
    }
    Err(last)
}

/// A framed P2P connection within a read budget.
pub struct Peer {
    stream: TcpStream,
    magic: Magic,
    decoder: Decoder,
    read: usize,
    budget: usize,
    /// The message we wait for, for errors.
    awaiting: &'static str,
}

impl Peer {
    fn new(stream: TcpStream, magic: Magic) -> Peer {
        Peer {
            stream,
            magic,
            // Anything larger than a full `headers` message is refused from its header.
            decoder: Decoder::with_max_payload(magic, headers::MAX_PAYLOAD),
            read: 0,
            budget: MAX_READ,
            awaiting: "version",
        }
    }

    /// Exchange versions and send our `verack`; the node's `version`, or
    /// why not.
    async fn handshake(&mut self) -> Result<Version, Failure> {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        let params = VersionParams {
            services: 0,
            timestamp: wire::unix_now(),
            receiver: self.stream.peer_addr().unwrap_or(unspecified),
            sender: self.stream.local_addr().unwrap_or(unspecified),
            nonce: wire::random_nonce(),
            user_agent: wire::user_agent(),
            start_height: 0,
        };
        self.send("version", &wire::version_payload(&params))
            .await
            .map_err(|err| Failure::Closed(format!("send version: {err}")))?;
        let version = loop {
            let msg = self.recv().await?;
            if msg.command == "version" {
                break Version::parse(&msg.payload).map_err(|e| Failure::Garbled(e.to_string()))?;
            }
        };
        // Our own `version` came back: the address echoes (a plain TCP echo
        // service, a misconfigured port). Nothing was learnt about a node.
        if version.nonce == params.nonce {
            return Err(Failure::Garbled(
                "our own version came back (an echo, not a node)".into(),
            ));
        }
        // The answer is in hand: a node that hangs up now changes nothing.
        if let Err(err) = self.send("verack", &[]).await {
            debug!(err = %err, "probe_verack_failed");
        }
        Ok(version)
    }

    /// Send `getheaders` with `payload` and return the `headers` answer,
    /// answering pings meanwhile.
    ///
    /// # Errors
    /// Why no answer came: closed, garbled, or over the read budget.
    pub async fn request(&mut self, payload: &[u8]) -> Result<Vec<u8>, String> {
        self.awaiting = "headers";
        self.send("getheaders", payload)
            .await
            .map_err(|err| format!("send getheaders: {err}"))?;
        loop {
            let msg = self.recv().await.map_err(|f| match f {
                Failure::Closed(d) | Failure::Garbled(d) => d,
            })?;
            match msg.command.as_str() {
                "headers" => return Ok(msg.payload),
                "ping" => {
                    if let Err(err) = self.send("pong", &msg.payload).await {
                        return Err(format!("send pong: {err}"));
                    }
                }
                _ => {}
            }
        }
    }

    async fn send(&mut self, command: &str, payload: &[u8]) -> io::Result<()> {
        self.stream
            .write_all(&wire::encode(self.magic, command, payload))
            .await
    }

    /// The next message, within the read budget.
    async fn recv(&mut self) -> Result<Message, Failure> {
        let mut buf = [0u8; 8 * 1024];
        loop {
            if let Some(msg) = self
                .decoder
                .next_message()
                .map_err(|err| Failure::Garbled(err.to_string()))?
            {
                return Ok(msg);
            }
            if self.read >= self.budget {
                return Err(Failure::Garbled(format!(
                    "no {} in the first {} bytes",
                    self.awaiting, self.budget
                )));
            }
            let want = buf.len().min(self.budget - self.read);
            let n = match self.stream.read(&mut buf[..want]).await {
                Ok(n) => n,
                Err(err) => return Err(Failure::Closed(format!("read: {err}"))),
            };
            if n == 0 {
                return Err(Failure::Closed(match self.decoder.finish() {
                    Ok(()) => format!("closed before {}", self.awaiting),
                    Err(err) => format!("closed mid-message: {err}"),
                }));
            }
            self.read += n;
            self.decoder.feed(&buf[..n]);
        }
    }

    async fn close(&mut self) {
        if let Err(err) = self.stream.shutdown().await {
            debug!(err = %err, "probe_shutdown_failed");
        }
    }
}

// Against the simulated node.
#[cfg(all(test, feature = "sim"))]
#[path = "p2p_tests.rs"]
mod tests;
