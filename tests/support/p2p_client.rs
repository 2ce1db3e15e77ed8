//! A P2P client that says who it is, as a light client does: a `version`
//! with its own user agent, the node's `version` read back (so the client
//! checks the node's services itself), and, on the node's side, the user
//! agents it lists among its peers (`getpeerinfo`): where a client landed.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pin_proxy::inspect::wire::{self, Decoder, Version, VersionParams};

use crate::support::litecoind::{Litecoind, REGTEST};

/// A client past the handshake: the stream (held open: the node keeps the
/// peer while it is) and the `version` the node sent it.
pub struct Client {
    /// The connection, through the proxy.
    pub stream: TcpStream,
    /// What the node announced to this client.
    pub node: Version,
}

/// Our `version` to `addr` from `local`, announcing `agent`.
pub fn version(addr: SocketAddr, local: SocketAddr, agent: &str) -> Vec<u8> {
    let params = VersionParams {
        services: 0,
        timestamp: wire::unix_now(),
        receiver: addr,
        sender: local,
        nonce: wire::random_nonce(),
        user_agent: agent.to_owned(),
        start_height: 0,
    };
    wire::encode(REGTEST, "version", &wire::version_payload(&params))
}

/// A handshake at `addr` announcing the user agent `agent`: our `version`,
/// the node's `version` and `verack`, our `verack`. Once this returns the
/// node has read our `version`, so its `getpeerinfo` names `agent`.
///
/// # Errors
/// Why the handshake did not finish within `timeout`.
pub fn connect(addr: SocketAddr, agent: &str, timeout: Duration) -> Result<Client, String> {
    let stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    handshake(stream, addr, agent, timeout)
}

/// As [`connect`], on `stream`, a connection to `addr` made elsewhere (in
/// another network namespace, say).
///
/// # Errors
/// Why the handshake did not finish within `timeout`.
pub fn handshake(
    mut stream: TcpStream,
    addr: SocketAddr,
    agent: &str,
    timeout: Duration,
) -> Result<Client, String> {
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let local = stream.local_addr().map_err(|e| e.to_string())?;
    stream
        .write_all(&version(addr, local, agent))
        .map_err(|e| format!("send version: {e}"))?;
    let mut decoder = Decoder::new(REGTEST);
    let mut node = None;
    let mut buf = [0u8; 4096];
    loop {
        while let Some(msg) = decoder.next_message().map_err(|e| e.to_string())? {
            match msg.command.as_str() {
                "version" => node = Some(Version::parse(&msg.payload).map_err(|e| e.to_string())?),
                "verack" => {
                    if let Some(node) = node {
                        let verack = wire::encode(REGTEST, "verack", &[]);
                        stream
                            .write_all(&verack)
                            .map_err(|e| format!("send verack: {e}"))?;
                        return Ok(Client { stream, node });
                    }
                }
                _ => {}
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err("closed during the handshake".into()),
            Ok(n) => decoder.feed(&buf[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// How a refused connection ended for its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// An orderly close (EOF) before any byte.
    Closed,
    /// A reset before any byte (what a close with our unread `version` in
    /// the proxy's buffer looks like).
    Reset,
}

/// A client at `addr` that is to be turned away: it sends its `version`
/// announcing `agent` at once when given one (a node behind a splice would
/// answer it; only a refusal ends this with nothing), else nothing, and
/// reads. How the connection ended and after how long.
///
/// # Errors
/// The bytes it received, or that nothing ended it within `timeout`.
pub fn refused(
    addr: SocketAddr,
    agent: Option<&str>,
    timeout: Duration,
) -> Result<(Ended, Duration), String> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    if let Some(agent) = agent {
        let local = stream.local_addr().map_err(|e| e.to_string())?;
        // A send that fails met the close already; the read says how.
        let _ = stream.write_all(&version(addr, local, agent));
    }
    let mut buf = [0u8; 4096];
    let ended = match stream.read(&mut buf) {
        Ok(0) => Ended::Closed,
        Ok(n) => return Err(format!("received {n} bytes: {:02x?}", &buf[..n.min(24)])),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Ended::Reset,
        Err(e) => return Err(format!("read: {e}")),
    };
    Ok((ended, started.elapsed()))
}

/// The user agents `node` lists among its handshaken peers (`subver` of
/// `getpeerinfo`), in peer order.
pub fn agents(node: &Litecoind) -> Vec<String> {
    let info: serde_json::Value =
        serde_json::from_str(&node.call(&["getpeerinfo"])).expect("getpeerinfo is JSON");
    info.as_array()
        .expect("getpeerinfo is a list")
        .iter()
        .filter_map(|p| p["subver"].as_str())
        .map(str::to_owned)
        .collect()
}

/// The node behind `stream` answers a `ping` with its `pong`.
pub fn answers_ping(stream: &mut TcpStream, nonce: u64) -> bool {
    let nonce = nonce.to_le_bytes();
    if stream
        .write_all(&wire::encode(REGTEST, "ping", &nonce))
        .is_err()
    {
        return false;
    }
    let mut decoder = Decoder::new(REGTEST);
    let mut buf = [0u8; 4096];
    loop {
        while let Ok(Some(msg)) = decoder.next_message() {
            if msg.command == "pong" && msg.payload == nonce {
                return true;
            }
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => decoder.feed(&buf[..n]),
        }
    }
}
