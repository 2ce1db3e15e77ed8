//! `loadgen p2p`: open CONNS connections at a bounded rate, each waiting
//! for the backend's hello, then let every connection send stamped pings
//! on its own random schedule while the backend sends its announcements.
//! Over the recorded window: round trip of every ping sent in it, one-way
//! delay of every announcement received in it, messages, errors, and the
//! CPU of the proxy, this process and the backend.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until, timeout_at};

use super::Shape;
use super::frame::{self, Kind, Reader};
use super::stalls::Pings;
use crate::procfs::{self, CpuMeter};
use crate::window::{self, Window};

/// A connection must be open and greeted within this long...
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// ...and keeps reading this long after the window, for the echoes of
/// pings sent at its end.
const GRACE: Duration = Duration::from_secs(2);

/// Descriptors beyond one per connection (runtime, stdio, /proc reads).
const FD_SLACK: u64 = 64;

/// One P2P run.
#[derive(Debug, Clone, clap::Args)]
pub struct Params {
    /// Where to connect (a proxy, or the backend directly).
    #[arg(long)]
    pub target: SocketAddr,
    /// Connections held.
    #[arg(long, default_value_t = 9000)]
    pub conns: usize,
    /// Connections opened per second during the ramp.
    #[arg(long, default_value_t = 1000.0)]
    pub ramp: f64,
    /// Unrecorded time between the ramp's end and the window (`2s`).
    #[arg(long, default_value = "2s", value_parser = crate::interval)]
    pub warmup: Duration,
    /// Recorded time (`60s`, `1m`; plain numbers are seconds).
    #[arg(long = "secs", value_name = "SECS", default_value = "60s", value_parser = crate::interval)]
    pub duration: Duration,
    #[command(flatten)]
    pub shape: Shape,
    /// The proxy to meter (and whose open-file limit to check).
    #[arg(long)]
    pub pid: Option<u32>,
    /// The backend process (`p2p-server`) to meter.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Write the window's timeline here: per 10 ms of send time, the pings
    /// sent, how many were slow, the worst round trip and whether it was a
    /// stall (see `stalls.rs`).
    #[arg(long)]
    pub timeline: Option<std::path::PathBuf>,
}

/// What every connection records into.
struct Shared {
    /// The recorded window on the monotonic clock, ns.
    start_ns: u64,
    end_ns: u64,
    /// The round-trip histogram, and every ping by send time for the stalls.
    rtt: Mutex<(Histogram<u64>, Pings)>,
    oneway: Mutex<Histogram<u64>>,
    sent: AtomicU64,
    echoed: AtomicU64,
    announced: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Shared {
    fn in_window(&self, ns: u64) -> bool {
        ns >= self.start_ns && ns < self.end_ns
    }

    fn error(&self, e: &anyhow::Error) {
        *lock(&self.errors).entry(format!("{e:#}")).or_default() += 1;
    }
}

/// A poisoned lock only means another task panicked mid-record: the
/// counts are still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Run it and return the result as JSON.
///
/// # Errors
/// Too few file descriptors for the connections, or a process that cannot
/// be read; failed connections are counted instead.
pub async fn run(p: Params) -> anyhow::Result<Value> {
    check_fds(&p)?;
    if p.ramp.is_nan() || p.ramp <= 0.0 {
        bail!("--ramp must be above 0 connections per second");
    }
    let ramp = Duration::from_secs_f64(p.conns as f64 / p.ramp);
    let win = Window::new(ramp + p.warmup, p.duration);
    let (base, base_ns) = (Instant::now(), frame::now_ns());
    let ns_at = |at: Instant| base_ns + (at - base).as_nanos() as u64;
    let shared = Arc::new(Shared {
        start_ns: ns_at(win.start),
        end_ns: ns_at(win.end),
        rtt: Mutex::new((window::histogram(), Pings::default())),
        oneway: Mutex::new(window::histogram()),
        sent: AtomicU64::new(0),
        echoed: AtomicU64::new(0),
        announced: AtomicU64::new(0),
        errors: Mutex::new(BTreeMap::new()),
    });
    // Sends per connection stop here whatever the clock says.
    let total = ramp + p.warmup + p.duration;
    let max_sends = (total.as_secs_f64() / p.shape.min_gap.as_secs_f64().max(1e-3)) as u64 + 2;

    let (ready_tx, mut ready_rx) = mpsc::channel(p.conns.max(1));
    let mut tasks = Vec::with_capacity(p.conns);
    let t0 = Instant::now();
    for i in 0..p.conns {
        sleep_until(t0 + Duration::from_secs_f64(i as f64 / p.ramp)).await;
        let c = Conn {
            target: p.target,
            shape: p.shape,
            win,
            max_sends,
            shared: shared.clone(),
        };
        tasks.push(tokio::spawn(c.run(ready_tx.clone())));
    }
    drop(ready_tx);
    let ramp_s = t0.elapsed().as_secs_f64();
    let (mut established, mut connect_errors) = (0u64, BTreeMap::<String, u64>::new());
    while let Ok(Some(outcome)) = timeout_at(win.start, ready_rx.recv()).await {
        match outcome {
            Ok(()) => established += 1,
            Err(e) => *connect_errors.entry(e).or_default() += 1,
        }
    }
    let missing = p.conns as u64 - established - connect_errors.values().sum::<u64>();
    if missing > 0 {
        *connect_errors
            .entry("not established before the window".to_owned())
            .or_default() += missing;
    }
    eprintln!("p2p: {established} of {} connections established", p.conns);

    sleep_until(win.start).await;
    let me = Some(std::process::id());
    let meters = [
        CpuMeter::start(p.pid)?,
        CpuMeter::start(me)?,
        CpuMeter::start(p.server_pid)?,
    ];
    sleep_until(win.end).await;
    let [proxy, client, server] = meters.map(|m| m.stop());
    for t in tasks {
        t.await.context("p2p connection task")?;
    }

    let secs = win.secs();
    let pct = |cpu: anyhow::Result<Option<f64>>| -> anyhow::Result<Option<f64>> {
        Ok(cpu?.map(|s| (s / secs * 1000.0).round() / 10.0))
    };
    let (sent, echoed) = (load(&shared.sent), load(&shared.echoed));
    let announced = load(&shared.announced);
    let errors = lock(&shared.errors).clone();
    let rtt = lock(&shared.rtt);
    let stalls = rtt.1.summary(p.timeline.as_deref())?;
    let mut out = json!({
        "test": "p2p", "target": p.target.to_string(), "conns": p.conns,
        "ramp_s": (ramp_s * 100.0).round() / 100.0, "established": established,
        "connect_errors": connect_errors.values().sum::<u64>(),
        "connect_error_kinds": connect_errors,
        "secs": secs, "sent": sent, "echoed": echoed,
        "echo_missing": sent.saturating_sub(echoed), "announced": announced,
        "msgs_per_s": ((sent + echoed + announced) as f64 / secs).round(),
        "errors": errors.values().sum::<u64>(), "error_kinds": errors,
        "proxy_cpu_pct": pct(proxy)?, "client_cpu_pct": pct(client)?,
        "server_cpu_pct": pct(server)?,
    });
    window::merge(&mut out, prefixed("rtt_", window::percentiles(&rtt.0)));
    window::merge(&mut out, stalls);
    window::merge(
        &mut out,
        prefixed("oneway_", window::percentiles(&lock(&shared.oneway))),
    );
    Ok(out)
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// `{"p50_us": 1}` as `{"rtt_p50_us": 1}`.
fn prefixed(prefix: &str, v: Value) -> Value {
    let Value::Object(fields) = v else { return v };
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (format!("{prefix}{k}"), v))
            .collect(),
    )
}

/// One descriptor per connection here, two in a proxy, one in the backend.
fn check_fds(p: &Params) -> anyhow::Result<()> {
    let n = p.conns as u64;
    let me = std::process::id();
    procfs::need_open_files(me, n + FD_SLACK, "loadgen p2p", "--conns")?;
    if let Some(pid) = p.pid {
        procfs::need_open_files(pid, 2 * n + FD_SLACK, "the proxy", "--conns")?;
    }
    if let Some(pid) = p.server_pid {
        procfs::need_open_files(pid, n + FD_SLACK, "the backend", "--conns")?;
    }
    Ok(())
}

/// One client connection.
struct Conn {
    target: SocketAddr,
    shape: Shape,
    win: Window,
    max_sends: u64,
    shared: Arc<Shared>,
}

impl Conn {
    /// Open and greet, say how that went on `ready`, then exchange until
    /// the window and its grace are over. An error after the greeting ends
    /// the connection (no redial) and is counted.
    async fn run(self, ready: mpsc::Sender<Result<(), String>>) {
        let deadline = (Instant::now() + CONNECT_TIMEOUT).min(self.win.start);
        let opened = match timeout_at(deadline, open(self.target)).await {
            Ok(Ok(opened)) => Ok(opened),
            Ok(Err(e)) => Err(format!("{e:#}")),
            Err(_) => Err("connect and hello timed out".to_owned()),
        };
        let (ok, outcome) = match opened {
            Ok(o) => (Some(o), Ok(())),
            Err(e) => (None, Err(e)),
        };
        // The receiver waits for every connection until the window starts;
        // after that nobody listens, and the outcome is counted as missing.
        let _ = ready.send(outcome).await;
        drop(ready);
        if let Some((mut s, mut r)) = ok
            && let Err(e) = self.exchange(&mut s, &mut r).await
        {
            self.shared.error(&e);
        }
    }

    async fn exchange(&self, s: &mut TcpStream, r: &mut Reader) -> anyhow::Result<()> {
        let sh = &*self.shared;
        let mut rng = fastrand::Rng::new();
        let mut out = [0u8; frame::MAX];
        let mut next = Instant::now() + self.shape.first(&mut rng);
        let send = sleep_until(next);
        let stop = sleep_until(self.win.end + GRACE);
        tokio::pin!(send, stop);
        let mut sends = 0u64;
        loop {
            tokio::select! {
                n = s.read(r.space()) => {
                    let n = n.context("read")?;
                    if n == 0 {
                        bail!("closed by the other end");
                    }
                    r.filled(n);
                    while let Some((kind, stamp, _)) = r.next()? {
                        let now = frame::now_ns();
                        match kind {
                            Kind::Echo if sh.in_window(stamp) => {
                                let took = ns(now - stamp);
                                let mut rtt = lock(&sh.rtt);
                                window::record(&mut rtt.0, took);
                                rtt.1.record(ns(stamp - sh.start_ns), took);
                                sh.echoed.fetch_add(1, Ordering::Relaxed);
                            }
                            Kind::Announce if sh.in_window(now) => {
                                let delay = now.saturating_sub(stamp);
                                window::record(&mut lock(&sh.oneway), ns(delay));
                                sh.announced.fetch_add(1, Ordering::Relaxed);
                            }
                            Kind::Echo | Kind::Announce => {}
                            other => bail!("the backend sent {other:?}"),
                        }
                    }
                }
                () = &mut send, if sends < self.max_sends && next < self.win.end => {
                    let len = self.shape.size(&mut rng);
                    let stamp = frame::now_ns();
                    s.write_all(frame::encode(&mut out, Kind::Ping, stamp, len))
                        .await
                        .context("send")?;
                    if sh.in_window(stamp) {
                        sh.sent.fetch_add(1, Ordering::Relaxed);
                    }
                    sends += 1;
                    next += self.shape.gap(&mut rng);
                    send.as_mut().reset(next);
                }
                () = &mut stop => return Ok(()),
            }
        }
    }
}

/// Connect and wait for the backend's hello.
async fn open(target: SocketAddr) -> anyhow::Result<(TcpStream, Reader)> {
    let mut s = TcpStream::connect(target).await.context("connect")?;
    s.set_nodelay(true)?;
    let mut r = Reader::new();
    loop {
        let n = s.read(r.space()).await.context("read hello")?;
        if n == 0 {
            bail!("closed before hello");
        }
        r.filled(n);
        if let Some((kind, _, _)) = r.next()? {
            if kind != Kind::Hello {
                bail!("first message {kind:?}, not hello");
            }
            return Ok((s, r));
        }
    }
}

fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}
