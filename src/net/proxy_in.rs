//! The PROXY protocol header a trusted source (`proxy_protocol.from`) sends
//! before anything else: peeked until it is whole, never past it, then
//! consumed exactly, so the client's own bytes stay in the socket for the
//! splice. Bounded in bytes (the parser's limits) and in time (`timeout`).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::net::proxy_header::{self, Parse, ProxyHeader};

/// What is peeked at first: a whole v1 header, or a v2 one with IPv6
/// addresses and a few TLVs. Grown (up to the v2 maximum) only for a
/// header that declares more.
const FIRST_PEEK: usize = 256;

/// The longest pause between two peeks at a header that is not whole yet.
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// Why a trusted source's connection was refused: its first bytes were not
/// a PROXY header in time.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// Nothing, or not all of it, within `timeout`.
    #[error("no PROXY header within {}", crate::config::span(*.0))]
    Timeout(Duration),
    /// The source closed before a whole header.
    #[error("closed before a whole PROXY header")]
    Closed,
    /// Not a PROXY header, or a malformed one.
    #[error("{0}")]
    Invalid(String),
    /// The socket failed.
    #[error("reading the PROXY header: {0}")]
    Io(#[from] io::Error),
}

/// Read the header at the start of `stream` within `timeout` and consume
/// it. `Some(client)`: the client it names; `None`: a `LOCAL` or `UNKNOWN`
/// header, the connection's own address is the client.
///
/// # Errors
/// What was wrong, for the `rejected` line's debug detail.
pub async fn read(
    stream: &TcpStream,
    timeout: Duration,
) -> Result<Option<SocketAddr>, HeaderError> {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; FIRST_PEEK];
    let mut seen = 0;
    let mut pause = Duration::from_millis(1);
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut buf))
            .await
            .map_err(|_| HeaderError::Timeout(timeout))??;
        if n == 0 {
            return Err(HeaderError::Closed);
        }
        match proxy_header::parse(&buf[..n]) {
            Parse::Done { header, len } => {
                tokio::time::timeout_at(deadline, consume(stream, len))
                    .await
                    .map_err(|_| HeaderError::Timeout(timeout))??;
                return Ok(match header {
                    ProxyHeader::Proxied { client, .. } => Some(client),
                    ProxyHeader::Local => None,
                });
            }
            Parse::Invalid(why) => return Err(HeaderError::Invalid(why)),
            Parse::Incomplete if n == buf.len() => {
                // The header declares more than the buffer holds (the
                // parser bounds it): look at more at once.
                let more = (buf.len() * 2).min(proxy_header::MAX_V2);
                if more == buf.len() {
                    return Err(HeaderError::Invalid("PROXY header too long".to_owned()));
                }
                buf.resize(more, 0);
            }
            Parse::Incomplete => {
                // A peek does not clear readiness: wait a little for the
                // rest instead of peeking in a loop.
                if n == seen {
                    tokio::time::timeout_at(deadline, tokio::time::sleep(pause))
                        .await
                        .map_err(|_| HeaderError::Timeout(timeout))?;
                    pause = (pause * 2).min(MAX_PAUSE);
                } else {
                    pause = Duration::from_millis(1);
                }
                seen = n;
            }
        }
    }
}

/// Read and drop exactly `len` bytes, already in the socket's buffer.
async fn consume(stream: &TcpStream, mut len: usize) -> Result<(), HeaderError> {
    let mut scratch = vec![0u8; len.min(FIRST_PEEK)];
    while len > 0 {
        stream.readable().await?;
        let want = len.min(scratch.len());
        match stream.try_read(&mut scratch[..want]) {
            Ok(0) => return Err(HeaderError::Closed),
            Ok(k) => len -= k,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}
