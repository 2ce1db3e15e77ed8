//! A spread drain under load: pin-proxy (the given binary) with one pool of
//! two echo backends, `a` and `b`. CONNS idle clients are held on `a`
//! (`b` is quarantined while they connect, then released) and PINGERS
//! connections on `b` do 64-byte ping-pong all along. Then `a` is
//! quarantined through the admin endpoint and pin-proxy closes its clients
//! over `health.drain_spread`; each redials at once and checks one 4-byte
//! echo, as real clients do. Reports how long the drain took (first close
//! to last), the most closes in any 100 ms, each client's gap from its
//! close to its echo on the new connection, failed redials, and the
//! pingers' longest round trip during the drain against before it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout_at};

use crate::admin::{self, free_port};
use crate::echo::round_trip;
use crate::idle;
use crate::procfs::{self, CpuMeter};
use crate::proxy::Proxy;
use crate::window;

/// Closes are counted in buckets this long.
const BUCKET: Duration = Duration::from_millis(100);

/// A failed redial waits this long before the next, at most this often.
const REDIAL_PAUSE: Duration = Duration::from_millis(100);
const REDIAL_TRIES: u32 = 20;

/// Everything must be over this long after the drain's planned end.
const AFTER: Duration = Duration::from_secs(30);

/// Connects in flight at once while the clients open.
const PARALLEL: usize = 64;

/// Admin requests and state changes wait at most this long.
const ADMIN_WAIT: Duration = Duration::from_secs(15);

/// Round trips recorded before the drain, over as long a window.
const BASELINE: Duration = Duration::from_secs(2);

/// What to run.
#[derive(Debug, clap::Args)]
pub struct Params {
    /// The pin-proxy binary.
    #[arg(long)]
    pub proxy: PathBuf,
    /// Idle clients on the drained backend.
    #[arg(long, default_value_t = 5000)]
    pub conns: usize,
    /// Ping-pong connections on the other backend.
    #[arg(long, default_value_t = 50)]
    pub pingers: usize,
    /// `health.drain_spread` (`500ms`, `10s`, `1m`).
    #[arg(long, default_value = "10s", value_parser = crate::interval)]
    pub spread: Duration,
    /// Pause between a pinger's round trips; `0s`: back to back.
    #[arg(long, default_value = "0s", value_parser = crate::interval)]
    pub ping_gap: Duration,
    /// Run the proxy under `taskset -c CPUS`.
    #[arg(long)]
    pub proxy_cpus: Option<String>,
}

/// Run it and return the result as JSON.
///
/// # Errors
/// When the proxy does not start or its admin endpoint does not answer,
/// or clients land on the wrong backend; failed redials are counted.
pub async fn run(p: Params) -> anyhow::Result<Value> {
    // Client sockets and the backends' sockets are all in this process.
    let need = 2 * (p.conns + p.pingers) as u64 + 64;
    procfs::need_open_files(std::process::id(), need, "loadgen drain", "--conns")?;
    let (a, b) = (echo_backend().await?, echo_backend().await?);
    let (admin, listen) = (free_port()?, free_port()?);
    let config = format!(
        "admin: {{ listen: \"{admin}\" }}\n\
         log: {{ level: \"info,pin_proxy::net=warn\", format: json }}\n\
         pools:\n  - name: p\n    listen: \"{listen}\"\n    max_connections: 100000\n    \
         rebalance: {{ interval: 0s }}\n    \
         health: {{ probe: connect, interval: 1s, drain_spread: {}ms }}\n    \
         backends: [{{ name: a, addr: \"{a}\" }}, {{ name: b, addr: \"{b}\" }}]\n",
        p.spread.as_millis()
    );
    let mut proxy = Proxy::start(&p.proxy, &config, "drain", p.proxy_cpus.as_deref())?;
    proxy.wait_for("ready", 1, Duration::from_secs(30)).await?;
    let ctl = Admin(admin);
    ctl.post("/pools/p/backends/b/quarantine?for=10m").await?;
    let (held, failed_to_open) = open_all(listen, p.conns).await;
    ctl.wait_until("a", "connections", json!(held.len()))
        .await?;
    ctl.post("/pools/p/backends/b/release").await?;
    ctl.wait_until("b", "state", json!("healthy")).await?;

    // On `b` now: the least used, by all of `a`'s connections.
    let phase = Arc::new(AtomicUsize::new(Phase::Setup as usize));
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + BASELINE + p.spread + AFTER;
    let mut pingers = JoinSet::new();
    for _ in 0..p.pingers {
        let mut s = TcpStream::connect(listen)
            .await
            .context("connect a pinger")?;
        s.set_nodelay(true)?;
        round_trip(&mut s)
            .await
            .context("a pinger's first round trip")?;
        let pinger = Pinger {
            phase: phase.clone(),
            stop: stop.clone(),
            gap: p.ping_gap,
            deadline,
        };
        pingers.spawn(pinger.run(s));
    }
    ctl.wait_until("b", "connections", json!(p.pingers)).await?;

    let mut watchers = JoinSet::new();
    for (n, s) in held.into_iter().enumerate() {
        watchers.spawn(watch(s, n as u32, listen, deadline));
    }
    phase.store(Phase::Baseline as usize, Ordering::Relaxed);
    sleep(BASELINE).await;
    phase.store(Phase::Drain as usize, Ordering::Relaxed);
    let cpu = CpuMeter::start(Some(proxy.pid))?;
    let quarantined = Instant::now();
    ctl.post("/pools/p/backends/a/quarantine?for=10m").await?;
    let mut watched = Vec::new();
    while let Some(w) = watchers.join_next().await {
        watched.push(w.context("drain watcher")?);
    }
    phase.store(Phase::After as usize, Ordering::Relaxed);
    let proxy_cpu_s = cpu.stop()?;
    stop.store(true, Ordering::Relaxed);
    let mut ping = [window::histogram(), window::histogram()];
    while let Some(h) = pingers.join_next().await {
        let [base, drain] = h.context("pinger")?.context("a pinger failed")?;
        ping[0].add(&base).context("merge histograms")?;
        ping[1].add(&drain).context("merge histograms")?;
    }
    let status: Vec<Value> = ctl
        .backends()
        .await?
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| json!({ "name": b["name"], "state": b["state"], "connections": b["connections"] }))
        .collect();
    // The proxy's own account: what it planned and how long it took.
    let drained: Vec<Value> = proxy
        .events("drained")
        .iter()
        .map(|e| json!({ "phase": e["phase"], "connections": e["connections"], "duration_ms": e["duration_ms"] }))
        .collect();
    let mut out = report(&p, quarantined, &watched, &ping);
    window::merge(
        &mut out,
        json!({
            "failed_to_open": failed_to_open, "proxy_cpu_s": proxy_cpu_s,
            "drained_events": drained, "backends_after": status,
        }),
    );
    Ok(out)
}

/// What the pingers are recording: their round trips go to the histogram
/// of the phase in which they end.
#[derive(Clone, Copy)]
enum Phase {
    Setup,
    Baseline,
    Drain,
    After,
}

/// One idle client's drain: when it saw its close, when its redial
/// echoed, how many redials failed before.
struct Watched {
    closed: Option<Instant>,
    /// How it closed: `eof`, or the read error.
    how: Option<String>,
    reopened: Option<Instant>,
    failed_redials: u32,
    /// The new connection, held until the end.
    _stream: Option<TcpStream>,
}

async fn watch(mut s: TcpStream, n: u32, target: SocketAddr, deadline: Instant) -> Watched {
    let mut w = Watched {
        closed: None,
        how: None,
        reopened: None,
        failed_redials: 0,
        _stream: None,
    };
    let mut byte = [0u8; 1];
    let how = match timeout_at(deadline, s.read(&mut byte)).await {
        Err(_) => return w,
        Ok(Ok(0)) => "eof".to_owned(),
        Ok(Ok(_)) => "bytes on an idle connection".to_owned(),
        Ok(Err(e)) => e.kind().to_string(),
    };
    w.closed = Some(Instant::now());
    w.how = Some(how);
    drop(s);
    for _ in 0..REDIAL_TRIES {
        if let Ok(Ok(s)) = timeout_at(deadline, idle::open(target, n)).await {
            w.reopened = Some(Instant::now());
            w._stream = Some(s);
            return w;
        }
        w.failed_redials += 1;
        if Instant::now() + REDIAL_PAUSE >= deadline {
            break;
        }
        sleep(REDIAL_PAUSE).await;
    }
    w
}

fn report(
    p: &Params,
    quarantined: Instant,
    watched: &[Watched],
    ping: &[Histogram<u64>; 2],
) -> Value {
    let mut closes: Vec<Instant> = watched.iter().filter_map(|w| w.closed).collect();
    closes.sort_unstable();
    let (first, last) = (closes.first().copied(), closes.last().copied());
    let ms = |d: Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
    let mut buckets: Vec<u64> = Vec::new();
    let mut per_s: Vec<u64> = Vec::new();
    // The longest wait between two closes: a drain clock that stalled.
    let pause = closes
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    if let Some(first) = first {
        for &c in &closes {
            let since = c - first;
            let b = (since.as_nanos() / BUCKET.as_nanos()) as usize;
            let s = since.as_secs() as usize;
            grow(&mut buckets, b);
            grow(&mut per_s, s);
        }
    }
    let mut gap = window::histogram();
    for w in watched {
        if let (Some(c), Some(r)) = (w.closed, w.reopened) {
            window::record(&mut gap, r - c);
        }
    }
    let eof = watched
        .iter()
        .filter(|w| w.how.as_deref() == Some("eof"))
        .count();
    let planned_per_bucket =
        p.conns as f64 * BUCKET.as_secs_f64() / p.spread.as_secs_f64().max(1e-9);
    let mut out = json!({
        "test": "drain", "conns": p.conns, "pingers": p.pingers,
        "spread_ms": p.spread.as_millis() as u64,
        "closed": closes.len(), "closed_eof": eof, "closed_other": closes.len() - eof,
        "not_closed": watched.len() - closes.len(),
        "reopened": watched.iter().filter(|w| w.reopened.is_some()).count(),
        "redials_failed": watched.iter().map(|w| u64::from(w.failed_redials)).sum::<u64>(),
        "never_reopened": watched.iter().filter(|w| w.closed.is_some() && w.reopened.is_none()).count(),
        "first_close_ms": first.map(|f| ms(f - quarantined)),
        "drain_ms": first.zip(last).map(|(f, l)| ms(l - f)),
        "max_closes_per_100ms": buckets.iter().max().copied().unwrap_or(0),
        "planned_closes_per_100ms": (planned_per_bucket * 10.0).round() / 10.0,
        "closes_per_s": per_s, "closes_per_100ms": buckets,
        "max_close_pause_ms": ms(pause),
        "ping_baseline_max_us": us(ping[0].max()), "ping_baseline_p99_us": us(ping[0].value_at_quantile(0.99)),
        "ping_drain_max_us": us(ping[1].max()), "ping_drain_p99_us": us(ping[1].value_at_quantile(0.99)),
        "ping_rounds": ping[0].len() + ping[1].len(),
    });
    let gaps = window::percentiles(&gap);
    window::merge(
        &mut out,
        json!({ "gap_p50_us": gaps["p50_us"], "gap_p99_us": gaps["p99_us"], "gap_max_us": gaps["max_us"] }),
    );
    out
}

fn grow(counts: &mut Vec<u64>, i: usize) {
    if counts.len() <= i {
        counts.resize(i + 1, 0);
    }
    counts[i] += 1;
}

fn us(ns: u64) -> f64 {
    (ns as f64 / 10.0).round() / 100.0
}

/// A pinger: round trips back to back (or `gap` apart) until told to stop.
struct Pinger {
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    gap: Duration,
    deadline: Instant,
}

impl Pinger {
    /// Round trips ending in the baseline and in the drain, in two histograms.
    async fn run(self, mut s: TcpStream) -> anyhow::Result<[Histogram<u64>; 2]> {
        let mut h = [window::histogram(), window::histogram()];
        // At most one round trip a microsecond over the whole run.
        let max = (self.deadline - Instant::now()).as_micros() as u64;
        for _ in 0..max {
            if self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline {
                break;
            }
            let t = Instant::now();
            timeout_at(self.deadline, round_trip(&mut s))
                .await
                .context("round trip unanswered at the deadline")??;
            let phase = self.phase.load(Ordering::Relaxed);
            if phase == Phase::Baseline as usize {
                window::record(&mut h[0], t.elapsed());
            } else if phase == Phase::Drain as usize {
                window::record(&mut h[1], t.elapsed());
            }
            if !self.gap.is_zero() {
                sleep(self.gap).await;
            }
        }
        Ok(h)
    }
}

/// Open `n` idle clients, each checked with one echo: those held, and how
/// many failed.
async fn open_all(target: SocketAddr, n: usize) -> (Vec<TcpStream>, u64) {
    let (mut held, mut failed) = (Vec::with_capacity(n), 0);
    let mut set = JoinSet::new();
    let mut next = 0;
    while next < n || !set.is_empty() {
        while next < n && set.len() < PARALLEL {
            set.spawn(idle::open(target, next as u32));
            next += 1;
        }
        match set.join_next().await {
            Some(Ok(Ok(s))) => held.push(s),
            Some(_) => failed += 1,
            None => break,
        }
    }
    (held, failed)
}

/// An in-process echo backend on a free loopback port.
async fn echo_backend() -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(crate::echo::echo_plain(s));
        }
    });
    Ok(addr)
}

/// The pool's admin endpoint.
struct Admin(SocketAddr);

impl Admin {
    async fn post(&self, path: &str) -> anyhow::Result<Value> {
        admin::request(self.0, "POST", path, ADMIN_WAIT).await
    }

    /// Pool `p`'s backends as `/status` lists them.
    async fn backends(&self) -> anyhow::Result<Value> {
        let status = admin::request(self.0, "GET", "/status", ADMIN_WAIT).await?;
        Ok(status["pools"][0]["backends"].clone())
    }

    /// Wait (bounded) until backend `name`'s `field` in `/status` is `want`.
    async fn wait_until(&self, name: &str, field: &str, want: Value) -> anyhow::Result<()> {
        let deadline = Instant::now() + ADMIN_WAIT;
        loop {
            let backends = self.backends().await?;
            let got = backends
                .as_array()
                .and_then(|bs| bs.iter().find(|b| b["name"] == name))
                .map(|b| b[field].clone())
                .unwrap_or(Value::Null);
            if got == want {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("backend {name}: {field} is {got}, not {want}, after {ADMIN_WAIT:?}");
            }
            sleep(Duration::from_millis(50)).await;
        }
    }
}
