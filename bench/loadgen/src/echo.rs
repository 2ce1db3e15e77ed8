//! The echo backend. Plain mode echoes every byte until the client closes;
//! `close_first` mode echoes one request and then closes, so in the churn
//! test the backend closes first and the TIME_WAIT sockets stay on the
//! server side (otherwise churn measures the kernel's TIME_WAIT table).
//! A client-first churn splits over several listening ports for the same
//! reason (`--also-listen`; `churn --also-target`).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes read per call; small, since idle connections hold one each.
const BUF: usize = 16 * 1024;

/// Accept errors (usually fd exhaustion) back off this long, then retry.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// Serve on every address of `listen` until the process is killed.
///
/// # Errors
/// When an address cannot be bound.
pub async fn serve(listen: Vec<SocketAddr>, close_first: Option<usize>) -> anyhow::Result<()> {
    let mut loops = tokio::task::JoinSet::new();
    for addr in listen {
        let listener = TcpListener::bind(addr).await?;
        eprintln!("echo-server listening on {}", listener.local_addr()?);
        loops.spawn(accept_loop(listener, close_first));
    }
    // The loops never end; nor does the server.
    while loops.join_next().await.is_some() {}
    Ok(())
}

async fn accept_loop(listener: TcpListener, close_first: Option<usize>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                eprintln!("echo-server accept: {err}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        tokio::spawn(async move {
            // A client that goes away mid-echo is normal under load.
            let _ = echo(stream, close_first).await;
        });
    }
}

/// Echo until EOF, or until `close_first` bytes were echoed, then close.
async fn echo(mut stream: TcpStream, close_first: Option<usize>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = vec![0u8; BUF];
    let mut echoed = 0usize;
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n]).await?;
        echoed += n;
        if close_first.is_some_and(|limit| echoed >= limit) {
            // Dropping the stream closes it: our FIN goes first.
            return Ok(());
        }
    }
}

/// Echo until the client closes (for in-process backends).
pub async fn echo_plain(stream: TcpStream) {
    // A client that goes away mid-echo is normal under load.
    let _ = echo(stream, None).await;
}

/// One 64-byte request and its exact echo on `s`.
pub async fn round_trip(s: &mut TcpStream) -> anyhow::Result<()> {
    let msg = [7u8; 64];
    s.write_all(&msg).await?;
    let mut got = [0u8; 64];
    s.read_exact(&mut got).await?;
    if got != msg {
        anyhow::bail!("wrong echo");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_server_echoes_on_every_address_it_is_given() {
        let _ports = crate::ports::TEST_PORTS.lock().await;
        let ports = crate::ports::free(2).unwrap();
        let addrs: Vec<SocketAddr> = ports
            .iter()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect();
        let server = tokio::spawn(serve(addrs.clone(), None));
        for addr in addrs {
            // Bounded: the listeners are bound a moment after the spawn.
            let (mut s, mut last) = (None, None);
            for _ in 0..500 {
                assert!(!server.is_finished(), "the server ended: it could not bind");
                match TcpStream::connect(addr).await {
                    Ok(c) => {
                        s = Some(c);
                        break;
                    }
                    Err(e) => last = Some(e),
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let mut s = s.unwrap_or_else(|| panic!("nothing listens on {addr}: {last:?}"));
            round_trip(&mut s).await.unwrap();
        }
        // Still serving: both its listeners were bound (one it could not
        // bind would have ended it, and its listeners with it).
        assert!(!server.is_finished(), "the server ended: it could not bind");
    }
}
