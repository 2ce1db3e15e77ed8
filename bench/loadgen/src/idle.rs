//! Idle connections: open them through the proxy in steps, verify each with
//! one echo round trip, hold them, and read the proxy's RSS and CPU at every
//! step, and how fast the step's connections opened; at the end check every
//! held connection still echoes, then close.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};

use crate::procfs::{self, CpuMeter};
use crate::window;

/// One connect plus its echo round trip may take at most this long.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Let the proxy finish its bookkeeping before reading its RSS.
const SETTLE: Duration = Duration::from_millis(500);

/// One idle run.
#[derive(Debug, Clone)]
pub struct Params {
    /// Where to connect (the proxy).
    pub target: SocketAddr,
    /// Connections held at the end.
    pub count: usize,
    /// Intermediate counts to report on the way (e.g. 1000, 2500).
    pub steps: Vec<usize>,
    /// Connects in flight at once while opening.
    pub parallel: usize,
    /// How long to hold at each step while metering the proxy's idle CPU.
    pub hold: Duration,
    /// The proxy to read.
    pub pid: u32,
}

/// Run it and return the result as JSON (a row per step).
///
/// # Errors
/// When the proxy cannot be read; failed connections are counted instead.
pub async fn run(p: Params) -> anyhow::Result<Value> {
    let mut steps: Vec<usize> = p.steps.iter().copied().filter(|&n| n < p.count).collect();
    steps.push(p.count);
    steps.sort_unstable();
    steps.dedup();
    let rss0 = procfs::rss_kib(p.pid)?;
    let setup = CpuMeter::start(Some(p.pid))?;
    let mut held: Vec<TcpStream> = Vec::with_capacity(p.count);
    let mut failed = 0u64;
    let mut first_error = None;
    let mut rows = Vec::new();
    for &n in &steps {
        let mut set = JoinSet::new();
        let (ramp_start, held_before) = (Instant::now(), held.len());
        // The rate counts up to the last connection that opened: one that
        // waits out its timeout (a proxy at its limit) is counted as failed.
        let mut last_open = ramp_start;
        let mut next = held.len() + failed as usize;
        while next < n || !set.is_empty() {
            while next < n && set.len() < p.parallel {
                set.spawn(open(p.target, next as u32));
                next += 1;
            }
            match set.join_next().await {
                Some(Ok(Ok(s))) => {
                    held.push(s);
                    last_open = Instant::now();
                }
                Some(Ok(Err(e))) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| format!("{e:#}"));
                }
                Some(Err(e)) => return Err(e).context("open task"),
                None => break,
            }
        }
        let ramp_s = (last_open - ramp_start).as_secs_f64();
        let opened = held.len() - held_before;
        tokio::time::sleep(SETTLE).await;
        let rss = procfs::rss_kib(p.pid)?;
        let setup_cpu = setup.stop()?.unwrap_or(0.0);
        let idle = CpuMeter::start(Some(p.pid))?;
        tokio::time::sleep(p.hold).await;
        let idle_cpu = idle.stop()?.unwrap_or(0.0);
        let delta = rss.saturating_sub(rss0);
        let row = json!({
            "held": held.len(), "rss_kib": rss, "rss_delta_kib": delta,
            "kib_per_conn": window::per(delta as f64, held.len() as u64),
            "setup_cpu_s": setup_cpu,
            "setup_cpu_us_per_conn": window::per(setup_cpu * 1e6, held.len() as u64),
            "idle_cpu_pct": (idle_cpu / p.hold.as_secs_f64() * 1000.0).round() / 10.0,
            "ramp_conn_per_s": (opened as f64 / ramp_s.max(1e-9)).round(),
            "failed_to_open": failed,
        });
        eprintln!("idle: {row}");
        rows.push(row);
    }
    let (alive, dead) = recheck(&mut held).await;
    let last = rows.last().cloned().unwrap_or(Value::Null);
    let mut out = json!({
        "test": "idle", "target": p.target.to_string(), "rss_before_kib": rss0,
        "failed_to_open": failed, "first_error": first_error,
        "alive_after_hold": alive, "dead_after_hold": dead, "steps": rows,
    });
    window::merge(&mut out, last);
    drop(held);
    Ok(out)
}

/// Connect and check one echo round trip carrying the connection's number.
pub async fn open(target: SocketAddr, n: u32) -> anyhow::Result<TcpStream> {
    timeout(OPEN_TIMEOUT, async {
        let mut s = TcpStream::connect(target).await.context("connect")?;
        s.set_nodelay(true)?;
        round_trip(&mut s, n).await?;
        Ok(s)
    })
    .await
    .context("open timed out")?
}

async fn round_trip(s: &mut TcpStream, n: u32) -> anyhow::Result<()> {
    let ping = n.to_be_bytes();
    s.write_all(&ping).await.context("send")?;
    let mut pong = [0u8; 4];
    s.read_exact(&mut pong).await.context("receive echo")?;
    if pong != ping {
        bail!("echo differs from request");
    }
    Ok(())
}

/// After the last measurement: does every held connection still echo?
async fn recheck(held: &mut [TcpStream]) -> (u64, u64) {
    let (mut alive, mut dead) = (0, 0);
    for (i, s) in held.iter_mut().enumerate() {
        match timeout(OPEN_TIMEOUT, round_trip(s, i as u32)).await {
            Ok(Ok(())) => alive += 1,
            _ => dead += 1,
        }
    }
    (alive, dead)
}
