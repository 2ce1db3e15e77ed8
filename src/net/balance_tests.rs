//! Hand-off through real sockets and two real worker loops: every client
//! arrives on one loop (one listener, accepted there only), and the
//! sessions still end up spread over both, each client served exactly.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;
use crate::config::Config;
use crate::net::handover::HandoverQueue;
use crate::net::listener::{Shared, accept_loop, register};
use crate::net::workers::Workers;
use crate::pool::registry::Pool;

/// An echo backend on the test's runtime.
async fn echo_backend() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn clients_accepted_on_one_loop_are_served_on_both() {
    const CLIENTS: usize = 40;
    if !enabled() {
        eprintln!("notice: PIN_PROXY_HANDOFF=off, hand-off is not tested");
        return;
    }
    let backend = echo_backend().await;
    let yaml =
        format!("pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends: [ \"{backend}\" ]\n");
    let config = Config::parse(&yaml, "inline.yaml".as_ref()).unwrap();
    let pool = Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()));
    let workers = Workers::start(2).unwrap();
    let loops = Loops::new(workers.handles());
    let shared = Shared {
        conn_ids: Arc::new(AtomicU64::new(1)),
        tracker: TaskTracker::new(),
        slots: Arc::new(Semaphore::new(1000)),
        rejects: Arc::default(),
        handovers: HandoverQueue::default(),
        loops: loops.clone(),
    };
    // One plain socket, accepted on worker 0 alone: the kernel has no
    // choice to make, so whatever reaches worker 1 was handed over.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let token = CancellationToken::new();
    let (p, t, s) = (pool.clone(), token.clone(), shared.clone());
    workers.handle(0).spawn(async move {
        accept_loop(register(listener).unwrap(), p, t, s, 0).await;
    });
    let base = loops.loads();
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let mut c = TcpStream::connect(addr).await.unwrap();
        let msg = format!("client {i}");
        c.write_all(msg.as_bytes()).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(got, msg.as_bytes(), "client {i} is spliced exactly");
        clients.push(c);
    }
    let loads = loops.loads();
    let took: Vec<usize> = loads
        .iter()
        .zip(&base)
        .map(|(now, was)| now - was)
        .collect();
    assert_eq!(
        took.iter().sum::<usize>(),
        CLIENTS,
        "one task per client: {took:?}"
    );
    let (first, second) = (took[0], took[1]);
    assert!(
        first.abs_diff(second) <= SLACK + 1,
        "sessions spread over both loops: {took:?} (loads {loads:?}, before {base:?})"
    );
    token.cancel();
    drop(clients);
}
