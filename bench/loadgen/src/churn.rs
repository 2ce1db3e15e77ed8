//! Connection churn: `concurrency` loops, each connecting, sending one
//! request, reading its echo and then either the backend's close (the echo
//! server runs with `--close-first`) or, with `client_closes`, closing at
//! once (a plain echo server); reports connections/s, the latency from
//! connect to close, and the proxy's CPU per connection. With several
//! targets, the loops take them in turn.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};

use crate::window::{self, Window};

/// One connection may take at most this long end to end.
const CONN_TIMEOUT: Duration = Duration::from_secs(5);

/// After a failed connection, pause this long so errors cannot spin.
const ERROR_PAUSE: Duration = Duration::from_millis(1);

/// One churn run.
#[derive(Debug, Clone)]
pub struct Params {
    /// Where to connect: loop `i` to target `i % targets.len()` (at
    /// least one).
    pub targets: Vec<SocketAddr>,
    /// Connections in flight at once.
    pub concurrency: usize,
    /// Request size in bytes.
    pub size: usize,
    /// Close after the echo instead of waiting for the backend's close.
    pub client_closes: bool,
    /// Unrecorded warm-up.
    pub warmup: Duration,
    /// Measured time.
    pub duration: Duration,
    /// Upper bound on connections per loop, whatever the duration.
    pub max_conns: u64,
    /// The proxy to meter.
    pub pid: Option<u32>,
}

struct LoopResult {
    hist: Histogram<u64>,
    errors: BTreeMap<String, u64>,
}

/// Run it and return the result as JSON.
///
/// # Errors
/// When the proxy cannot be read; failed connections are counted instead.
pub async fn run(p: Params) -> anyhow::Result<Value> {
    let win = Window::new(p.warmup, p.duration);
    let Some(&first) = p.targets.first() else {
        bail!("churn needs a target");
    };
    let mut set = JoinSet::new();
    for i in 0..p.concurrency {
        let target = p.targets[i % p.targets.len()];
        set.spawn(churn_loop(p.clone(), target, win));
    }
    let mut results = Vec::with_capacity(p.concurrency);
    // With `max_conns`, every loop may be done before the window ends:
    // then the run ends too (no CPU figure: the meter's window was cut).
    // Loops that stopped at the window's end may also finish a moment before
    // the meter's timer fires: the meter is then still read.
    let meter = win.meter(p.pid);
    tokio::pin!(meter);
    let (cpu, secs) = loop {
        tokio::select! {
            cpu = &mut meter => break (cpu?, win.secs()),
            r = set.join_next() => match r {
                Some(r) => results.push(r.context("churn task")?),
                None if Instant::now() >= win.end => break ((&mut meter).await?, win.secs()),
                None => break (None, Instant::now().saturating_duration_since(win.start).as_secs_f64()),
            },
        }
    };
    while let Some(r) = set.join_next().await {
        results.push(r.context("churn task")?);
    }
    let mut hist = window::histogram();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for r in results {
        hist.add(&r.hist).context("merge histograms")?;
        for (k, n) in r.errors {
            *errors.entry(k).or_default() += n;
        }
    }
    let conns = hist.len();
    let mut out = json!({
        "test": "churn", "target": first.to_string(), "concurrency": p.concurrency,
        "closes_first": if p.client_closes { "client" } else { "backend" },
        "secs": secs, "conns": conns,
        "conn_per_s": (conns as f64 / secs.max(1e-3)).round(),
        "errors": errors.values().sum::<u64>(), "error_kinds": errors,
    });
    if p.targets.len() > 1 {
        let all: Vec<String> = p.targets.iter().map(ToString::to_string).collect();
        window::merge(&mut out, json!({ "targets": all }));
    }
    window::merge(&mut out, window::percentiles(&hist));
    if let Some(cpu) = cpu {
        window::merge(
            &mut out,
            json!({ "proxy_cpu_s": cpu, "cpu_us_per_conn": window::per(cpu * 1e6, conns) }),
        );
    }
    Ok(out)
}

async fn churn_loop(p: Params, target: SocketAddr, win: Window) -> LoopResult {
    let mut r = LoopResult {
        hist: window::histogram(),
        errors: BTreeMap::new(),
    };
    let req: Vec<u8> = (0..p.size).map(|i| i as u8).collect();
    for _ in 0..p.max_conns {
        let t0 = Instant::now();
        if t0 >= win.end {
            break;
        }
        match timeout(CONN_TIMEOUT, one(target, &req, p.client_closes)).await {
            Ok(Ok(())) => {
                let t1 = Instant::now();
                if win.records(t1) {
                    window::record(&mut r.hist, t1 - t0);
                }
            }
            failed => {
                if win.records(Instant::now()) {
                    let kind = match failed {
                        Ok(Err(e)) => format!("{e:#}"),
                        _ => "timeout".to_owned(),
                    };
                    *r.errors.entry(kind).or_default() += 1;
                }
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
    r
}

/// Connect, send, read the echo, then close or expect the backend's close.
async fn one(target: SocketAddr, req: &[u8], client_closes: bool) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(target).await.context("connect")?;
    s.set_nodelay(true)?;
    s.write_all(req).await.context("send")?;
    let mut echo = vec![0u8; req.len()];
    s.read_exact(&mut echo).await.context("receive echo")?;
    if echo != req {
        bail!("echo differs from request");
    }
    if client_closes {
        // Dropping the stream closes it: our FIN goes first.
        return Ok(());
    }
    let mut rest = [0u8; 1];
    if s.read(&mut rest).await.context("await close")? != 0 {
        bail!("bytes after the echo");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::net::TcpListener;

    use super::*;

    /// An echo server on a fresh loopback port that counts what it accepts.
    async fn counting_echo() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(crate::echo::echo_plain(stream));
            }
        });
        (addr, accepted)
    }

    #[tokio::test]
    async fn the_loops_take_the_targets_in_turn() {
        let (a, at_a) = counting_echo().await;
        let (b, at_b) = counting_echo().await;
        let p = Params {
            targets: vec![a, b],
            concurrency: 3,
            size: 8,
            client_closes: true,
            warmup: Duration::ZERO,
            duration: Duration::from_secs(30),
            max_conns: 4,
            pid: None,
        };
        let out = run(p).await.unwrap();
        assert_eq!(out["conns"], 12, "{out}");
        assert_eq!(out["errors"], 0, "{out}");
        // Loops 0 and 2 go to a, loop 1 to b: 4 connections each.
        assert_eq!(at_a.load(Ordering::Relaxed), 8);
        assert_eq!(at_b.load(Ordering::Relaxed), 4);
        assert_eq!(out["targets"], json!([a.to_string(), b.to_string()]));
    }
}
