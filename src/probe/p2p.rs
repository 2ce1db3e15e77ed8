//! Bitcoin-family P2P probe: the `version` handshake reads a node's
//! `start_height`; when a backend's claim needs proving, the same connection
//! asks for the headers behind it ([`super::headers`]).
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

use super::chain::Chain;
use super::headers::{self, Proof};
use super::wire::{self, Decoder, Magic, Message, Version, VersionParams};
use super::{Report, Verdict};

/// Most bytes read from a node while waiting for its `version`.
pub const MAX_READ: usize = 64 * 1024;

/// Most bytes read from a node while proving, on top of [`MAX_READ`].
const MAX_PROOF_READ: usize =
    (headers::MAX_PER_PROBE / headers::MAX_PER_MESSAGE + 1) * (headers::MAX_PAYLOAD + MAX_READ);

/// What a probe may prove: the network's chain, and which claims need it.
pub struct Proving<'a> {
    /// What is known of the network's chain.
    pub chain: &'a Chain,
    /// True for a claimed height that must be proven.
    pub wanted: &'a (dyn Fn(u64) -> bool + Send + Sync),
}

/// Probe the node at `addr` (`host:port`) on the network of `magic`.
///
/// Never panics; returns within `timeout` (plus scheduling delay).
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
    let height = match timeout_at(deadline, peer.handshake()).await {
        Ok(Ok(height)) => height,
        Ok(Err(Failure::Closed(detail))) => return Report::new(Verdict::Down, detail),
        Ok(Err(Failure::Garbled(detail))) => return Report::new(Verdict::Unknown, detail),
        Err(_) => {
            return Report::new(
                Verdict::Unknown,
                format!("no version within {}", humantime::format_duration(timeout)),
            );
        }
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
}

/// Resolve and connect, trying each address in turn, before `deadline`.
async fn connect(addr: &str, deadline: Instant) -> Result<TcpStream, String> {
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

/// Why a handshake failed.
#[derive(Debug)]
enum Failure {
    /// The node closed or reset the connection: it refuses us.
    Closed(String),
    /// It sent something we do not understand.
    Garbled(String),
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

    /// Exchange versions and send our `verack`; the node's non-negative
    /// `start_height`, or why not.
    async fn handshake(&mut self) -> Result<u64, Failure> {
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
        let height = u64::try_from(version.start_height).map_err(|_| {
            Failure::Garbled(format!("negative start height {}", version.start_height))
        })?;
        // The answer is in hand: a node that hangs up now changes nothing.
        if let Err(err) = self.send("verack", &[]).await {
            debug!(err = %err, "probe_verack_failed");
        }
        Ok(height)
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

#[cfg(test)]
mod tests {
    use std::future::Future;

    use tokio::net::TcpListener;

    use super::*;
    use crate::simnode::SimNode;

    const LTC: Magic = [0xfb, 0xc0, 0xb6, 0xdb];
    const SHORT: Duration = Duration::from_millis(300);

    /// A one-connection node running `script` on the accepted stream.
    async fn fake_node<F, Fut>(script: F) -> String
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            if let Ok((stream, _)) = listener.accept().await {
                script(stream).await;
            }
        });
        addr
    }

    /// Wait for the probe's first bytes, send `reply`, hold until the probe closes.
    async fn replying(reply: Vec<u8>) -> String {
        fake_node(|mut s| async move {
            let mut buf = [0u8; 1024];
            // The probe may hang up before all of `reply` is written.
            if s.read(&mut buf).await.unwrap_or(0) > 0 && s.write_all(&reply).await.is_ok() {
                while s.read(&mut buf).await.unwrap_or(0) > 0 {}
            }
        })
        .await
    }

    fn version_at(magic: Magic, height: i32) -> Vec<u8> {
        let params = VersionParams {
            services: 1,
            timestamp: 0,
            receiver: SocketAddr::from(([127, 0, 0, 1], 1)),
            sender: SocketAddr::from(([127, 0, 0, 1], 2)),
            nonce: 42,
            user_agent: "/Satoshi:27.0.0/".into(),
            start_height: height,
        };
        wire::encode(magic, "version", &wire::version_payload(&params))
    }

    fn assert_unknown(report: &Report, detail: &str) {
        assert_eq!(report.verdict, Verdict::Unknown, "{report:?}");
        assert_eq!(report.height, None);
        assert!(
            report.detail.contains(detail),
            "{report:?} lacks {detail:?}"
        );
    }

    #[tokio::test]
    async fn healthy_with_height_from_sim_node() {
        let node = SimNode::start("127.0.0.1:0".parse().unwrap(), LTC, 2_812_345)
            .await
            .unwrap();
        let report = probe(&node.addr().to_string(), LTC, SHORT).await;
        assert_eq!(
            report,
            Report::with_height(Verdict::Healthy, 2_812_345, "height 2812345")
        );
    }

    #[tokio::test]
    async fn sends_our_version_then_verack_and_closes() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let addr = fake_node(|mut s| async move {
            let mut d = Decoder::new(LTC);
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                d.feed(&buf[..n]);
                while let Some(m) = d.next_message().unwrap() {
                    if m.command == "version" {
                        s.write_all(&version_at(LTC, 7)).await.unwrap();
                    }
                    got.push(m);
                }
            }
            tx.send(got).unwrap();
        })
        .await;
        let report = probe(&addr, LTC, Duration::from_secs(2)).await;
        assert_eq!(report.height, Some(7));
        let got = rx.await.unwrap();
        let commands: Vec<&str> = got.iter().map(|m| m.command.as_str()).collect();
        assert_eq!(commands, ["version", "verack"]);
        let ours = Version::parse(&got[0].payload).unwrap();
        assert_eq!(ours.version, 70016);
        assert_eq!(ours.services, 0);
        assert_eq!(
            ours.user_agent,
            format!("/pin-proxy:{}/", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(ours.start_height, 0);
        assert_eq!(ours.relay, Some(false));
    }

    #[tokio::test]
    async fn skips_messages_before_version() {
        let mut reply = wire::encode(LTC, "wtxidrelay", &[]);
        reply.extend(wire::encode(LTC, "sendaddrv2", &[]));
        reply.extend(wire::encode(LTC, "verack", &[]));
        reply.extend(version_at(LTC, 100));
        let report = probe(&replying(reply).await, LTC, SHORT).await;
        assert_eq!(report.verdict, Verdict::Healthy);
        assert_eq!(report.height, Some(100));
    }

    #[tokio::test]
    async fn refused_is_down() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let report = probe(&addr, LTC, SHORT).await;
        assert_eq!(report, Report::new(Verdict::Down, "refused"));
    }

    #[tokio::test]
    async fn unresolvable_is_down() {
        for addr in ["no-port-here", "node.invalid:9333"] {
            let report = probe(addr, LTC, Duration::from_secs(2)).await;
            assert_eq!(report.verdict, Verdict::Down, "{report:?}");
            assert!(report.detail.starts_with("resolve"), "{report:?}");
        }
    }

    #[tokio::test]
    async fn silent_node_is_unknown_after_timeout() {
        let addr = fake_node(|mut s| async move {
            let mut buf = [0u8; 1024];
            while s.read(&mut buf).await.unwrap_or(0) > 0 {}
        })
        .await;
        let started = Instant::now();
        let report = probe(&addr, LTC, SHORT).await;
        assert_unknown(&report, "no version within 300ms");
        let took = started.elapsed();
        assert!(took >= SHORT && took < SHORT * 5, "took {took:?}");
    }

    #[tokio::test]
    async fn wrong_magic_is_unknown() {
        let bitcoin = [0xf9, 0xbe, 0xb4, 0xd9];
        let report = probe(&replying(version_at(bitcoin, 5)).await, LTC, SHORT).await;
        assert_unknown(&report, "wrong magic f9beb4d9 (expected fbc0b6db)");
    }

    #[tokio::test]
    async fn garbage_is_unknown() {
        let http = b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec();
        assert_unknown(
            &probe(&replying(http).await, LTC, SHORT).await,
            "wrong magic",
        );
        let mut bad_command = LTC.to_vec();
        bad_command.extend_from_slice(&[0xff; 20]);
        let report = probe(&replying(bad_command).await, LTC, SHORT).await;
        assert_unknown(&report, "garbage command");
    }

    #[tokio::test]
    async fn oversize_length_is_unknown() {
        let mut header = wire::encode(LTC, "version", &[]);
        header[16..20].copy_from_slice(&(32u32 << 20).to_le_bytes());
        let report = probe(&replying(header).await, LTC, SHORT).await;
        assert_unknown(&report, "oversized version payload");
    }

    #[tokio::test]
    async fn bad_checksum_is_unknown() {
        let mut msg = version_at(LTC, 5);
        msg[20] ^= 0xff;
        let report = probe(&replying(msg).await, LTC, SHORT).await;
        assert_unknown(&report, "bad checksum on version");
    }

    fn assert_down(report: &Report, detail: &str) {
        assert_eq!(report.verdict, Verdict::Down, "{report:?}");
        assert_eq!(report.height, None);
        assert!(
            report.detail.contains(detail),
            "{report:?} lacks {detail:?}"
        );
    }

    #[tokio::test]
    async fn truncated_then_closed_is_down() {
        let msg = version_at(LTC, 5);
        let addr = fake_node(move |mut s| async move {
            let mut buf = [0u8; 1024];
            if s.read(&mut buf).await.unwrap_or(0) > 0 {
                s.write_all(&msg[..40]).await.unwrap();
            }
        })
        .await;
        let report = probe(&addr, LTC, SHORT).await;
        assert_down(&report, "closed mid-message: truncated message: 40 of");
    }

    /// What a node that banned our address does: accept, close at once.
    #[tokio::test]
    async fn accepted_then_closed_at_once_is_down() {
        let addr = fake_node(|s| async move { drop(s) }).await;
        let report = probe(&addr, LTC, SHORT).await;
        assert_down(&report, "");
        assert!(
            ["closed before version", "read: ", "send version: "]
                .iter()
                .any(|d| report.detail.starts_with(d)),
            "{report:?}"
        );
    }

    #[tokio::test]
    async fn accepted_then_reset_is_down() {
        let addr = fake_node(|s| async move {
            // SO_LINGER 0: close sends a reset.
            socket2::SockRef::from(&s)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            let mut s = s;
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
        })
        .await;
        let report = probe(&addr, LTC, SHORT).await;
        assert_down(&report, "reset");
    }

    #[tokio::test]
    async fn negative_height_is_unknown() {
        let report = probe(&replying(version_at(LTC, -1)).await, LTC, SHORT).await;
        assert_unknown(&report, "negative start height -1");
    }

    #[tokio::test]
    async fn endless_chatter_stops_at_the_read_budget() {
        let ping = wire::encode(LTC, "ping", &1u64.to_le_bytes());
        let chatter: Vec<u8> = ping
            .iter()
            .copied()
            .cycle()
            .take(ping.len() * 5000)
            .collect();
        let report = probe(&replying(chatter).await, LTC, Duration::from_secs(5)).await;
        assert_unknown(&report, "no version in the first 65536 bytes");
    }
}
