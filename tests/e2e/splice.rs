//! Splice exactness: big transfers both ways, many connections, half-close,
//! resets, idle timeout. Real sockets through the real binary.

use std::time::Duration;

use crate::support::nodes::Node;
use crate::support::proxy::{Proxy, closed_accounted};
use crate::support::{hash_to_eof, pattern, send_all, sha256, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(30);

fn one_backend(addr: std::net::SocketAddr, extra: &str) -> String {
    format!("pools:\n  - name: p\n    listen: 127.0.0.1:0\n{extra}    backends: [\"{addr}\"]\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_mib_each_way_at_once_arrive_exactly() {
    const LEN: usize = 64 << 20;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let node = Node::start(move |mut s: TcpStream| {
        let tx = tx.clone();
        async move {
            let (mut r, mut w) = s.split();
            let down = pattern(2, LEN);
            let (got, sent) = tokio::join!(hash_to_eof(&mut r), send_all(&mut w, &down));
            // The health probe's connection sends nothing and hangs up: not ours.
            if let (Ok(got), Ok(())) = (got, sent)
                && got.1 > 0
            {
                tx.send(got).unwrap();
            }
        }
    })
    .await;
    let proxy = Proxy::start(&one_backend(node.addr, "")).await;
    let up = pattern(1, LEN);
    let mut client = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let (mut r, mut w) = client.split();
    let (got, sent) = within("64 MiB both ways", T, async {
        tokio::join!(hash_to_eof(&mut r), send_all(&mut w, &up))
    })
    .await;
    sent.unwrap();
    assert_eq!(
        got.unwrap(),
        (sha256(&pattern(2, LEN)), LEN as u64),
        "backend → client"
    );
    let at_backend = within("backend hash", T, rx.recv()).await.unwrap();
    assert_eq!(at_backend, (sha256(&up), LEN as u64), "client → backend");
    let closed = proxy.wait_event(|e| e["message"] == "closed", T).await;
    assert_eq!(closed["bytes_up"], LEN as u64);
    assert_eq!(closed["bytes_down"], LEN as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_connections_each_move_one_mib_exactly() {
    const LEN: usize = 1 << 20;
    let node = Node::echo().await;
    let proxy = Proxy::start(&one_backend(node.addr, "")).await;
    let addr = proxy.addr("p");
    let tasks: Vec<_> = (0..200u64)
        .map(|i| {
            tokio::spawn(async move {
                let data = pattern(100 + i, LEN);
                let mut s = TcpStream::connect(addr).await.unwrap();
                let (mut r, mut w) = s.split();
                let (got, sent) = tokio::join!(hash_to_eof(&mut r), send_all(&mut w, &data));
                sent.unwrap();
                assert_eq!(got.unwrap(), (sha256(&data), LEN as u64), "connection {i}");
            })
        })
        .collect();
    within("200 transfers", Duration::from_secs(120), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    // Short connections' lines are folded (a few in full a second, then a
    // count): every connection is accounted for, and each line in full
    // shows the whole MiB both ways.
    let closed = proxy.wait_closed(200, T, |_| true).await;
    assert_eq!(closed.iter().map(closed_accounted).sum::<usize>(), 200);
    assert!(
        closed
            .iter()
            .filter(|e| e.get("suppressed").is_none())
            .all(|e| e["bytes_up"] == LEN as u64 && e["bytes_down"] == LEN as u64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_half_close_leaves_the_reply_direction_open() {
    // The backend answers only after it has seen the client's EOF.
    let node = Node::start(|mut s: TcpStream| async move {
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got).await;
        let _ = s.write_all(b"reply to ").await;
        let _ = s.write_all(&got).await;
        let _ = s.shutdown().await;
    })
    .await;
    let proxy = Proxy::start(&one_backend(node.addr, "")).await;
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    c.write_all(b"question").await.unwrap();
    c.shutdown().await.unwrap();
    let mut reply = Vec::new();
    within("reply after FIN", T, c.read_to_end(&mut reply))
        .await
        .unwrap();
    assert_eq!(reply, b"reply to question");
    let closed = proxy.wait_event(|e| e["message"] == "closed", T).await;
    assert_eq!(closed["reason"], "client_closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_half_close_leaves_the_request_direction_open() {
    // The backend sends a banner and FIN, then still reads what follows.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let node = Node::start(move |mut s: TcpStream| {
        let tx = tx.clone();
        async move {
            let _ = s.write_all(b"banner").await;
            let _ = s.shutdown().await;
            let mut got = Vec::new();
            // The health probe's connection sends nothing: not ours.
            if s.read_to_end(&mut got).await.is_ok() && !got.is_empty() {
                tx.send(got).unwrap();
            }
        }
    })
    .await;
    let proxy = Proxy::start(&one_backend(node.addr, "")).await;
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let mut banner = Vec::new();
    within("banner then EOF", T, c.read_to_end(&mut banner))
        .await
        .unwrap();
    assert_eq!(banner, b"banner");
    c.write_all(b"data after the backend's FIN").await.unwrap();
    c.shutdown().await.unwrap();
    let got = within("late data at backend", T, rx.recv()).await.unwrap();
    assert_eq!(got, b"data after the backend's FIN");
    let closed = proxy.wait_event(|e| e["message"] == "closed", T).await;
    assert_eq!(closed["reason"], "backend_closed");
}

/// Read until EOF or error; true if the stream ended (either way) in time.
async fn ends(s: &mut TcpStream) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    let ended = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(T, ended).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_reset_mid_stream_closes_the_client() {
    let node = Node::start(|s: TcpStream| async move {
        let mut s = s;
        // Start on the client's word (a reset before the proxy's connect has
        // completed would be a failed connect, not a mid-stream reset; the
        // health probe says nothing), stream data, then abort with RST.
        let mut go = [0u8; 1];
        if s.read_exact(&mut go).await.is_err() {
            return;
        }
        for _ in 0..16 {
            if s.write_all(&[7u8; 16 * 1024]).await.is_err() {
                return; // the health probe hung up
            }
        }
        let _ = s.set_zero_linger();
        drop(s);
    })
    .await;
    let proxy = Proxy::start(&one_backend(node.addr, "")).await;
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    c.write_all(b"g").await.unwrap();
    assert!(
        ends(&mut c).await,
        "client was not closed after the backend reset"
    );
    let closed = proxy.wait_event(|e| e["message"] == "closed", T).await;
    assert_eq!(closed["reason"], "backend_error", "{closed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_reset_mid_stream_closes_the_backend() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let node = Node::start(move |mut s: TcpStream| {
        let tx = tx.clone();
        async move {
            // Start on the client's word (the health probe says nothing),
            // then keep sending until the proxy closes us.
            let mut go = [0u8; 1];
            if s.read_exact(&mut go).await.is_err() {
                return;
            }
            let chunk = [9u8; 16 * 1024];
            while s.write_all(&chunk).await.is_ok() {}
            tx.send(()).unwrap();
        }
    })
    .await;
    let proxy = Proxy::start(&one_backend(node.addr, "")).await;
    let c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let mut c = c;
    c.write_all(b"g").await.unwrap();
    let mut buf = [0u8; 1024];
    c.read_exact(&mut buf).await.unwrap();
    c.set_zero_linger().unwrap();
    drop(c);
    within("backend closed after client reset", T, rx.recv())
        .await
        .unwrap();
    let closed = proxy.wait_event(|e| e["message"] == "closed", T).await;
    assert_eq!(closed["reason"], "client_error", "{closed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_closes_a_silent_splice_but_not_a_busy_one() {
    let node = Node::echo().await;
    let proxy = Proxy::start(&one_backend(node.addr, "    idle_timeout: 1s\n")).await;
    let mut busy = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let mut quiet = TcpStream::connect(proxy.addr("p")).await.unwrap();
    // The busy one talks every 100 ms for 1.5 s, past the 1 s idle window.
    for _ in 0..15 {
        busy.write_all(b"x").await.unwrap();
        let mut b = [0u8; 1];
        busy.read_exact(&mut b).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ends(&mut quiet).await);
    let closed = proxy.wait_event(|e| e["message"] == "closed", T).await;
    assert_eq!(closed["reason"], "idle_timeout");
    busy.write_all(b"y").await.unwrap();
    let mut b = [0u8; 1];
    busy.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"y");
    assert_eq!(proxy.named("closed").len(), 1, "only the quiet one closed");
}

/// The proxy holds the handshake's last ACK for the client's first bytes
/// (one segment less to the node), but never makes a node that speaks
/// first wait for a client that says nothing: the kernel's own timer would
/// let that node see the connection only after 200 ms. The fastest of
/// three greetings is timed, so one slow scheduling turn cannot fail it,
/// while a held ACK would delay all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_speaks_first_greets_a_silent_client_at_once() {
    const DELAYED_ACK_TIMER: Duration = Duration::from_millis(200);
    let node = Node::start(|mut s: TcpStream| async move {
        let _ = s.write_all(b"hello").await;
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
    })
    .await;
    let proxy = Proxy::start(&one_backend(node.addr, "")).await;
    let mut fastest = Duration::MAX;
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
        let mut greeting = [0u8; 5];
        within("greeting", T, c.read_exact(&mut greeting))
            .await
            .unwrap();
        assert_eq!(&greeting, b"hello");
        fastest = fastest.min(started.elapsed());
    }
    assert!(
        fastest < DELAYED_ACK_TIMER,
        "the node greeted a silent client only after {fastest:?}"
    );
}
