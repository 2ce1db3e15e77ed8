//! Ten upgrades in a row under load: 200 ping-pong connections, 4 bulk
//! streams checksummed both ways and a stream of new clients. Nothing is
//! closed, lost, corrupted or refused; ids stay; no descriptor leaks.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::RwLock;

use crate::support::admin_wait::wait_status;
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::upgrade::{
    Bin, T, config, exited, fds, lent_pipes, status, upgrade_ok, wait_exited,
};
use crate::support::{wait_until, within};

const PINGERS: usize = 200;
const BULK: usize = 4;
const BULK_MIN: u64 = 256 << 20;
const UPGRADES: usize = 10;

/// What one ping-pong client saw.
struct Pinged {
    local: SocketAddr,
    rounds: u64,
    worst: Duration,
}

/// Request, exact echo, repeat, until `stop`; any error or a wrong byte
/// fails the test.
async fn ping_pong(mut s: TcpStream, k: usize, stop: Arc<AtomicBool>) -> Pinged {
    let local = s.local_addr().unwrap();
    let (mut rounds, mut worst) = (0u64, Duration::ZERO);
    let mut got = [0u8; 16];
    while !stop.load(Ordering::Relaxed) {
        let mut msg = [0u8; 16];
        msg[..8].copy_from_slice(&(k as u64).to_le_bytes());
        msg[8..].copy_from_slice(&rounds.to_le_bytes());
        let t = Instant::now();
        s.write_all(&msg)
            .await
            .unwrap_or_else(|e| panic!("pinger {k}: write: {e}"));
        s.read_exact(&mut got)
            .await
            .unwrap_or_else(|e| panic!("pinger {k}: read after {rounds} rounds: {e}"));
        assert_eq!(got, msg, "pinger {k}: wrong echo");
        worst = worst.max(t.elapsed());
        rounds += 1;
        // Continuous, but not a busy loop that starves the test's runtime.
        if rounds % 8 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    Pinged {
        local,
        rounds,
        worst,
    }
}

/// Send pseudo-random bytes until at least `BULK_MIN` went and `done` is
/// set, then half-close; read the echo to EOF. Both ends are hashed as
/// they stream: (sent, hash sent, received, hash received).
async fn bulk(s: TcpStream, seed: u64, done: Arc<AtomicBool>) -> (u64, String, u64, String) {
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        let (mut x, mut n, mut h) = (seed | 1, 0u64, Sha256::new());
        let mut chunk = vec![0u8; 64 * 1024];
        while n < BULK_MIN || !done.load(Ordering::Relaxed) {
            for word in chunk.chunks_mut(8) {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                word.copy_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
            }
            w.write_all(&chunk).await.expect("bulk write");
            h.update(&chunk);
            n += chunk.len() as u64;
        }
        w.shutdown().await.expect("bulk half-close");
        (n, crate::support::hex(&h.finalize()))
    });
    let (mut n, mut h) = (0u64, Sha256::new());
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let k = r.read(&mut buf).await.expect("bulk read");
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    let (sent, sent_hash) = writer.await.expect("bulk writer");
    (sent, sent_hash, n, crate::support::hex(&h.finalize()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_upgrades_under_load_close_nothing_lose_nothing_refuse_nobody() {
    let (a, b) = (Node::echo().await, Node::echo().await);
    let bin = Bin::new();
    // Probes at start-up only, so none is open while descriptors are counted.
    let yaml = config(&[a.addr, b.addr], "").replace("interval: 1s", "interval: 1h");
    let proxy = Proxy::start_from(bin.path(), &yaml, &[]).await;
    // Pipes it inherited (a build's jobserver), before any bulk transfer.
    let inherited_pipes = lent_pipes(proxy.pid());
    let addr = proxy.addr("p");

    let stop = Arc::new(AtomicBool::new(false));
    let mut pingers = Vec::new();
    for k in 0..PINGERS {
        let s = TcpStream::connect(addr).await.unwrap();
        pingers.push(tokio::spawn(ping_pong(s, k, stop.clone())));
    }
    let upgraded = Arc::new(AtomicBool::new(false));
    let mut bulks = Vec::new();
    for seed in 0..BULK as u64 {
        let s = TcpStream::connect(addr).await.unwrap();
        bulks.push(tokio::spawn(bulk(s, seed + 7, upgraded.clone())));
    }
    // New clients all along; `gate` lets the descriptor counts be read
    // while none of them is open.
    let gate = Arc::new(RwLock::new(()));
    let (served, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let newcomers = {
        let (stop, gate, served, refused) =
            (stop.clone(), gate.clone(), served.clone(), refused.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let _open = gate.read().await;
                let ok = async {
                    let mut s = TcpStream::connect(addr).await.ok()?;
                    s.write_all(b"hello").await.ok()?;
                    let mut got = [0u8; 5];
                    s.read_exact(&mut got).await.ok()?;
                    (&got == b"hello").then_some(())
                };
                match tokio::time::timeout(Duration::from_secs(10), ok).await {
                    Ok(Some(())) => served.fetch_add(1, Ordering::Relaxed),
                    _ => refused.fetch_add(1, Ordering::Relaxed),
                };
                drop(_open);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let live = PINGERS + BULK;
    wait_status(proxy.admin(), "every connection spliced", T, |st| {
        (st["pools"][0]["connections"] == live as u64).then_some(())
    })
    .await;
    let fds_before = {
        let _quiet = gate.write().await;
        fds(proxy.pid())
    };

    let mut pids = vec![proxy.pid()];
    let mut stalls = Vec::new();
    for i in 1..=UPGRADES {
        let t = Instant::now();
        let done = upgrade_ok(&proxy).await;
        stalls.push(t.elapsed());
        assert_eq!(done["generation"], i as u64);
        let adopted = proxy
            .wait_count(|e| e["message"] == "adopted", i, T)
            .await
            .remove(i - 1);
        // The pool's address and the admin endpoint's.
        assert_eq!(adopted["listeners"], 2, "{adopted}");
        assert_eq!(adopted["generation"], i as u64);
        // Every live one, and the newcomers caught connecting.
        assert!(
            done["connections"].as_u64().unwrap() as usize >= live,
            "{done}"
        );
        pids.push(proxy.live_pid());
    }
    upgraded.store(true, Ordering::Relaxed);

    let last = proxy.live_pid();
    let st = status(&proxy).await;
    assert_eq!(st["generation"], UPGRADES as u64);
    assert_eq!(st["pid"], last);
    for &old in &pids[..UPGRADES] {
        wait_exited(old).await;
    }
    assert!(!exited(last), "the last process serves");

    // Every bulk stream went through whole, both ways.
    for (i, h) in bulks.into_iter().enumerate() {
        let (sent, sent_hash, got, got_hash) = within("bulk stream", T * 4, h).await.unwrap();
        assert!(sent >= BULK_MIN, "bulk {i} sent only {sent}");
        assert_eq!(got, sent, "bulk {i}: bytes back");
        assert_eq!(got_hash, sent_hash, "bulk {i}: checksum");
    }
    let fds_after = {
        let _quiet = gate.write().await;
        fds(last)
    };
    let live_now = PINGERS;
    println!(
        "descriptors: before {fds_before} with {live} connections, after {UPGRADES} upgrades \
         {fds_after} with {live_now} (constant {} = {fds_after} - 2 x {live_now})",
        fds_after - 2 * live_now
    );
    // A leak of one descriptor per upgrade would show as 10; the slack
    // is for a probe or an admin connection caught closing.
    let drift = (fds_after as i64 - 2 * live_now as i64) - (fds_before as i64 - 2 * live as i64);
    assert!(
        drift.abs() <= 2,
        "descriptors = live connections x 2 + the same constant as before (drift {drift})"
    );
    // The last bulk splice may still be ending as its client saw EOF.
    wait_until("the bulk streams' pipes given back", T, || {
        lent_pipes(last) == inherited_pipes
    })
    .await;

    stop.store(true, Ordering::Relaxed);
    newcomers.await.unwrap();
    let mut pinged = Vec::new();
    for p in pingers {
        pinged.push(within("pinger", T, p).await.unwrap());
    }
    assert_eq!(
        refused.load(Ordering::Relaxed),
        0,
        "new clients refused or failed"
    );
    assert!(served.load(Ordering::Relaxed) > 0);
    assert!(pinged.iter().all(|p| p.rounds > 0));
    let worst = pinged.iter().map(|p| p.worst).max().unwrap();
    println!(
        "{UPGRADES} upgrades took {:?}; newcomers served {}; longest ping-pong stall {worst:?}",
        stalls,
        served.load(Ordering::Relaxed)
    );

    // Closed by nobody but the clients: every pinger's `closed` (logged by
    // the last process) carries the id its `accepted` got in the first.
    let clients: BTreeMap<String, ()> = pinged.iter().map(|p| (p.local.to_string(), ())).collect();
    let accepted: BTreeMap<String, u64> = proxy
        .named("accepted")
        .iter()
        .filter(|e| clients.contains_key(e["client"].as_str().unwrap_or("")))
        .map(|e| {
            (
                e["client"].as_str().unwrap().to_owned(),
                e["conn"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(accepted.len(), PINGERS);
    drop(pinged);
    let closed = proxy
        .wait_count(
            |e| {
                e["message"] == "closed" && clients.contains_key(e["client"].as_str().unwrap_or(""))
            },
            PINGERS,
            T,
        )
        .await;
    for e in &closed {
        let client = e["client"].as_str().unwrap();
        assert_eq!(
            e["conn"].as_u64(),
            accepted.get(client).copied(),
            "conn id of {client}: {e}"
        );
        assert_eq!(e["reason"], "client_closed", "{e}");
    }
    let others: Vec<_> = proxy
        .named("closed")
        .into_iter()
        .filter(|e| e["reason"] != "client_closed" && e["reason"] != "backend_closed")
        .collect();
    assert!(
        others.is_empty(),
        "connections closed by the proxy: {others:?}"
    );
}
