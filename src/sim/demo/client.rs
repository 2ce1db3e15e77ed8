//! The demo's P2P clients: each dials the pool, does the `version`
//! handshake through it, holds the connection like a long-lived peer, and
//! dials again (a bounded number of times) when the connection closes.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::MAGIC;
use crate::pool::registry::Pool;
use crate::pool::snapshot::PoolSnapshot;
use crate::probe::wire::{self, Decoder, Version, VersionParams};

/// Dials per client over the whole demo; the story needs about three.
const MAX_DIALS: u32 = 40;
/// Budget for the proxy's connect plus the node's `version` and `verack`.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause before dialling again, so a pool with no backend is not hammered.
const REDIAL_PAUSE: Duration = Duration::from_millis(100);
/// Reads allowed to complete a handshake (a version is one or two reads).
const HANDSHAKE_READS: usize = 32;

/// What one client knows about itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientView {
    /// `c1` ... `c6`.
    pub name: String,
    /// Local address of the current (or last) connection: the proxy's `client`.
    pub local: Option<SocketAddr>,
    /// Handshake done and the connection still open.
    pub up: bool,
    /// Connections dialled so far.
    pub dials: u32,
    /// The node's height as this client saw it: the last handshake's,
    /// plus one per block the node announced since (`inv`).
    pub height: Option<i32>,
}

/// The clients' views, shared with the story. The lock is held only to
/// copy or update one entry, never across an `.await`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Clients(Arc<Mutex<Vec<ClientView>>>);

impl Clients {
    /// A copy of every client's view, in order.
    pub fn snapshot(&self) -> Vec<ClientView> {
        self.lock().clone()
    }

    /// Add a client named `name`; returns its index.
    fn add(&self, name: String) -> usize {
        let mut views = self.lock();
        views.push(ClientView {
            name,
            ..ClientView::default()
        });
        views.len() - 1
    }

    fn update(&self, i: usize, f: impl FnOnce(&mut ClientView)) {
        if let Some(view) = self.lock().get_mut(i) {
            f(view);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<ClientView>> {
        // Plain data that no panic leaves half-written.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where a client dials and how it finds out which backend it landed on.
#[derive(Clone)]
pub(crate) struct Dialer {
    /// The pool's listen address.
    pub proxy: SocketAddr,
    /// The pool, to look the connection up in its registry.
    pub pool: Arc<Pool>,
    /// The views to update.
    pub clients: Clients,
}

impl Dialer {
    /// Run client `name` until `token` is cancelled or it used up its dials.
    pub async fn run(self, name: String, token: CancellationToken) {
        let i = self.clients.add(name.clone());
        for dial in 1..=MAX_DIALS {
            tokio::select! {
                () = token.cancelled() => return,
                result = self.session(i, &name, dial) => {
                    self.clients.update(i, |v| v.up = false);
                    if let Err(err) = result {
                        info!(client = %name, dial, err = %err, "demo_client_retry");
                    }
                }
            }
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(REDIAL_PAUSE) => {}
            }
        }
        warn!(client = %name, dials = MAX_DIALS, "demo_client_gave_up");
    }

    /// One connection: dial, handshake, hold until the far side closes.
    async fn session(&self, i: usize, name: &str, dial: u32) -> io::Result<()> {
        let handshake = async {
            let mut stream = TcpStream::connect(self.proxy).await?;
            let local = stream.local_addr()?;
            self.clients.update(i, |v| {
                v.dials = dial;
                v.local = Some(local);
            });
            stream.write_all(&hello(self.proxy, local)).await?;
            let mut decoder = Decoder::new(MAGIC);
            let height = read_handshake(&mut stream, &mut decoder).await?;
            stream
                .write_all(&wire::encode(MAGIC, "verack", &[]))
                .await?;
            io::Result::Ok((stream, decoder, local, height))
        };
        let (mut stream, mut decoder, local, height) =
            tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "handshake timed out"))??;
        let backend =
            backend_of(&self.pool.view().snapshot(), local).unwrap_or_else(|| "?".to_owned());
        self.clients.update(i, |v| {
            v.up = true;
            v.height = Some(height);
        });
        info!(client = %name, dial, local = %local, backend = %backend, height, "demo_handshake");
        let blocks = |n: i32| {
            self.clients
                .update(i, |v| v.height = v.height.map(|h| h + n))
        };
        hold(&mut stream, &mut decoder, blocks).await
    }
}

/// Our `version`, as a light client that serves nothing would send it.
fn hello(proxy: SocketAddr, local: SocketAddr) -> Vec<u8> {
    let params = VersionParams {
        services: 0,
        timestamp: wire::unix_now(),
        receiver: proxy,
        sender: local,
        nonce: wire::random_nonce(),
        user_agent: format!("/pin-proxy-demo:{}/", env!("CARGO_PKG_VERSION")),
        start_height: 0,
    };
    wire::encode(MAGIC, "version", &wire::version_payload(&params))
}

/// Read until the node's `version` and `verack` arrived; the height it announced.
async fn read_handshake(stream: &mut TcpStream, decoder: &mut Decoder) -> io::Result<i32> {
    let (mut height, mut verack) = (None, false);
    let mut buf = [0u8; 4096];
    for _ in 0..HANDSHAKE_READS {
        while let Some(msg) = decoder.next_message().map_err(invalid)? {
            match msg.command.as_str() {
                "version" => {
                    height = Some(Version::parse(&msg.payload).map_err(invalid)?.start_height)
                }
                "verack" => verack = true,
                _ => {}
            }
        }
        if let (Some(height), true) = (height, verack) {
            return Ok(height);
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed during the handshake",
            ));
        }
        decoder.feed(&buf[..n]);
    }
    Err(invalid("no version/verack"))
}

/// Hold the connection like a peer: answer pings, count the blocks
/// announced (`blocks`), ignore the rest, return when the far side closes.
async fn hold(
    stream: &mut TcpStream,
    decoder: &mut Decoder,
    blocks: impl Fn(i32),
) -> io::Result<()> {
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        decoder.feed(&buf[..n]);
        // Draining every message keeps the decoder's buffer to one message.
        while let Some(msg) = decoder.next_message().map_err(invalid)? {
            match msg.command.as_str() {
                "ping" => {
                    let pong = wire::encode(MAGIC, "pong", &msg.payload);
                    stream.write_all(&pong).await?;
                }
                "inv" => blocks(announced_blocks(&msg.payload).map_err(invalid)?),
                _ => {}
            }
        }
    }
}

/// How many `MSG_BLOCK` entries an `inv` payload lists (a stand-in for
/// following the chain: the demo's nodes announce each new block once).
fn announced_blocks(payload: &[u8]) -> Result<i32, wire::WireError> {
    const ENTRY: usize = 36;
    let mut rest = payload;
    let count = wire::take_var_int(&mut rest, "inv")?;
    let blocks = rest
        .chunks_exact(ENTRY)
        .take(usize::try_from(count).unwrap_or(usize::MAX))
        .filter(|e| e[..4] == 2u32.to_le_bytes())
        .count();
    Ok(i32::try_from(blocks).unwrap_or(i32::MAX))
}

/// The backend holding a connection from `client` in the snapshot `pool`.
pub(crate) fn backend_of(pool: &PoolSnapshot, client: SocketAddr) -> Option<String> {
    pool.backends
        .iter()
        .find(|b| b.conns.iter().any(|c| c.client == client))
        .map(|b| b.name.clone())
}

fn invalid(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err)
}
