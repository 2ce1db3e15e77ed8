//! The soak's traffic: long-lived streams that check every byte they get
//! back, connection churn, and hostile clients. Every loop ends at the
//! soak's deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Shared;

/// How long a stream waits for its echo before it calls it stalled (a
/// frozen backend is thawed, or drained, long before).
const ECHO_TIMEOUT: Duration = Duration::from_secs(60);

/// The byte at offset `off` of stream `seed`: a position-dependent
/// pattern, so a lost, duplicated or reordered byte shows.
fn byte_at(seed: u64, off: u64) -> u8 {
    let x = (seed ^ off.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8
}

/// How a stream's connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum How {
    /// The soak ended it.
    Ours,
    /// The proxy or the backend closed it (EOF or an error) with every
    /// byte so far echoed exactly.
    Closed(String),
    /// A byte came back that was not the one sent there.
    Mismatch { at: u64 },
    /// No echo within [`ECHO_TIMEOUT`].
    Stalled,
}

/// One connection of a long-lived stream.
#[derive(Debug, Clone)]
pub struct StreamEnd {
    /// The client's own address: the proxy's `client` for it.
    pub local: SocketAddr,
    pub started: SystemTime,
    pub ended: SystemTime,
    pub how: How,
}

/// Counters of the traffic.
#[derive(Debug, Default)]
pub struct Traffic {
    pub stream_conns: AtomicU64,
    pub verified_bytes: AtomicU64,
    pub connect_failures: AtomicU64,
    pub churned: AtomicU64,
    pub churn_failed: AtomicU64,
    pub churn_mismatch: AtomicU64,
    pub hostile: AtomicU64,
}

/// Stream `id` until `deadline`: connect, then rounds of a chunk sent and
/// its echo checked, a pause between; reconnect when it ends.
pub async fn stream(id: u64, shared: Arc<Shared>, deadline: Instant) -> Vec<StreamEnd> {
    let mut ends = Vec::new();
    let mut rng = fastrand::Rng::with_seed(id);
    let mut buf = vec![0u8; 4096];
    let mut back = vec![0u8; 4096];
    // Spread the first connects over a second.
    tokio::time::sleep(Duration::from_millis(rng.u64(0..1000))).await;
    let mut generation = 0u64;
    while Instant::now() < deadline {
        let Ok(mut s) = TcpStream::connect(shared.listen).await else {
            shared
                .traffic
                .connect_failures
                .fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let Ok(local) = s.local_addr() else { continue };
        shared.traffic.stream_conns.fetch_add(1, Ordering::Relaxed);
        generation += 1;
        let seed = id << 32 | generation;
        let started = SystemTime::now();
        let how = rounds(
            &mut s,
            seed,
            &mut rng,
            (&mut buf, &mut back),
            &shared,
            deadline,
        )
        .await;
        ends.push(StreamEnd {
            local,
            started,
            ended: SystemTime::now(),
            how,
        });
    }
    ends
}

async fn rounds(
    s: &mut TcpStream,
    seed: u64,
    rng: &mut fastrand::Rng,
    (buf, back): (&mut [u8], &mut [u8]),
    shared: &Shared,
    deadline: Instant,
) -> How {
    let mut off = 0u64;
    loop {
        if Instant::now() >= deadline {
            return How::Ours;
        }
        let n = rng.usize(1..=buf.len());
        for (i, b) in buf[..n].iter_mut().enumerate() {
            *b = byte_at(seed, off + i as u64);
        }
        if let Err(e) = s.write_all(&buf[..n]).await {
            return How::Closed(format!("write: {e}"));
        }
        let mut got = 0;
        while got < n {
            let read = tokio::time::timeout(ECHO_TIMEOUT, s.read(&mut back[..n - got])).await;
            let k = match read {
                Err(_) => return How::Stalled,
                Ok(Err(e)) => return How::Closed(format!("read: {e}")),
                Ok(Ok(0)) => return How::Closed("EOF".into()),
                Ok(Ok(k)) => k,
            };
            for (i, &b) in back[..k].iter().enumerate() {
                let at = off + (got + i) as u64;
                if b != byte_at(seed, at) {
                    return How::Mismatch { at };
                }
            }
            got += k;
        }
        off += n as u64;
        shared
            .traffic
            .verified_bytes
            .fetch_add(2 * n as u64, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(rng.u64(200..2000))).await;
    }
}

/// `per_s` short connections a second until `deadline`: 64 bytes sent,
/// their echo checked, closed.
pub async fn churn(shared: Arc<Shared>, per_s: u32, deadline: Instant) {
    if per_s == 0 {
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_secs(1) / per_s);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut n = 0u64;
    while Instant::now() < deadline {
        tick.tick().await;
        n += 1;
        let shared = shared.clone();
        tokio::spawn(async move {
            let t = &shared.traffic;
            let msg: Vec<u8> = (0..64).map(|i| byte_at(n, i)).collect();
            let once = async {
                let mut s = TcpStream::connect(shared.listen).await?;
                s.write_all(&msg).await?;
                let mut got = [0u8; 64];
                s.read_exact(&mut got).await?;
                std::io::Result::Ok(got)
            };
            match tokio::time::timeout(Duration::from_secs(30), once).await {
                Ok(Ok(got)) if got[..] == msg[..] => t.churned.fetch_add(1, Ordering::Relaxed),
                Ok(Ok(_)) => t.churn_mismatch.fetch_add(1, Ordering::Relaxed),
                _ => t.churn_failed.fetch_add(1, Ordering::Relaxed),
            };
        });
    }
}

/// `per_s` hostile clients a second until `deadline`: random bytes, then
/// a reset; every third says nothing and is reset at once.
pub async fn hostile(shared: Arc<Shared>, per_s: u32, deadline: Instant) {
    if per_s == 0 {
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_secs(1) / per_s);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut rng = fastrand::Rng::with_seed(7);
    while Instant::now() < deadline {
        tick.tick().await;
        let len = if rng.u8(0..3) == 0 {
            0
        } else {
            rng.usize(1..512)
        };
        let garbage: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
        let shared = shared.clone();
        tokio::spawn(async move {
            let attempt = async {
                let mut s = TcpStream::connect(shared.listen).await?;
                s.write_all(&garbage).await?;
                s.set_zero_linger()?;
                std::io::Result::Ok(())
            };
            let _ = tokio::time::timeout(Duration::from_secs(10), attempt).await;
            shared.traffic.hostile.fetch_add(1, Ordering::Relaxed);
        });
    }
}

/// P2P-shaped load on `target` until `deadline`: `conns` connections
/// opened afresh for each window of up to 20 s (a cold restart ends one
/// window's connections, not the load); each window's result.
pub async fn p2p(target: SocketAddr, conns: usize, deadline: Instant) -> Vec<serde_json::Value> {
    let mut windows = Vec::new();
    if conns == 0 {
        return windows;
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // Ramp, a second of warm-up and the window, ended 2 s before the
        // deadline.
        let Some(window) = left.checked_sub(Duration::from_secs(9)) else {
            return windows;
        };
        let p = crate::p2p::Params {
            target,
            conns,
            ramp: 1000.0,
            // Each connection has until the window to connect and get
            // the backend's hello: 5 s, through an upgrade's handover.
            warmup: Duration::from_secs(5),
            duration: window.min(Duration::from_secs(20)),
            shape: crate::p2p::Shape {
                min_gap: Duration::from_millis(500),
                max_gap: Duration::from_secs(2),
                min_size: 100,
                max_size: 300,
            },
            pid: None,
            server_pid: None,
            timeline: None,
        };
        let from = SystemTime::now();
        let mut v = match crate::p2p::run(p).await {
            Ok(v) => v,
            Err(e) => serde_json::json!({ "failed": format!("{e:#}") }),
        };
        let unix = |t: SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        v["soak_from"] = unix(from).into();
        v["soak_to"] = unix(SystemTime::now()).into();
        windows.push(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_depends_on_the_position() {
        let a: Vec<u8> = (0..64).map(|i| byte_at(1, i)).collect();
        let b: Vec<u8> = (1..65).map(|i| byte_at(1, i)).collect();
        assert_ne!(a, b, "a shifted stream reads differently");
        assert_ne!(a, (0..64).map(|i| byte_at(2, i)).collect::<Vec<u8>>());
    }
}
