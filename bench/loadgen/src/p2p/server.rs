//! `loadgen p2p-server`: the P2P load's backend, in its own process. Each
//! connection gets a hello (so a client knows the path works end to end),
//! has its pings echoed at once, and gets announcements on the backend's
//! own schedule, stamped when sent.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::bail;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, sleep_until};

use super::Shape;
use super::frame::{self, Kind, Reader};

/// Accept errors (usually fd exhaustion) back off this long, then retry.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// A connection is served at most this long...
const MAX_LIFE: Duration = Duration::from_secs(3600);

/// ...and sent at most this many announcements.
const MAX_ANNOUNCE: u64 = 100_000;

/// Serve on `listen` until the process is killed.
///
/// # Errors
/// When `listen` cannot be bound.
pub async fn serve(listen: SocketAddr, shape: Shape) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    eprintln!("p2p-server listening on {}", listener.local_addr()?);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                eprintln!("p2p-server accept: {err}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        tokio::spawn(async move {
            // The client going away ends the connection; the client counts
            // and reports what went wrong, so nothing is lost here.
            let _ = conn(stream, shape).await;
        });
    }
}

async fn conn(mut s: TcpStream, shape: Shape) -> anyhow::Result<()> {
    s.set_nodelay(true)?;
    let mut rng = fastrand::Rng::new();
    let mut out = [0u8; frame::MAX];
    s.write_all(frame::encode(
        &mut out,
        Kind::Hello,
        frame::now_ns(),
        frame::HEADER,
    ))
    .await?;
    let born = Instant::now();
    let end = sleep_until(born + MAX_LIFE);
    let mut next = born + shape.first(&mut rng);
    let announce = sleep_until(next);
    tokio::pin!(end, announce);
    let mut r = Reader::new();
    let mut announced = 0u64;
    loop {
        tokio::select! {
            n = s.read(r.space()) => {
                let n = n?;
                if n == 0 {
                    return Ok(());
                }
                r.filled(n);
                while let Some((kind, _, msg)) = r.next()? {
                    if kind != Kind::Ping {
                        bail!("a client sent {kind:?}");
                    }
                    frame::into_echo(msg);
                    s.write_all(msg).await?;
                }
            }
            () = &mut announce, if announced < MAX_ANNOUNCE => {
                let len = shape.size(&mut rng);
                s.write_all(frame::encode(&mut out, Kind::Announce, frame::now_ns(), len))
                    .await?;
                announced += 1;
                next += shape.gap(&mut rng);
                announce.as_mut().reset(next);
            }
            () = &mut end => return Ok(()),
        }
    }
}
