//! Unit tests of the splice on loopback sockets: a splice handed over with
//! bytes held for a slow receiver (or in its pipe) resumes exactly, the
//! held bytes first, the counts carried, nothing lost or repeated; a quiet
//! direction gives its pipe back; the last bytes leave with the FIN; bytes
//! before a reset are forwarded; a request's ACK leaves with the answer;
//! the backend leg's keepalive is set once it has lived, and before a
//! young leg is handed over. Over 500 lines: the sockets each case sets up
//! to a byte-exact state.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::*;
use crate::config::KeepaliveConfig;
use crate::net::pipe;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

/// A connected pair of loopback sockets; the first with a small receive
/// buffer, so a peer that writes to it soon has to wait.
async fn pair(small_first: bool) -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    if small_first {
        s.set_recv_buffer_size(4096).unwrap();
    }
    s.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap();
    // In progress is fine: the accept below completes it.
    let _ = s.connect(&addr.into());
    let (theirs, _) = l.accept().await.unwrap();
    let ours = TcpStream::from_std(s.into()).unwrap();
    ours.writable().await.unwrap();
    (ours, theirs)
}

#[tokio::test]
async fn a_frozen_splice_resumes_with_its_held_bytes_first() {
    const LEN: usize = 4 << 20;
    // The copying path (pipes are tested below).
    pipe::lend_on_this_thread(false);
    // client <-> proxy's client socket; proxy's backend socket <-> node.
    let (mut client, proxy_client) = pair(true).await;
    let (proxy_backend, mut node) = pair(false).await;
    let data = pattern(LEN);
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        node.write_all(&sent).await.unwrap();
        node.shutdown().await.unwrap();
        let mut rest = Vec::new();
        node.read_to_end(&mut rest).await.unwrap();
        rest
    });
    let stats = BackendStats::default();
    let closer = Closer::new();
    let mut spliced = splice(&proxy_client, &proxy_backend, &stats, None, &closer);
    // Drive it until the client (not reading) makes it hold a chunk.
    let deadline = Instant::now() + Duration::from_secs(10);
    while spliced.down.held.is_none() {
        assert!(Instant::now() < deadline, "the splice never held bytes");
        tokio::select! {
            _ = &mut spliced => panic!("the splice ended"),
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    closer.close(CloseReason::Handover);
    let out = (&mut spliced).await;
    assert_eq!(out.reason, CloseReason::Handover);
    let state = spliced.hand_over();
    assert!(!state.down.held.is_empty(), "bytes were held at the freeze");
    assert!(!state.down.done && !state.up.done);
    let before = state.down.moved;

    // A new closer, as the new process makes one; the same sockets.
    let closer = Closer::handed(state.up.moved, state.down.moved, Duration::ZERO);
    let resumed = resume(
        &proxy_client,
        &proxy_backend,
        &stats,
        (None, Duration::ZERO),
        &closer,
        state,
    );
    let reader = async {
        let mut got = vec![0u8; LEN];
        client.read_exact(&mut got).await.unwrap();
        let mut tail = [0u8; 1];
        assert_eq!(
            client.read(&mut tail).await.unwrap(),
            0,
            "EOF after the data"
        );
        client.write_all(b"bye").await.unwrap();
        client.shutdown().await.unwrap();
        got
    };
    let (out, got) = tokio::join!(resumed, reader);
    assert!(got == data, "the client got every byte once, in order");
    assert_eq!(out.reason, CloseReason::BackendClosed);
    assert_eq!(
        out.bytes_down, LEN as u64,
        "the count went on from {before}"
    );
    assert_eq!(closer.bytes_down.load(Ordering::Relaxed), LEN as u64);
    assert_eq!(stats.bytes_down.load(Ordering::Relaxed), LEN as u64);
    // The last FIN goes out as the session drops the sockets.
    drop((proxy_client, proxy_backend));
    assert_eq!(writer.await.unwrap(), b"bye");
}

#[test]
fn a_state_without_held_bytes_allocates_nothing() {
    let dir = Dir::from(DirState {
        moved: 9,
        held: Vec::new(),
        done: true,
    });
    assert!(dir.held.is_none());
    assert_eq!((dir.moved, dir.done), (9, true));
}

/// Drive `spliced` until `cond` holds (it must not end meanwhile).
async fn drive_until(spliced: &mut Splice<'_>, what: &str, cond: impl Fn(&Splice<'_>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond(spliced) {
        assert!(Instant::now() < deadline, "timed out: {what}");
        tokio::select! {
            _ = &mut *spliced => panic!("the splice ended before {what}"),
            () = tokio::time::sleep(Duration::from_millis(2)) => {}
        }
    }
}

/// Wait until `sock` has at least `bytes` to read (a whole [`CHUNK`] or
/// more), so the splice's first read fills its buffer and the direction
/// goes through a pipe at once, and its first pipe fill moves a chunk
/// too. Without this, a sender the kernel paces (`bbr` sends loopback
/// segments smaller than a chunk) can be read piecemeal as its segments
/// arrive, every read short, and the direction never turns bulk. Waits on
/// readiness (a short peek clears it), not on a timer; returns with the
/// readiness still set.
async fn until_queued(sock: &TcpStream, bytes: usize) {
    let mut buf = vec![0u8; bytes];
    let queued = async {
        loop {
            sock.readable().await.unwrap();
            let peeked = sock.try_io(Interest::READABLE, || {
                let n = rustix::net::recv(sock, &mut buf, rustix::net::RecvFlags::PEEK)?.0;
                if n < bytes {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(())
            });
            if peeked.is_ok() {
                return;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), queued)
        .await
        .expect("the bytes queued within 10 s");
}

/// client ↔ proxy's client socket, proxy's backend socket ↔ node, all
/// with full-size buffers; None (with a notice) when splicing is off.
async fn piped() -> Option<(TcpStream, TcpStream, TcpStream, TcpStream)> {
    if !pipe::enabled() {
        eprintln!("notice: PIN_PROXY_SPLICE=off, the piped path is not tested");
        return None;
    }
    let (client, proxy_client) = pair(false).await;
    let (proxy_backend, node) = pair(false).await;
    Some((client, proxy_client, proxy_backend, node))
}

/// A bulk direction moves through a lent pipe (`splice(2)`), and a
/// splice handed over with bytes in that pipe carries them as held bytes: the
/// resumed splice (another process, which has no such pipe) writes them
/// first, nothing lost or repeated.
#[tokio::test]
async fn a_splice_frozen_with_bytes_in_its_pipe_carries_them() {
    const LEN: usize = 8 << 20;
    let Some((mut client, proxy_client, proxy_backend, mut node)) = piped().await else {
        return;
    };
    let data = pattern(LEN);
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        node.write_all(&sent).await.unwrap();
        node.shutdown().await.unwrap();
    });
    // The client's side takes little (its buffers can no longer grow to
    // swallow all 8 MiB): with the client not reading, the bytes soon
    // wait in the pipe.
    socket2::SockRef::from(&client)
        .set_recv_buffer_size(16 * 1024)
        .unwrap();
    socket2::SockRef::from(&proxy_client)
        .set_send_buffer_size(16 * 1024)
        .unwrap();
    until_queued(&proxy_backend, 2 * CHUNK).await;
    let stats = BackendStats::default();
    let closer = Closer::new();
    let mut spliced = splice(&proxy_client, &proxy_backend, &stats, None, &closer);
    // The client does not read: the pipe fills and cannot be emptied.
    drive_until(&mut spliced, "bytes waiting in a pipe", |s| {
        s.down.pipe.as_ref().is_some_and(|p| p.held() > 0)
    })
    .await;
    closer.close(CloseReason::Handover);
    assert_eq!((&mut spliced).await.reason, CloseReason::Handover);
    let state = spliced.hand_over();
    assert!(!state.down.held.is_empty(), "the pipe's bytes are carried");

    let closer = Closer::handed(state.up.moved, state.down.moved, Duration::ZERO);
    let resumed = resume(
        &proxy_client,
        &proxy_backend,
        &stats,
        (None, Duration::ZERO),
        &closer,
        state,
    );
    let reader = async {
        let mut got = vec![0u8; LEN];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(
            client.read(&mut [0u8; 1]).await.unwrap(),
            0,
            "EOF after the data"
        );
        client.shutdown().await.unwrap();
        got
    };
    let (out, got) = tokio::join!(resumed, reader);
    assert!(got == data, "the client got every byte once, in order");
    assert_eq!(out.bytes_down, LEN as u64);
    writer.await.unwrap();
}

/// Once a bulk transfer is over the direction gives its pipe back: an
/// idle connection holds no pipe, whatever it carried before.
#[tokio::test]
async fn a_quiet_direction_gives_its_pipe_back() {
    const LEN: usize = 4 << 20;
    let Some((mut client, proxy_client, proxy_backend, mut node)) = piped().await else {
        return;
    };
    let data = pattern(LEN);
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        node.write_all(&sent).await.unwrap();
        node
    });
    until_queued(&proxy_backend, CHUNK).await;
    let stats = BackendStats::default();
    let closer = Closer::new();
    let mut spliced = splice(&proxy_client, &proxy_backend, &stats, None, &closer);
    let mut got = vec![0u8; LEN];
    let lent_before = pipe::lent_here();
    tokio::select! {
        _ = &mut spliced => panic!("the splice ended"),
        r = client.read_exact(&mut got) => { r.unwrap(); }
    }
    let mut node = writer.await.unwrap();
    assert!(got == data);
    assert!(
        pipe::lent_here() > lent_before,
        "4 MiB in one go went through a pipe"
    );
    drive_until(&mut spliced, "the pipe given back", |s| {
        s.down.pipe.is_none()
    })
    .await;
    // Small messages copy; they take no pipe.
    node.write_all(b"ping").await.unwrap();
    let mut four = [0u8; 4];
    tokio::select! {
        _ = &mut spliced => panic!("the splice ended"),
        r = client.read_exact(&mut four) => { r.unwrap(); }
    }
    assert_eq!(&four, b"ping");
    assert!(spliced.down.pipe.is_none());
    assert_eq!(stats.bytes_down.load(Ordering::Relaxed), LEN as u64 + 4);
}

/// Segments `sock` has sent so far, as `ss` reads them from the kernel
/// (`TCP_INFO`); None, with a notice, without `ss` (iproute2).
fn segs_out(sock: &TcpStream) -> Option<u32> {
    let (local, peer) = (sock.local_addr().unwrap(), sock.peer_addr().unwrap());
    let out = std::process::Command::new("ss")
        .args(["-tinH", "src", &local.to_string(), "dst", &peer.to_string()])
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        other => {
            assert!(
                std::env::var_os("PIN_PROXY_REQUIRE_PEERS").is_none(),
                "ss (iproute2) is needed: {other:?}"
            );
            eprintln!("notice: no ss (iproute2): segments not counted");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&local.to_string()),
        "ss did not list the socket: {text:?}"
    );
    // ss leaves out a count of 0.
    let field = text
        .split_whitespace()
        .find_map(|f| f.strip_prefix("segs_out:"));
    Some(field.map_or(0, |n| n.parse().unwrap()))
}

/// Wait until the event loop has seen `sock`'s peer close (its FIN or
/// reset is in the readiness), as a busy proxy finds it on a backend that
/// answered and closed at once.
async fn until_seen_closed(sock: &TcpStream) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sock
        .ready(Interest::READABLE)
        .await
        .unwrap()
        .is_read_closed()
    {
        assert!(Instant::now() < deadline, "the close was never seen");
        tokio::task::yield_now().await;
    }
}

/// A backend that writes its answer and closes: the answer and the FIN
/// of the half-close leave for the client in one segment, not two, and
/// the client still reads every byte and then its EOF.
#[tokio::test]
async fn the_last_bytes_before_a_close_leave_with_the_fin() {
    let (mut client, proxy_client) = pair(false).await;
    let (proxy_backend, mut node) = pair(false).await;
    node.write_all(b"the answer").await.unwrap();
    node.shutdown().await.unwrap();
    until_seen_closed(&proxy_backend).await;
    let before = segs_out(&proxy_client);
    let stats = BackendStats::default();
    let closer = Closer::new();
    let mut spliced = splice(&proxy_client, &proxy_backend, &stats, None, &closer);
    let mut got = Vec::new();
    tokio::select! {
        _ = &mut spliced => panic!("the splice ended while the client was open"),
        r = client.read_to_end(&mut got) => { r.unwrap(); }
    }
    assert_eq!(got, b"the answer", "every byte, then EOF");
    if let (Some(before), Some(after)) = (before, segs_out(&proxy_client)) {
        assert_eq!(after - before, 1, "the bytes and the FIN in one segment");
    }
    client.shutdown().await.unwrap();
    let out = spliced.await;
    assert_eq!(out.reason, CloseReason::BackendClosed);
    assert_eq!(out.bytes_down, 10);
}

/// A client accepted on a pool listener asks and the node answers; the
/// ACK of the request leaves with the answer, so the proxy's socket on
/// the client's side sends one segment, not two (the SYN-ACK is counted
/// on the listener's side, not the accepted socket's). The kernel's
/// delayed-ACK timer (40 ms) would send the ACK alone on a slow turn, so
/// the best of three exchanges counts.
#[tokio::test]
async fn the_ack_of_a_request_leaves_with_the_answer() {
    let keepalive = KeepaliveConfig {
        idle: Duration::from_secs(30),
        interval: Duration::from_secs(10),
        count: 3,
    };
    let bound = sockopt::bind_std("127.0.0.1:0".parse().unwrap(), Some(&keepalive), false);
    let listener = TcpListener::from_std(bound.unwrap()).unwrap();
    let mut fewest = None;
    for _ in 0..3 {
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (proxy_client, _) = listener.accept().await.unwrap();
        let (proxy_backend, mut node) = pair(false).await;
        let (stats, closer) = (BackendStats::default(), Closer::new());
        let spliced = splice(&proxy_client, &proxy_backend, &stats, None, &closer);
        let exchange = async {
            client.write_all(b"ask").await.unwrap();
            let mut asked = [0u8; 3];
            node.read_exact(&mut asked).await.unwrap();
            node.write_all(b"answer").await.unwrap();
            let mut answer = [0u8; 6];
            client.read_exact(&mut answer).await.unwrap();
            assert_eq!(&answer, b"answer");
        };
        tokio::select! {
            _ = spliced => panic!("the splice ended"),
            () = exchange => {}
        }
        let Some(sent) = segs_out(&proxy_client) else {
            return;
        };
        fewest = Some(fewest.map_or(sent, |f: u32| f.min(sent)));
    }
    assert_eq!(fewest, Some(1), "the answer, with the request's ACK");
}

/// A backend that writes and then resets: the bytes still reach the
/// client and are counted, and the splice ends on the backend's error (the
/// reset is not taken for a clean close).
#[tokio::test]
async fn bytes_before_a_reset_are_forwarded_and_the_reset_is_an_error() {
    let (mut client, proxy_client) = pair(false).await;
    let (proxy_backend, node) = pair(false).await;
    let node = node.into_std().unwrap();
    std::io::Write::write_all(&mut &node, b"partial").unwrap();
    socket2::SockRef::from(&node)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(node);
    until_seen_closed(&proxy_backend).await;
    let stats = BackendStats::default();
    let closer = Closer::new();
    let out = splice(&proxy_client, &proxy_backend, &stats, None, &closer).await;
    assert_eq!(out.reason, CloseReason::BackendError, "{:?}", out.error);
    assert_eq!(out.bytes_down, 7);
    let mut got = [0u8; 7];
    client.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"partial");
}

/// Keepalive on the backend leg, as [`sockopt::keep_alive`] sets it.
fn keep_alive_of(sock: &TcpStream) -> Option<(Duration, Duration, u32, Option<Duration>)> {
    let s = socket2::SockRef::from(sock);
    s.keepalive().unwrap().then(|| {
        (
            s.tcp_keepalive_time().unwrap(),
            s.tcp_keepalive_interval().unwrap(),
            s.tcp_keepalive_retries().unwrap(),
            s.tcp_user_timeout().unwrap(),
        )
    })
}

const KEEPALIVE: KeepaliveConfig = KeepaliveConfig {
    idle: Duration::from_secs(7),
    interval: Duration::from_secs(2),
    count: 3,
};

/// Run `spliced` for `how_long` of (paused) time; it must not end.
async fn run_for(spliced: &mut Splice<'_>, how_long: Duration) {
    tokio::select! {
        out = spliced => panic!("the splice ended: {:?}", out.reason),
        () = tokio::time::sleep(how_long) => {}
    }
}

/// A just-connected pair of legs, the backend leg still owing its keepalive.
struct Young {
    client: TcpStream,
    proxy_client: TcpStream,
    proxy_backend: TcpStream,
    node: TcpStream,
    stats: BackendStats,
    closer: Closer,
}

impl Young {
    async fn new() -> Young {
        let (client, proxy_client) = pair(false).await;
        let (proxy_backend, node) = pair(false).await;
        Young {
            client,
            proxy_client,
            proxy_backend,
            node,
            stats: BackendStats::default(),
            closer: Closer::new(),
        }
    }

    fn splice(&self) -> Splice<'_> {
        let later = KeepAliveLater::new((KEEPALIVE, None), "p", "b", 1);
        splice(
            &self.proxy_client,
            &self.proxy_backend,
            &self.stats,
            None,
            &self.closer,
        )
        .keep_alive_later(later)
    }
}

/// The backend leg's keepalive and user timeout wait until the connection
/// has lived `keep_alive_after` (1 s here), then are all set; a leg that
/// ends sooner never gets them (the system calls a churned connection
/// saves).
#[tokio::test(start_paused = true)]
async fn the_backend_legs_keepalive_is_set_once_it_has_lived_a_second() {
    let after = sockopt::keep_alive_after(&KEEPALIVE, None);
    assert_eq!(after, Duration::from_secs(1));
    // Before anything could end it for idleness, too.
    let short = Some(Duration::from_millis(600));
    assert_eq!(
        sockopt::keep_alive_after(&KEEPALIVE, short),
        Duration::from_millis(300)
    );
    let legs = Young::new().await;
    let mut spliced = legs.splice();
    run_for(&mut spliced, after - Duration::from_millis(10)).await;
    assert_eq!(keep_alive_of(&legs.proxy_backend), None, "not yet");
    run_for(&mut spliced, Duration::from_millis(20)).await;
    assert_eq!(
        keep_alive_of(&legs.proxy_backend),
        Some((
            KEEPALIVE.idle,
            KEEPALIVE.interval,
            KEEPALIVE.count,
            Some(KEEPALIVE.user_timeout())
        )),
    );
    assert!(spliced.later.is_none(), "the timer is gone once it fired");

    // A connection that ends first never makes the calls.
    let Young {
        client,
        proxy_client,
        proxy_backend,
        node,
        stats,
        closer,
    } = Young::new().await;
    let later = KeepAliveLater::new((KEEPALIVE, None), "p", "b", 2);
    let spliced =
        splice(&proxy_client, &proxy_backend, &stats, None, &closer).keep_alive_later(later);
    drop((client, node));
    let out = spliced.await;
    assert!(
        matches!(
            out.reason,
            CloseReason::ClientClosed | CloseReason::BackendClosed
        ),
        "{:?}",
        out.reason
    );
    tokio::time::sleep(after * 2).await;
    assert_eq!(keep_alive_of(&proxy_backend), None);
}

/// A young connection handed over to the next process gets its keepalive
/// at once: the next process resumes it without a timer.
#[tokio::test(start_paused = true)]
async fn a_young_leg_handed_over_gets_its_keepalive_first() {
    let legs = Young::new().await;
    let mut spliced = legs.splice();
    run_for(&mut spliced, Duration::from_millis(10)).await;
    assert_eq!(keep_alive_of(&legs.proxy_backend), None);
    let _state = spliced.hand_over();
    assert_eq!(
        keep_alive_of(&legs.proxy_backend).map(|k| k.0),
        Some(KEEPALIVE.idle)
    );
}

/// A splice resumed after a live upgrade counts its idle timeout from its
/// last byte in the old process, not from the handover: 9 s silent there,
/// it ends after 1 s more of silence, not 10.
#[tokio::test(start_paused = true)]
async fn a_resumed_splice_counts_its_idle_time_from_its_last_byte() {
    let (_client, proxy_client) = pair(false).await;
    let (proxy_backend, _node) = pair(false).await;
    let stats = BackendStats::default();
    let closer = Closer::handed(0, 0, Duration::from_secs(9));
    let limit = Some(Duration::from_secs(10));
    let silent = Duration::from_secs(9);
    let mut spliced = resume(
        &proxy_client,
        &proxy_backend,
        &stats,
        (limit, silent),
        &closer,
        SpliceState::default(),
    );
    run_for(&mut spliced, Duration::from_millis(900)).await;
    let started = Instant::now();
    let out = (&mut spliced).await;
    assert_eq!(out.reason, CloseReason::IdleTimeout);
    assert!(
        started.elapsed() <= Duration::from_millis(100),
        "ended {:?} after the 0.9 s",
        started.elapsed()
    );
}
