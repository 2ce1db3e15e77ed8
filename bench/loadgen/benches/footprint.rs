//! Footprint: the bytes one spliced connection's task carries, read from
//! the size of its future (a task allocates its future inline, so this is
//! the floor of pin-proxy's user-space memory per connection before the
//! task header, the two sockets' I/O registrations and the registry entry).
//! The last row rebuilds the wrapper listener.rs spawns; keep it in step.
//!
//! Run: `cargo bench --manifest-path bench/loadgen/Cargo.toml --bench footprint`

use std::mem::size_of_val;
use std::path::Path;
use std::sync::Arc;

use pin_proxy::config::Config;
use pin_proxy::registry::{BackendStats, Closer, Pool};
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
    let admission = pool.admit().expect("below max_connections");
    let stats = BackendStats::default();
    let closer = Closer::child_of(&token);
    let splice = pin_proxy::splice::splice(&accepted, &other, &stats, None, &closer);
    println!("| future | bytes |");
    println!("|---|---:|");
    println!("| `splice::splice` | {} |", size_of_val(&splice));
    drop(splice);
    let serve = pin_proxy::session::serve(pool.clone(), accepted, peer, 1, admission);
    println!("| `session::serve` | {} |", size_of_val(&serve));
    println!(
        "| `tokio::net::TcpStream` (each of 2) | {} |",
        size_of_val(&other)
    );
    // The shape listener.rs spawns since f4e581c: the session moved into an
    // async block that awaits it and then drops the descriptor-budget permit.
    // rustc keeps the captured future and the awaited one apart, so such a
    // task's future is about twice the session's.
    let slot = Arc::new(Semaphore::new(1)).acquire_owned().await?;
    let task = async move {
        serve.await;
        drop(slot);
    };
    println!(
        "| `async move {{ serve.await; drop(permit) }}` (as listener.rs spawns it) | {} |",
        size_of_val(&task)
    );
    Ok(())
}
