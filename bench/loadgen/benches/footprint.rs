//! Footprint: the bytes one spliced connection's task carries, read from
//! the size of its future (a task allocates its future inline, so this is
//! the floor of pin-proxy's user-space memory per connection before the
//! task header, the two sockets' I/O registrations and the registry entry).
//! The registry's own per-connection values (its map entry and the shared
//! `Closer`) are listed after, by type size.
//!
//! Run: `cargo bench --manifest-path bench/loadgen/Cargo.toml --bench footprint`

use std::mem::{size_of, size_of_val};
use std::path::Path;
use std::sync::Arc;

use pin_proxy::config::Config;
use pin_proxy::pool::close::Closer;
use pin_proxy::pool::registry::{BackendStats, ConnEntry, Pool};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let yaml = "pools:\n  - name: bench\n    listen: 127.0.0.1:1\n    backends: [127.0.0.1:2]\n";
    let config = Config::parse(yaml, Path::new("bench.yaml"))?;
    let pool_config = config.pools.into_iter().next().expect("one pool");
    let token = CancellationToken::new();
    let pool = Arc::new(Pool::new(pool_config, token.clone()));
    // A real accepted socket, never polled: only the future's size is read.
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let _client = TcpStream::connect(listener.local_addr()?).await?;
    let (accepted, peer) = listener.accept().await?;
    let other = TcpStream::connect(listener.local_addr()?).await?;
    let admission = pool
        .gate()
        .admit_from(peer.ip())
        .expect("below max_connections");
    let stats = BackendStats::default();
    let closer = Closer::new();
    let splice = pin_proxy::net::splice::splice(&accepted, &other, &stats, None, &closer);
    println!("| future | bytes |");
    println!("|---|---:|");
    println!("| `splice::splice` | {} |", size_of_val(&splice));
    drop(splice);
    let slot = Arc::new(Semaphore::new(1)).acquire_owned().await?;
    let serve = pin_proxy::net::session::serve(
        pool.clone(),
        accepted,
        peer,
        None,
        1,
        (admission, slot),
        pin_proxy::net::handover::HandoverQueue::default(),
    );
    println!(
        "| `session::serve` (the task's future) | {} |",
        size_of_val(&serve)
    );
    println!(
        "| `tokio::net::TcpStream` (each of 2) | {} |",
        size_of_val(&other)
    );
    println!(
        "| `ConnEntry` (registry map value) | {} |",
        size_of::<ConnEntry>()
    );
    println!(
        "| `Closer` (in an `Arc`: +16 for its reference counts) | {} |",
        size_of::<Closer>()
    );
    Ok(())
}
