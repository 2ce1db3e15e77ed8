//! A simulated Bitcoin-family P2P node for the demo and tests.
//!
//! It answers the `version` handshake with a height you set, answers `ping`
//! with `pong`, answers `getheaders` with valid regtest headers up to that
//! height (on the regtest magic), ignores everything else and holds
//! connections open until the peer leaves. It can be stopped (listener and every connection closed),
//! restarted on the same address, and made silent (accepts, never answers).
//! It relays and validates nothing.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use crate::config::Network;
use crate::probe::pow::{self, Hash};
use crate::probe::wire::{self, Decoder, Magic, VersionParams};
use crate::sim::simchain::SimChain;

/// The regtest message start: the one network whose headers can be mined
/// on the fly (`litecoin-regtest`'s rules).
const REGTEST: Magic = [0xfa, 0xbf, 0xb5, 0xda];

/// Pause after a failed accept (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// A simulated P2P node listening on one loopback address.
///
/// Dropping it cancels its tasks without waiting; call [`SimNode::stop`] to
/// be sure every socket is closed.
pub struct SimNode {
    addr: SocketAddr,
    shared: Arc<NodeState>,
    /// `Some` while listening. Locked only for short, non-async sections.
    running: Mutex<Option<Running>>,
}

/// What the node's tasks read.
struct NodeState {
    magic: Magic,
    /// The height announced in handshakes; each rise is announced to the
    /// peers already connected, as `inv` block entries.
    tip: watch::Sender<u64>,
    silent: AtomicBool,
    /// Headers are served up to this height at most (a liar's is below
    /// its announced height).
    headers_to: AtomicU64,
    chain: Option<SimChain>,
    accepted: AtomicUsize,
    live: AtomicUsize,
}

/// The tasks of one listening period, between start/restart and stop.
struct Running {
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl SimNode {
    /// Listen on `bind` (port 0 picks a free one) for the network of `magic`,
    /// announcing `height`. Must be called within a tokio runtime.
    ///
    /// # Errors
    /// When `bind` cannot be bound.
    pub async fn start(bind: SocketAddr, magic: Magic, height: u64) -> io::Result<SimNode> {
        let listener = listen(bind)?;
        let node = SimNode {
            addr: listener.local_addr()?,
            shared: Arc::new(NodeState {
                magic,
                tip: watch::Sender::new(height),
                silent: AtomicBool::new(false),
                headers_to: AtomicU64::new(u64::MAX),
                chain: (magic == REGTEST)
                    .then(|| pow::params(Network::LitecoinRegtest).map(SimChain::new))
                    .flatten(),
                accepted: AtomicUsize::new(0),
                live: AtomicUsize::new(0),
            }),
            running: Mutex::new(None),
        };
        *node.lock() = Some(node.serve(listener));
        Ok(node)
    }

    /// The bound address; the same after [`SimNode::stop`] and [`SimNode::restart`].
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The height announced in handshakes.
    pub fn height(&self) -> u64 {
        *self.shared.tip.borrow()
    }

    /// Announce `height` from the next handshake on; a rise is also
    /// announced to the peers connected now (one `inv` block entry per
    /// new block, as a node relays blocks it accepted).
    pub fn set_height(&self, height: u64) {
        self.shared.tip.send_replace(height);
    }

    /// Serve headers only up to `height`, whatever height is announced: a
    /// node that claims more than it can prove.
    pub fn set_headers_to(&self, height: u64) {
        self.shared.headers_to.store(height, Ordering::Relaxed);
    }

    /// Silent: accept connections (and read them) but never answer anything,
    /// the "reached but no answer" case. Applies to open connections too.
    pub fn set_silent(&self, silent: bool) {
        self.shared.silent.store(silent, Ordering::Relaxed);
    }

    /// Connections accepted since [`SimNode::start`], across restarts.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn live(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }

    /// Whether the node is listening (started or restarted, not stopped).
    pub fn is_running(&self) -> bool {
        self.lock().is_some()
    }

    /// Close the listener and every open connection, and wait until they are
    /// closed: afterwards connects are refused. Does nothing when stopped.
    pub async fn stop(&self) {
        let running = self.lock().take();
        if let Some(running) = running {
            running.cancel.cancel();
            running.tracker.close();
            running.tracker.wait().await;
        }
    }

    /// Listen again on [`SimNode::addr`]. Does nothing when already running.
    ///
    /// # Errors
    /// When the address cannot be bound again (taken by someone else).
    pub async fn restart(&self) -> io::Result<()> {
        let mut running = self.lock();
        if running.is_none() {
            *running = Some(self.serve(listen(self.addr)?));
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        // The guarded value is a plain Option that no panic can leave half-written.
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn serve(&self, listener: TcpListener) -> Running {
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        tracker.spawn(accept_loop(
            listener,
            self.shared.clone(),
            cancel.clone(),
            tracker.clone(),
        ));
        Running { cancel, tracker }
    }
}

impl Drop for SimNode {
    fn drop(&mut self) {
        if let Some(running) = self.lock().take() {
            running.cancel.cancel();
        }
    }
}

/// Bind with `SO_REUSEADDR`, so a restarted node gets its port back although
/// the connections it closed sit in `TIME_WAIT`.
fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(128)
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<NodeState>,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                let live = Live::new(shared.clone());
                let cancel = cancel.clone();
                tracker.spawn(async move {
                    tokio::select! {
                        () = cancel.cancelled() => {}
                        result = converse(stream, peer, live.0.clone()) => {
                            if let Err(err) = result {
                                debug!(client = %peer, err = %err, "simnode_closed");
                            }
                        }
                    }
                });
            }
            Err(err) => {
                debug!(err = %err, "simnode_accept_failed");
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
            }
        }
    }
}

/// Counts a connection in `live` until dropped.
struct Live(Arc<NodeState>);

impl Live {
    fn new(shared: Arc<NodeState>) -> Live {
        shared.live.fetch_add(1, Ordering::Relaxed);
        Live(shared)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serve one peer until it closes, sends garbage or fails.
async fn converse(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<NodeState>,
) -> io::Result<()> {
    let mut decoder = Decoder::new(shared.magic);
    let mut buf = vec![0u8; 16 * 1024];
    let mut greeted = false;
    let mut tip = shared.tip.subscribe();
    let mut announced = *tip.borrow_and_update();
    loop {
        let n = tokio::select! {
            n = stream.read(&mut buf) => n?,
            Ok(()) = tip.changed(), if greeted => {
                let now = *tip.borrow_and_update();
                if now > announced && !shared.silent.load(Ordering::Relaxed) {
                    stream.write_all(&announce(shared.magic, announced, now)).await?;
                }
                announced = now;
                continue;
            }
        };
        if n == 0 {
            return Ok(());
        }
        decoder.feed(&buf[..n]);
        while let Some(msg) = decoder
            .next_message()
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?
        {
            if shared.silent.load(Ordering::Relaxed) {
                continue;
            }
            match msg.command.as_str() {
                "version" if !greeted => {
                    greeted = true;
                    let mut reply = our_version(&shared, peer, stream.local_addr()?);
                    reply.extend(wire::encode(shared.magic, "verack", &[]));
                    stream.write_all(&reply).await?;
                }
                // BIP 31: the pong carries the ping's nonce.
                "ping" => {
                    let pong = wire::encode(shared.magic, "pong", &msg.payload);
                    stream.write_all(&pong).await?;
                }
                "getheaders" if shared.chain.is_some() => {
                    let reply = headers_reply(&shared, &msg.payload).await?;
                    stream.write_all(&reply).await?;
                }
                _ => {}
            }
        }
    }
}

/// Most entries in one `inv` (Bitcoin Core's `MAX_INV_SZ`).
const MAX_INV: u64 = 50_000;

/// An `inv` of the blocks above `from` up to `to` (the newest
/// [`MAX_INV`] of them): entry type 2 (`MSG_BLOCK`) and a stand-in hash
/// that names the height, which is all the demo's clients count.
fn announce(magic: Magic, from: u64, to: u64) -> Vec<u8> {
    let first = from.max(to.saturating_sub(MAX_INV)) + 1;
    let mut payload = Vec::new();
    wire::put_var_int(&mut payload, to + 1 - first);
    for height in first..=to {
        payload.extend_from_slice(&2u32.to_le_bytes());
        let mut hash = [0u8; 32];
        hash[..8].copy_from_slice(&height.to_le_bytes());
        payload.extend_from_slice(&hash);
    }
    wire::encode(magic, "inv", &payload)
}

/// The `headers` answer to a `getheaders` payload, mined off the async threads.
async fn headers_reply(shared: &Arc<NodeState>, payload: &[u8]) -> io::Result<Vec<u8>> {
    let locator = parse_locator(payload)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed getheaders"))?;
    let height = (*shared.tip.borrow()).min(shared.headers_to.load(Ordering::Relaxed));
    let shared = shared.clone();
    let found = tokio::task::spawn_blocking(move || {
        shared
            .chain
            .as_ref()
            .map(|chain| chain.headers_after(&locator, height))
            .unwrap_or_default()
    })
    .await
    .map_err(io::Error::other)?;
    let mut body = Vec::with_capacity(3 + found.len() * 81);
    wire::put_var_int(&mut body, found.len() as u64);
    for header in &found {
        body.extend_from_slice(&header.raw);
        body.push(0);
    }
    Ok(wire::encode(REGTEST, "headers", &body))
}

/// The locator hashes of a `getheaders` payload.
fn parse_locator(payload: &[u8]) -> Option<Vec<Hash>> {
    let mut rest = payload.get(4..)?;
    let count = wire::take_var_int(&mut rest, "getheaders").ok()?;
    if count > 101 {
        return None;
    }
    let hashes = rest.get(..32 * count as usize)?;
    Some(
        hashes
            .chunks_exact(32)
            .filter_map(|c| <Hash>::try_from(c).ok())
            .collect(),
    )
}

fn our_version(shared: &NodeState, peer: SocketAddr, local: SocketAddr) -> Vec<u8> {
    let height = *shared.tip.borrow();
    let params = VersionParams {
        services: 1, // NODE_NETWORK, as a full node announces
        timestamp: wire::unix_now(),
        receiver: peer,
        sender: local,
        nonce: wire::random_nonce(),
        user_agent: format!("/pin-proxy-simnode:{}/", env!("CARGO_PKG_VERSION")),
        start_height: i32::try_from(height).unwrap_or(i32::MAX),
    };
    wire::encode(shared.magic, "version", &wire::version_payload(&params))
}

#[cfg(test)]
#[path = "simnode_tests.rs"]
mod tests;
