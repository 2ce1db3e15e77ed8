//! Ping-pong: each connection sends `size` bytes, waits for the echo, and
//! records the round trip; reports latency percentiles, requests/s and the
//! proxy's CPU per request.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::procfs;
use crate::window::{self, Window};

/// One ping-pong run.
#[derive(Debug, Clone)]
pub struct Params {
    /// Where to connect (the proxy, or the echo server directly).
    pub target: SocketAddr,
    /// Connections, each with one request in flight.
    pub conns: usize,
    /// Request size in bytes.
    pub size: usize,
    /// Warm-up and measured window.
    pub warmup: Duration,
    /// Measured time.
    pub duration: Duration,
    /// Upper bound on requests per connection, whatever the duration.
    pub max_requests: u64,
    /// The proxy to meter.
    pub pid: Option<u32>,
}

/// Run it and return the result as JSON.
///
/// # Errors
/// When a connection cannot be made or breaks, or the proxy cannot be read.
pub async fn run(p: Params) -> anyhow::Result<Value> {
    let sets_before = p.pid.map(procfs::poll_sets).transpose()?;
    let mut streams = Vec::with_capacity(p.conns);
    for _ in 0..p.conns {
        let s = TcpStream::connect(p.target)
            .await
            .with_context(|| format!("connect to {}", p.target))?;
        s.set_nodelay(true)?;
        streams.push(s);
    }
    let threads_before = p.pid.map(procfs::thread_cpu).transpose()?;
    let win = Window::new(p.warmup, p.duration);
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|s| tokio::spawn(conn_loop(s, p.size, win, p.max_requests)))
        .collect();
    // How the proxy spread these connections over its event loops (each
    // connection adds its two sockets to one loop's epoll set), read once
    // the warm-up is over and every connection has reached its loop.
    let split = async {
        tokio::time::sleep_until(win.start).await;
        match (p.pid, &sets_before) {
            (Some(pid), Some(before)) => {
                procfs::poll_sets(pid).map(|after| Some(procfs::loop_split(before, &after)))
            }
            _ => Ok(None),
        }
    };
    let (cpu, split) = tokio::join!(win.meter(p.pid), split);
    let (cpu, split) = (cpu?, split?);
    let threads = match (p.pid, &threads_before) {
        // Warm-up included: the split of the load, not its amount.
        (Some(pid), Some(before)) => Some(procfs::thread_delta(
            before,
            &procfs::thread_cpu(pid)?,
            0.01,
        )),
        _ => None,
    };
    let mut hist = window::histogram();
    for t in tasks {
        let h = t.await.context("ping-pong task")??;
        hist.add(&h).context("merge histograms")?;
    }
    let requests = hist.len();
    let mut out = json!({
        "test": "pingpong", "target": p.target.to_string(), "conns": p.conns,
        "size": p.size, "secs": win.secs(), "requests": requests,
        "rps": (requests as f64 / win.secs()).round(),
    });
    window::merge(&mut out, window::percentiles(&hist));
    if let Some(split) = split {
        window::merge(&mut out, json!({ "loop_conns": split }));
    }
    if let Some(threads) = threads {
        window::merge(&mut out, json!({ "thread_cpu_s": threads }));
    }
    if let Some(cpu) = cpu {
        window::merge(
            &mut out,
            json!({ "proxy_cpu_s": cpu, "cpu_us_per_req": window::per(cpu * 1e6, requests) }),
        );
    }
    Ok(out)
}

async fn conn_loop(
    mut s: TcpStream,
    size: usize,
    win: Window,
    max_requests: u64,
) -> anyhow::Result<Histogram<u64>> {
    let mut hist = window::histogram();
    let ping: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut pong = vec![0u8; size];
    for _ in 0..max_requests {
        let t0 = Instant::now();
        if t0 >= win.end {
            break;
        }
        s.write_all(&ping).await.context("send")?;
        s.read_exact(&mut pong).await.context("receive echo")?;
        let t1 = Instant::now();
        if pong != ping {
            bail!("echo differs from request");
        }
        if win.records(t1) {
            window::record(&mut hist, t1 - t0);
        }
    }
    Ok(hist)
}
