//! Connections in the awkward states survive an upgrade byte-exact:
//! half-closed either way, and a slow reader with bytes pending in the
//! proxy and the kernel.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::upgrade::{Bin, T, config, upgrade_ok};
use crate::support::{hash_to_eof, pattern, sha256, wait_until, within};

async fn read_to_end(s: &mut (impl AsyncReadExt + Unpin)) -> Vec<u8> {
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read to EOF");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_half_close_survives_an_upgrade() {
    // The node reads the request to EOF, says so, and answers only when told.
    let (saw_eof, mut eof_seen) = mpsc::unbounded_channel::<Vec<u8>>();
    let (go_tx, go) = mpsc::unbounded_channel::<()>();
    let go = Arc::new(tokio::sync::Mutex::new(go));
    let node = Node::start(move |mut s: TcpStream| {
        let (saw_eof, go) = (saw_eof.clone(), go.clone());
        async move {
            let request = read_to_end(&mut s).await;
            if request.is_empty() {
                return; // a health probe's connection
            }
            saw_eof.send(request.clone()).unwrap();
            go.lock().await.recv().await;
            s.write_all(b"reply to ").await.unwrap();
            s.write_all(&request).await.unwrap();
            s.shutdown().await.unwrap();
        }
    })
    .await;
    let bin = Bin::new();
    let proxy = Proxy::start_from(bin.path(), &config(&[node.addr], ""), &[]).await;
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    c.write_all(b"a request, then FIN").await.unwrap();
    c.shutdown().await.unwrap();
    let request = within("the node sees the FIN", T, eof_seen.recv())
        .await
        .unwrap();
    assert_eq!(request, b"a request, then FIN");

    upgrade_ok(&proxy).await;
    go_tx.send(()).unwrap();
    let reply = within("the reply after the upgrade", T, read_to_end(&mut c)).await;
    assert_eq!(reply, b"reply to a request, then FIN");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_half_close_survives_an_upgrade() {
    let (got_tx, mut got) = mpsc::unbounded_channel::<Vec<u8>>();
    let node = Node::start(move |mut s: TcpStream| {
        let got_tx = got_tx.clone();
        async move {
            // A health probe's connection goes away at once: not ours.
            let _ = s.write_all(b"greeting, then FIN").await;
            let _ = s.shutdown().await;
            let mut got = Vec::new();
            if s.read_to_end(&mut got).await.is_ok() && !got.is_empty() {
                got_tx.send(got).unwrap();
            }
        }
    })
    .await;
    let bin = Bin::new();
    let proxy = Proxy::start_from(bin.path(), &config(&[node.addr], ""), &[]).await;
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let greeting = within("greeting and EOF", T, read_to_end(&mut c)).await;
    assert_eq!(greeting, b"greeting, then FIN");

    upgrade_ok(&proxy).await;
    c.write_all(b"written after the upgrade").await.unwrap();
    c.shutdown().await.unwrap();
    let request = within("the node gets it", T, got.recv()).await.unwrap();
    assert_eq!(request, b"written after the upgrade");
}

/// 64 MiB each way (more than every buffer on the way holds) through peers that do not read: the sender blocks
/// with bytes in every buffer on the way, the proxy's held chunk
/// included; after the upgrade the readers take it all, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_bytes_pending_in_the_proxy_survive_an_upgrade() {
    const LEN: usize = 64 << 20;
    let down = Arc::new(pattern(11, LEN));
    let up = Arc::new(pattern(12, LEN));
    let written = Arc::new(AtomicU64::new(0));
    let (start_reading, reading) = oneshot::channel::<()>();
    let reading = Arc::new(tokio::sync::Mutex::new(Some(reading)));
    let (hash_tx, mut hashed) = mpsc::unbounded_channel();
    let node = Node::start({
        let (down, written) = (down.clone(), written.clone());
        move |s: TcpStream| {
            let (down, written, reading, hash_tx) = (
                down.clone(),
                written.clone(),
                reading.clone(),
                hash_tx.clone(),
            );
            async move {
                let (mut r, mut w) = s.into_split();
                // The client sends at once; a health probe sends nothing.
                let mut first = vec![0u8; 1];
                if r.read(&mut first).await.unwrap_or(0) == 0 {
                    return;
                }
                let writer = tokio::spawn(async move {
                    for chunk in down.chunks(64 * 1024) {
                        w.write_all(chunk).await.unwrap();
                        written.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    }
                    w.shutdown().await.unwrap();
                });
                // Reads nothing until told: the client's bytes back up too.
                if let Some(go) = reading.lock().await.take() {
                    go.await.unwrap();
                }
                r.read_to_end(&mut first).await.unwrap();
                hash_tx.send((sha256(&first), first.len())).unwrap();
                writer.await.unwrap();
            }
        }
    })
    .await;
    let bin = Bin::new();
    let proxy = Proxy::start_from(bin.path(), &config(&[node.addr], ""), &[]).await;
    let c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let (mut cr, mut cw) = c.into_split();
    let sent = Arc::new(AtomicU64::new(0));
    let client_writer = {
        let (up, sent) = (up.clone(), sent.clone());
        tokio::spawn(async move {
            for chunk in up.chunks(64 * 1024) {
                cw.write_all(chunk).await.unwrap();
                sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
            cw.shutdown().await.unwrap();
        })
    };
    // Both writers are part-way, with nobody reading: bytes are pending
    // all along the path when the upgrade takes the connection.
    wait_until("the node's writer to block", T, || {
        written.load(Ordering::Relaxed) >= 1 << 20
    })
    .await;
    wait_until("the client's writer to block", T, || {
        sent.load(Ordering::Relaxed) >= 1 << 20
    })
    .await;

    upgrade_ok(&proxy).await;
    start_reading.send(()).unwrap();
    let (down_hash, down_len) = within("the client reads it all", T, hash_to_eof(&mut cr))
        .await
        .unwrap();
    assert_eq!(down_len as usize, LEN);
    assert_eq!(down_hash, sha256(&down));
    within("the client's writer", T, client_writer)
        .await
        .unwrap();
    let (up_hash, up_len) = within("the node reads it all", T, hashed.recv())
        .await
        .unwrap();
    assert_eq!(up_len, LEN);
    assert_eq!(up_hash, sha256(&up));
}
