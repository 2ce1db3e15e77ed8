//! Fault injection, the long cases: a slow reader behind a big transfer,
//! connection churn with resets on both sides, a flapping backend, and
//! reloads under load. Durations scale with `PIN_PROXY_SOAK_SECS` (default
//! 10 s; the full length is 60). Each prints a `FIGURE` line
//! (`cargo test --test e2e faults_soak:: -- --nocapture`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::faults_support::{
    Rng, Verifier, admin_addr, fd_count, fill_at, long_run, ms, rss_kib, soak_secs, wait_named,
};
use crate::support::admin_wait::wait_status;
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::proxy::closed_accounted;
use crate::support::{wait_until, within};
use serde_json::Value;
use socket2::SockRef;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(10);

/// Write bytes `0..len` of stream `seed` to `w`.
async fn send_stream(
    w: &mut (impl AsyncWriteExt + Unpin),
    seed: u64,
    len: u64,
    chunk: usize,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; chunk];
    let mut off = 0u64;
    while off < len {
        let n = chunk.min((len - off) as usize);
        fill_at(seed, off, &mut buf[..n]);
        w.write_all(&buf[..n]).await?;
        off += n as u64;
    }
    Ok(())
}

/// Read to EOF through a verifier of stream `seed`; the error, if any.
async fn verify_to_eof(
    r: &mut (impl AsyncReadExt + Unpin),
    v: &mut Verifier,
) -> Result<(), std::io::Error> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        v.check(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_keeps_proxy_memory_flat_and_gets_every_byte() {
    // 256 MiB by default, the 1 GiB on a long run.
    let len: u64 = if long_run() { 1 << 30 } else { 256 << 20 };
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    // Streams `len` bytes after a `g`, 1 MiB after anything else; nothing
    // to a connection that sends nothing (the health probe).
    let node = Node::start(move |mut s: TcpStream| {
        let counter = counter.clone();
        async move {
            let mut go = [0u8; 1];
            if !matches!(s.read(&mut go).await, Ok(1)) {
                return;
            }
            let total = if go[0] == b'g' { len } else { 1 << 20 };
            let mut buf = vec![0u8; 256 * 1024];
            let mut off = 0u64;
            while off < total {
                let n = buf.len().min((total - off) as usize);
                fill_at(7, off, &mut buf[..n]);
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
                off += n as u64;
                counter.store(off, Ordering::Relaxed);
            }
            // Not an error worth a test failure: the client may be gone.
            let _ = s.shutdown().await;
        }
    })
    .await;
    let proxy = Proxy::start(&format!(
        "defaults:\n  health: {{ interval: 1h }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [\"{}\"]\n",
        node.addr
    )).await;
    let pid = proxy.pid();
    wait_named(&proxy, "probe", 1, T, |_| true).await;
    // Warm up: one small transfer, so the baseline includes a used runtime.
    let mut warm = TcpStream::connect(proxy.addr("p")).await.unwrap();
    warm.write_all(b"w").await.unwrap();
    let mut v = Verifier::new(7);
    within("warm-up", T, verify_to_eof(&mut warm, &mut v))
        .await
        .unwrap();
    assert_eq!((v.offset, v.first_bad), (1 << 20, None));
    drop(warm);
    wait_named(&proxy, "closed", 1, T, |_| true).await;
    let rss0 = rss_kib(pid);

    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    c.write_all(b"g").await.unwrap();
    let mut v = Verifier::new(7);
    let mut buf = vec![0u8; 64 * 1024];
    while v.offset < 4 << 20 {
        let n = within("first 4 MiB", T, c.read(&mut buf)).await.unwrap();
        assert!(n > 0, "early EOF");
        v.check(&buf[..n]);
    }
    // Stop reading until the backend cannot send any more.
    let mut last = (sent.load(Ordering::Relaxed), Instant::now());
    let stall_deadline = Instant::now() + T;
    while last.1.elapsed() < Duration::from_millis(500) {
        assert!(Instant::now() < stall_deadline, "the backend never stalled");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = sent.load(Ordering::Relaxed);
        if now != last.0 {
            last = (now, Instant::now());
        }
    }
    let in_flight = last.0 - v.offset;
    let rss_stalled = rss_kib(pid);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_stalled_later = rss_kib(pid);

    // Resume, sampling the proxy's RSS while the rest flows.
    let peak = Arc::new(AtomicU64::new(rss_stalled.max(rss_stalled_later)));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let resumed = Instant::now();
    within(
        "the rest of the transfer",
        Duration::from_secs(120),
        verify_to_eof(&mut c, &mut v),
    )
    .await
    .unwrap();
    let took = resumed.elapsed();
    sampling.store(false, Ordering::Relaxed);
    sampler.await.unwrap();
    assert_eq!(v.first_bad, None, "corrupted at byte {:?}", v.first_bad);
    assert_eq!(v.offset, len, "every byte arrived");
    drop(c);
    let closed = wait_named(&proxy, "closed", 2, T, |_| true).await;
    assert_eq!(closed[1]["bytes_down"], len);
    let growth = peak.load(Ordering::Relaxed).saturating_sub(rss0);
    println!(
        "FIGURE slow_reader {} MiB: proxy RSS baseline {rss0} KiB, stalled {rss_stalled} KiB \
         (+1 s: {rss_stalled_later} KiB), peak growth {growth} KiB; {} KiB in flight in kernel \
         buffers while stalled; rest delivered exactly in {:.2} s ({:.0} MiB/s)",
        len >> 20,
        in_flight >> 10,
        took.as_secs_f64(),
        (len - (4 << 20)) as f64 / took.as_secs_f64() / f64::from(1 << 20)
    );
    assert!(growth < 16 * 1024, "proxy RSS grew {growth} KiB");
}

/// How one churn transfer ended.
#[derive(Debug, Default)]
struct Tally {
    exact: AtomicUsize,
    client_reset: AtomicUsize,
    reset_seen: AtomicUsize,
    truncated: AtomicUsize,
    corrupted: AtomicUsize,
    other: AtomicUsize,
    bytes: AtomicU64,
    /// Client address, length and bytes received of each truncated or
    /// failed transfer, to match against the proxy's `closed` events.
    suspects: Mutex<Vec<(String, u64, u64, String)>>,
}

/// Abort `s` with a reset instead of a FIN.
fn reset(s: &TcpStream) {
    // Best effort: the socket is dropped right after either way.
    let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// Echo, but reset the connection after a random number of bytes in 10% of
/// connections (seeded per connection).
async fn flaky_echo(mut s: TcpStream, seed: u64) {
    let mut rng = Rng::new(seed);
    let reset_at = rng.chance(10).then(|| rng.range(0, 64 * 1024));
    let mut buf = vec![0u8; 16 * 1024];
    let mut moved = 0u64;
    loop {
        let Ok(n) = s.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            // Not an error worth reporting: the peer may be gone.
            let _ = s.shutdown().await;
            return;
        }
        if s.write_all(&buf[..n]).await.is_err() {
            return;
        }
        moved += n as u64;
        if reset_at.is_some_and(|at| moved >= at) {
            reset(&s);
            return;
        }
    }
}

/// One churn transfer of `len` bytes of stream `seed`, the client
/// resetting after `abort_at` bytes when given.
async fn churn_once(addr: SocketAddr, seed: u64, len: u64, abort_at: Option<u64>, tally: &Tally) {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        tally.other.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let mut v = Verifier::new(seed);
    let (mut r, mut w) = s.split();
    let send = async {
        send_stream(&mut w, seed, abort_at.unwrap_or(len), 16 * 1024).await?;
        if abort_at.is_none() {
            w.shutdown().await?;
        }
        Ok::<(), std::io::Error>(())
    };
    let recv = async {
        if abort_at.is_some() {
            return Ok(());
        }
        verify_to_eof(&mut r, &mut v).await
    };
    let outcome =
        tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(send, recv) }).await;
    tally.bytes.fetch_add(v.offset, Ordering::Relaxed);
    let what = format!("{outcome:?}");
    let counter = match outcome {
        Err(_) => &tally.other,
        Ok(_) if v.first_bad.is_some() => &tally.corrupted,
        Ok(_) if abort_at.is_some() => {
            reset(&s);
            &tally.client_reset
        }
        Ok((_, Err(e))) if e.kind() == std::io::ErrorKind::ConnectionReset => &tally.reset_seen,
        Ok((Err(e), _)) if e.kind() == std::io::ErrorKind::ConnectionReset => &tally.reset_seen,
        Ok((Err(e), _)) if e.kind() == std::io::ErrorKind::BrokenPipe => &tally.reset_seen,
        Ok((Ok(()), Ok(()))) if v.offset == len => &tally.exact,
        Ok((Ok(()), Ok(()))) => &tally.truncated,
        Ok(_) => &tally.other,
    };
    if std::ptr::eq(counter, &tally.truncated) || std::ptr::eq(counter, &tally.other) {
        let me = s.local_addr().map(|a| a.to_string()).unwrap_or_default();
        tally
            .suspects
            .lock()
            .unwrap()
            .push((me, len, v.offset, what));
    }
    counter.fetch_add(1, Ordering::Relaxed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_with_resets_both_sides_leaves_no_fd_or_connection_behind() {
    let secs = soak_secs(10);
    let conn_seq = Arc::new(AtomicU64::new(0));
    let seq = conn_seq.clone();
    let node = Node::start(move |s| flaky_echo(s, seq.fetch_add(1, Ordering::Relaxed))).await;
    let proxy = Proxy::start(&format!(
        "admin: {{ listen: 127.0.0.1:0 }}\ndefaults:\n  health: {{ interval: 1h }}\n  \
         max_connections: 4096\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [\"{}\"]\n",
        node.addr
    ))
    .await;
    let pid = proxy.pid();
    let admin = admin_addr(&proxy.events());
    wait_named(&proxy, "probe", 1, T, |_| true).await;
    let addr = proxy.addr("p");
    // Warm up, so the baseline includes a used runtime.
    churn_once(addr, 1, 1024, None, &Tally::default()).await;
    wait_named(&proxy, "closed", 1, T, |_| true).await;
    let fd_base = fd_count(pid);
    let rss_base = rss_kib(pid);

    let tally = Arc::new(Tally::default());
    let peak_fds = Arc::new(AtomicUsize::new(fd_base));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let workers: Vec<_> = (0..200u64)
        .map(|w| {
            let tally = tally.clone();
            tokio::spawn(async move {
                let mut rng = Rng::new(1000 + w);
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let len = rng.range(1024, 256 * 1024);
                    let abort = rng.chance(10).then(|| rng.range(0, len));
                    churn_once(addr, (w << 32) | i, len, abort, &tally).await;
                    i += 1;
                }
            })
        })
        .collect();
    let sampler = {
        let peak = peak_fds.clone();
        tokio::spawn(async move {
            while Instant::now() < deadline {
                peak.fetch_max(fd_count(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    within("churn workers", Duration::from_secs(secs + 60), async {
        for w in workers {
            w.await.unwrap();
        }
    })
    .await;
    sampler.await.unwrap();
    let transfers: usize = [
        &tally.exact,
        &tally.client_reset,
        &tally.reset_seen,
        &tally.truncated,
        &tally.corrupted,
        &tally.other,
    ]
    .iter()
    .map(|c| c.load(Ordering::Relaxed))
    .sum();
    // Every session ends and gives back its descriptors.
    let t0 = Instant::now();
    wait_status(admin, "no live connection in /status", T, |s| {
        let p = s["pools"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "p"));
        (p.expect("pool p in /status")["connections"] == 0).then_some(())
    })
    .await;
    wait_until("fds back to baseline", T, || fd_count(pid) <= fd_base).await;
    let settle = t0.elapsed();
    let fd_after = fd_count(pid);
    let rss_after = rss_kib(pid);
    // Short connections of the churn are folded into summary lines.
    let closed = proxy.wait_closed(transfers + 1, T, |_| true).await;
    let mut reasons = std::collections::BTreeMap::new();
    for e in &closed {
        *reasons
            .entry(e["reason"].as_str().unwrap_or("?").to_owned())
            .or_insert(0usize) += closed_accounted(e);
    }
    println!(
        "FIGURE churn {secs}s × 200 concurrent: {transfers} transfers ({} exact, {} client resets, \
         {} ended by a backend reset, {} truncated, {} corrupted, {} other), {} MiB verified; \
         closed reasons {reasons:?}; proxy fds baseline {fd_base}, peak {}, after {fd_after} \
         (settled in {:.0} ms); RSS {rss_base} → {rss_after} KiB",
        tally.exact.load(Ordering::Relaxed),
        tally.client_reset.load(Ordering::Relaxed),
        tally.reset_seen.load(Ordering::Relaxed),
        tally.truncated.load(Ordering::Relaxed),
        tally.corrupted.load(Ordering::Relaxed),
        tally.other.load(Ordering::Relaxed),
        tally.bytes.load(Ordering::Relaxed) >> 20,
        peak_fds.load(Ordering::Relaxed),
        ms(settle),
    );
    let events = proxy.events();
    for (client, len, got, what) in tally.suspects.lock().unwrap().iter() {
        let theirs: Vec<&Value> = events
            .iter()
            .filter(|e| e["client"] == client.as_str())
            .collect();
        eprintln!("suspect {client}: {got} of {len} bytes, {what}; proxy: {theirs:?}");
    }
    assert_eq!(
        tally.corrupted.load(Ordering::Relaxed),
        0,
        "corrupted transfers"
    );
    assert_eq!(
        tally.truncated.load(Ordering::Relaxed),
        0,
        "transfers cut short with a clean EOF"
    );
    assert_eq!(
        tally.other.load(Ordering::Relaxed),
        0,
        "hung or failed transfers"
    );
    assert!(tally.exact.load(Ordering::Relaxed) > transfers / 2);
    assert!(
        tally.reset_seen.load(Ordering::Relaxed) > 0,
        "no backend reset happened"
    );
    assert_eq!(
        closed.iter().map(closed_accounted).sum::<usize>(),
        transfers + 1,
        "every connection accounted for in a closed event, in full or folded"
    );
}

/// Writes `tag`, then echoes.
async fn tagged_echo(tag: u8) -> Node {
    Node::start(move |mut s: TcpStream| async move {
        if s.write_all(&[tag]).await.is_ok() {
            crate::support::nodes::echo(s).await;
        }
    })
    .await
}

/// Connect and read the node's tag byte.
async fn tagged_connect(addr: SocketAddr) -> std::io::Result<(TcpStream, u8)> {
    let mut s = TcpStream::connect(addr).await?;
    let mut tag = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut tag))
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)??;
    Ok((s, tag[0]))
}

async fn ping(s: &mut TcpStream, i: u64) -> std::io::Result<()> {
    let msg = i.to_le_bytes();
    s.write_all(&msg).await?;
    let mut got = [0u8; 8];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)??;
    if got != msg {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    Ok(())
}

fn metric_sum(text: &str, name: &str, label: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn admin_text(admin: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flapping_backend_escalates_quarantine_and_spares_the_stable_one() {
    let secs = soak_secs(10);
    let stable = tagged_echo(b'S').await;
    let mut flappy = tagged_echo(b'F').await;
    let proxy = Proxy::start(&format!(
        "admin: {{ listen: 127.0.0.1:0 }}\ndefaults:\n  connect_timeout: 500ms\n  \
         quarantine: {{ base: 200ms, max: 600ms, failures: 1 }}\n  \
         health: {{ interval: 100ms, timeout: 1s, fall: 2, rise: 1 }}\n  \
         rebalance: {{ interval: 0s }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [{{ name: s, addr: \"{}\" }}, {{ name: f, addr: \"{}\" }}]\n",
        stable.addr, flappy.addr
    ))
    .await;
    let admin = admin_addr(&proxy.events());
    wait_named(&proxy, "probe", 2, T, |_| true).await;
    let addr = proxy.addr("p");
    let deadline = Instant::now() + Duration::from_secs(secs);

    // Long-lived connections: those pinned to the stable node must never fail.
    // (Those that land on the flapping node are held too, so least-used
    // selection spreads the twelve evenly; they die with its first outage.)
    let (mut pinned, mut on_flappy) = (Vec::new(), Vec::new());
    for _ in 0..12 {
        let (s, tag) = tagged_connect(addr).await.unwrap();
        if tag == b'S' {
            pinned.push(s);
        } else {
            on_flappy.push(s);
        }
    }
    let setup_on_flappy = on_flappy.len();
    let stable_errors = Arc::new(AtomicUsize::new(0));
    let stable_pings = Arc::new(AtomicUsize::new(0));
    let long: Vec<_> = pinned
        .into_iter()
        .enumerate()
        .map(|(k, mut s)| {
            let (errors, pings) = (stable_errors.clone(), stable_pings.clone());
            tokio::spawn(async move {
                let mut i = k as u64;
                while Instant::now() < deadline {
                    if ping(&mut s, i).await.is_err() {
                        errors.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    pings.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        })
        .collect();
    let pinned_count = long.len();

    // Short clients, all the time.
    let landed: Arc<Mutex<[usize; 2]>> = Arc::default();
    let short_errors: Arc<Mutex<[usize; 2]>> = Arc::default();
    // Connected, then closed before the tag arrived: the flapping node
    // stopped just after accepting, or the proxy gave up on the client
    // (`no_backend`, counted separately).
    let cut = Arc::new(AtomicUsize::new(0));
    let short: Vec<_> = (0..8u64)
        .map(|w| {
            let (landed, errors, cut) = (landed.clone(), short_errors.clone(), cut.clone());
            tokio::spawn(async move {
                let mut i = w << 32;
                while Instant::now() < deadline {
                    i += 1;
                    let Ok((mut s, tag)) = tagged_connect(addr).await else {
                        cut.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let k = usize::from(tag == b'F');
                    landed.lock().unwrap()[k] += 1;
                    if let Err(e) = ping(&mut s, i).await {
                        errors.lock().unwrap()[k] += 1;
                        if k == 0 {
                            eprintln!("short client on S failed: {e} ({:?})", s.local_addr());
                        }
                    }
                    drop(s);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();

    let mut flaps = 0u64;
    while Instant::now() + Duration::from_secs(2) <= deadline {
        flappy.stop();
        tokio::time::sleep(Duration::from_secs(1)).await;
        flappy.restart().await;
        flaps += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for t in long.into_iter().chain(short) {
        within("clients", T, t).await.unwrap();
    }

    let quarantines: Vec<u64> = proxy
        .named("quarantined")
        .iter()
        .filter(|e| e["backend"] == "f")
        .filter_map(|e| e["window_ms"].as_u64())
        .collect();
    let failed = proxy
        .named("connect_failed")
        .iter()
        .filter(|e| e["backend"] == "f")
        .count();
    // A client whose connect to f was in flight when f was drained is
    // closed (the drain-during-connect bug): as `no_backend`, or, when its
    // next attempt won the race, as `drained` on s before any byte moved.
    let closed = proxy.named("closed");
    let never_spliced = |e: &Value| {
        e["reason"] == "no_backend" || (e["reason"] == "drained" && e["bytes_down"] == 0)
    };
    let stable_closed: Vec<&Value> = closed
        .iter()
        .filter(|e| e["backend"] == "s" && e["reason"] != "client_closed" && !never_spliced(e))
        .collect();
    let no_backend = closed.iter().filter(|e| never_spliced(e)).count();
    drop(on_flappy);
    let metrics = admin_text(admin, "/metrics");
    let probes_f = metric_sum(&metrics, "pin_proxy_probes_total{", "backend=\"f\"");
    let landed = *landed.lock().unwrap();
    let cut = cut.load(Ordering::Relaxed);
    let short_errors = *short_errors.lock().unwrap();
    let accepted_f = flappy.accepted();
    println!(
        "FIGURE flapping {secs}s ({flaps} down/up cycles of 1 s each): quarantine windows of f \
         {quarantines:?} ms; client connect attempts that failed on f: {failed}; accepts at f: \
         {accepted_f} = {} clients + probes (probes run: {probes_f}); short clients landed \
         S/F {landed:?}, errors S/F {short_errors:?}, cut before the tag {cut}, of them \
         dropped by the proxy while connecting {no_backend}; {pinned_count} pinned to S did \
         {} pings with {} errors",
        landed[1] + setup_on_flappy + cut,
        stable_pings.load(Ordering::Relaxed),
        stable_errors.load(Ordering::Relaxed),
    );
    assert!(
        pinned_count > 0,
        "no long-lived client landed on the stable node"
    );
    assert_eq!(
        stable_errors.load(Ordering::Relaxed),
        0,
        "a pinned stable connection failed"
    );
    assert_eq!(
        short_errors[0], 0,
        "a short client on the stable node failed; stable closes: {stable_closed:?}"
    );
    // Not asserted to be zero here (see above, and the reproducer
    // `faults::client_connecting_to_a_backend_that_gets_drained_fails_over`).
    assert!(no_backend <= cut, "{no_backend} dropped but {cut} cut");
    assert!(stable_closed.is_empty(), "{stable_closed:?}");
    // Escalation: some window doubled from the previous one, and the cap held.
    assert!(
        quarantines
            .windows(2)
            .any(|w| w[1] == (w[0] * 2).min(600) && w[1] > w[0]),
        "windows never escalated: {quarantines:?}"
    );
    assert!(
        quarantines.iter().all(|w| (200..=600).contains(w)),
        "{quarantines:?}"
    );
    assert!(
        quarantines.contains(&600),
        "the cap was never reached: {quarantines:?}"
    );
    // Bounded attempts: every accept at f is a client that landed there or a
    // probe; and failed client attempts per outage stay below the workers.
    assert!(
        (accepted_f as u64) <= (landed[1] + setup_on_flappy + cut) as u64 + probes_f,
        "{accepted_f} accepts at f"
    );
    assert!(
        failed as u64 <= flaps * 8,
        "{failed} failed attempts in {flaps} outages"
    );
}

/// The reload test's config number `i`: pool `p` (bound address, backends
/// a and b) plus, in turn, a backup c, a second pool, other timeouts.
fn reload_yaml(i: usize, listen: &str, a: SocketAddr, b: SocketAddr, c: SocketAddr) -> String {
    let backup = if i % 2 == 1 {
        format!(", {{ name: c, addr: \"{c}\", backup: true }}")
    } else {
        String::new()
    };
    let extra_pool = if i % 3 == 1 {
        format!("  - {{ name: q, listen: 127.0.0.1:0, backends: [\"{a}\"] }}\n")
    } else {
        String::new()
    };
    format!(
        "defaults:\n  health: {{ interval: 1h }}\n  connect_timeout: {}ms\n  \
         rebalance: {{ interval: 0s }}\npools:\n  - name: p\n    listen: \"{listen}\"\n    \
         idle_timeout: {}s\n    backends: [{{ name: a, addr: \"{a}\" }}, \
         {{ name: b, addr: \"{b}\" }}{backup}]\n{extra_pool}",
        1000 + 100 * (i % 5),
        if i % 4 == 2 { 3600 } else { 0 },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_reloads_under_load_lose_no_byte_and_close_no_connection() {
    let (a, b, c) = (Node::echo().await, Node::echo().await, Node::echo().await);
    let proxy =
        Arc::new(Proxy::start(&reload_yaml(0, "127.0.0.1:0", a.addr, b.addr, c.addr)).await);
    wait_named(&proxy, "probe", 2, T, |_| true).await;
    let addr = proxy.addr("p");
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));

    // Long-lived streams across every reload: each sends its stream until
    // told to stop, and checks the echo.
    let long: Vec<_> = (0..8u64)
        .map(|k| {
            let done = done.clone();
            tokio::spawn(async move {
                let mut s = TcpStream::connect(addr).await.unwrap();
                let (mut r, mut w) = s.split();
                let mut v = Verifier::new(500 + k);
                let send = async {
                    let mut buf = vec![0u8; 32 * 1024];
                    let mut off = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        fill_at(500 + k, off, &mut buf);
                        w.write_all(&buf).await?;
                        off += buf.len() as u64;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    w.shutdown().await?;
                    Ok::<u64, std::io::Error>(off)
                };
                let (sent, got) = tokio::join!(send, verify_to_eof(&mut r, &mut v));
                let sent = sent.expect("long-lived stream write");
                got.expect("long-lived stream read");
                assert_eq!(v.first_bad, None, "stream {k} corrupted");
                assert_eq!(v.offset, sent, "stream {k} lost bytes");
                sent
            })
        })
        .collect();
    // Short transfers, accepted while reloads happen.
    let short_done = Arc::new(AtomicUsize::new(0));
    let short: Vec<_> = (0..8u64)
        .map(|w| {
            let (done, count) = (done.clone(), short_done.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let seed = (w << 32) | i;
                    let mut s = TcpStream::connect(addr).await.unwrap();
                    let (mut r, mut wr) = s.split();
                    let mut v = Verifier::new(seed);
                    let send = async {
                        send_stream(&mut wr, seed, 256 * 1024, 16 * 1024).await?;
                        wr.shutdown().await
                    };
                    let (sent, got) = tokio::join!(send, verify_to_eof(&mut r, &mut v));
                    sent.expect("short write");
                    got.expect("short read");
                    assert_eq!(
                        (v.offset, v.first_bad),
                        (256 * 1024, None),
                        "transfer {seed}"
                    );
                    count.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();

    let reloader = {
        let proxy = proxy.clone();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let listen = addr.to_string();
            for i in 1..=50 {
                let outcome =
                    proxy.reload_blocking(&reload_yaml(i, &listen, a.addr, b.addr, c.addr));
                assert_eq!(outcome["message"], "reloaded", "reload {i}: {outcome}");
                std::thread::sleep(Duration::from_millis(50));
            }
            started.elapsed()
        })
    };
    let took = within("50 reloads", Duration::from_secs(60), reloader)
        .await
        .unwrap();
    done.store(true, Ordering::Relaxed);
    let mut streamed = 0u64;
    for t in long {
        streamed += within("long-lived streams", T, t).await.unwrap();
    }
    for t in short {
        within("short transfers", T, t).await.unwrap();
    }
    let shorts = short_done.load(Ordering::Relaxed);
    let closed = proxy.wait_closed(8 + shorts, T, |e| e["pool"] == "p").await;
    let bad: Vec<&Value> = closed
        .iter()
        .filter(|e| e["reason"] != "client_closed" && e["reason"] != "backend_closed")
        .collect();
    let reloads = proxy.named("reloaded").len();
    println!(
        "FIGURE reload_under_load: {reloads} SIGHUP reloads in {:.1} s during 8 long-lived \
         streams ({} MiB echoed exactly) and {shorts} short 256 KiB transfers (all exact); \
         connections closed for another reason: {}",
        took.as_secs_f64(),
        streamed >> 20,
        bad.len()
    );
    assert_eq!(reloads, 50);
    assert!(bad.is_empty(), "{bad:?}");
    let on_backup = proxy
        .named("connected")
        .iter()
        .filter(|e| e["backend"] == "c")
        .count();
    assert_eq!(
        on_backup, 0,
        "the backup took clients while both primaries were up"
    );
}
