//! `loadgen soak`: everything at once for a given time, the way a
//! production host sees it. The release binary in front of echo backends
//! (processes of their own) and DNS-discovered members (dnsmasq), with
//! long-lived streams that check every byte, churn, hostile clients and
//! admin traffic, under a chaos schedule: live upgrades, reloads that
//! change backends and settings, DNS flaps, backends killed and restarted,
//! frozen and thawed, manual quarantines and releases, and one cold
//! restart on the state file. Then the checks (`check.rs`): no byte lost
//! or changed, every close accounted for by the chaos that caused it, RSS
//! and descriptors flat, `/healthz` answering throughout, no process left.

mod chaos;
mod check;
mod load;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::admin::{self, free_port};
use crate::dnsmasq::{self, Dnsmasq};
use crate::procfs;
use crate::proxy::Proxy;
use chaos::{Act, Backend, Record};
use load::Traffic;

/// What to run, and how often each kind of chaos strikes.
#[derive(Debug, Clone, clap::Args)]
pub struct Params {
    /// The pin-proxy binary (a release build).
    #[arg(long)]
    pub proxy: PathBuf,
    /// dnsmasq, for the DNS-discovered members.
    #[arg(long, default_value = "/usr/sbin/dnsmasq")]
    pub dnsmasq: PathBuf,
    /// How long, in seconds.
    #[arg(long, default_value_t = 60)]
    pub secs: u64,
    /// Long-lived streams that check every byte both ways.
    #[arg(long, default_value_t = 2000)]
    pub streams: u64,
    /// Short connections a second.
    #[arg(long, default_value_t = 300)]
    pub churn: u32,
    /// Clients a second that send garbage and reset.
    #[arg(long, default_value_t = 5)]
    pub hostile: u32,
    /// P2P-shaped connections (small messages both ways on random
    /// schedules) on a pool of their own, opened afresh every 20 s window.
    #[arg(long, default_value_t = 200)]
    pub p2p: usize,
    #[arg(long, value_parser = crate::interval, default_value = "60s")]
    pub upgrade_every: Duration,
    #[arg(long, value_parser = crate::interval, default_value = "20s")]
    pub reload_every: Duration,
    #[arg(long, value_parser = crate::interval, default_value = "15s")]
    pub dns_every: Duration,
    #[arg(long, value_parser = crate::interval, default_value = "30s")]
    pub kill_every: Duration,
    #[arg(long, value_parser = crate::interval, default_value = "45s")]
    pub freeze_every: Duration,
    #[arg(long, value_parser = crate::interval, default_value = "25s")]
    pub quarantine_every: Duration,
}

/// What the soak's tasks share.
pub struct Shared {
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub traffic: Traffic,
    pub record: Record,
    /// The process serving now.
    pub pid: AtomicU32,
    /// `/healthz` failures, when.
    pub unhealthy: Mutex<Vec<SystemTime>>,
    /// (seconds since start, RSS KiB, open descriptors, live client
    /// connections) of the serving process.
    pub samples: Mutex<Vec<(f64, u64, usize, u64)>>,
    /// Errors of the chaos itself (an upgrade refused, a reload failed).
    pub chaos_errors: Mutex<Vec<String>>,
}

/// The static backends, by name; `b3` comes and goes with reloads.
const STATIC: [&str; 3] = ["b1", "b2", "b3"];
/// The DNS name of the discovered members.
const NAME: &str = "members.soak.test";

pub async fn run(p: Params) -> anyhow::Result<Value> {
    if p.secs < 20 {
        bail!("--secs must be at least 20 (the cold restart is at the half)");
    }
    let need = 4 * p.streams + 4096;
    procfs::need_open_files(std::process::id(), need, "loadgen soak", "--streams")?;
    let scratch = std::env::temp_dir().join(format!("loadgen-soak-files-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = soak(&p, &scratch).await;
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

async fn soak(p: &Params, scratch: &Path) -> anyhow::Result<Value> {
    let mut statics = Vec::new();
    for name in STATIC {
        statics.push(Backend::start(name, free_port()?)?);
    }
    // Both members on one port, on 127.1.0.1 and 127.1.0.2.
    let member_port = free_port()?.port();
    let members: Vec<Backend> = (0..2)
        .map(|i| {
            let addr = SocketAddr::new(dnsmasq::address(i).into(), member_port);
            Backend::start(&format!("m{}", i + 1), addr)
        })
        .collect::<anyhow::Result<_>>()?;
    let hosts = scratch.join("hosts");
    dnsmasq::write_hosts(&hosts, NAME, 2)?;
    let mut dns = Dnsmasq::start(
        &p.dnsmasq,
        &hosts,
        "soak.test",
        &scratch.join("dnsmasq.log"),
    )
    .await
    .context("start dnsmasq (install dnsmasq-base)")?;
    let (admin, listen) = (free_port()?, free_port()?);
    let p2p_server = Backend::p2p("p2p", free_port()?)?;
    let settings = Settings {
        admin,
        listen,
        p2p: (free_port()?, p2p_server.addr),
        dns: dns.addr,
        statics: statics.iter().map(|b| b.addr).collect(),
        member_port,
        state: scratch.join("state.json"),
    };
    let mut proxies = vec![Proxy::start(&p.proxy, &settings.config(0), "soak", None)?];
    proxies[0]
        .wait_for("ready", 1, Duration::from_secs(30))
        .await?;
    let shared = Arc::new(Shared {
        listen,
        admin,
        traffic: Traffic::default(),
        record: Record::default(),
        pid: AtomicU32::new(proxies[0].pid),
        unhealthy: Mutex::default(),
        samples: Mutex::default(),
        chaos_errors: Mutex::default(),
    });
    let started = Instant::now();
    let deadline = started + Duration::from_secs(p.secs);
    let streams: Vec<_> = (0..p.streams)
        .map(|id| tokio::spawn(load::stream(id, shared.clone(), deadline)))
        .collect();
    let churn = tokio::spawn(load::churn(shared.clone(), p.churn, deadline));
    let hostile = tokio::spawn(load::hostile(shared.clone(), p.hostile, deadline));
    let p2p = tokio::spawn(load::p2p(settings.p2p.0, p.p2p, deadline));
    let watch = tokio::spawn(watch(shared.clone(), started, deadline));
    let mut stage = Stage {
        p,
        settings: &settings,
        shared: &shared,
        statics,
        dns: &mut dns,
        hosts: &hosts,
        proxies: &mut proxies,
        variant: 0,
    };
    stage.chaos(started, deadline).await;
    let statics = stage.statics;
    let mut ends = Vec::new();
    for s in streams {
        ends.extend(s.await.context("a stream task")?);
    }
    churn.await?;
    hostile.await?;
    let p2p = p2p.await?;
    watch.await?;
    // Let the last closes reach the log.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events: Vec<Value> = proxies.iter().flat_map(Proxy::all_events).collect();
    let rss_fd_before_stop = shared
        .samples
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    drop(proxies);
    drop(statics);
    drop(members);
    drop(p2p_server);
    drop(dns);
    // This soak's scratch directories (`Proxy::start` names them after
    // this process), not another soak's running beside it.
    let me = std::process::id();
    let markers = ["soak", "soak-cold"].map(|name| {
        std::env::temp_dir()
            .join(format!("loadgen-{name}-{me}"))
            .join("config.yaml")
    });
    let left = wait_gone(&markers).await;
    let report = check::Report::new(check::Input {
        secs: started.elapsed().as_secs_f64(),
        events: &events,
        acts: &shared.record.all(),
        ends: &ends,
        p2p: &p2p,
        traffic: &shared.traffic,
        samples: &rss_fd_before_stop,
        unhealthy: &shared.unhealthy.lock().unwrap_or_else(|e| e.into_inner()),
        chaos_errors: &shared
            .chaos_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
        left_behind: &left,
    });
    eprintln!("{}", report.table());
    let v = report.json();
    if !report.violations.is_empty() {
        println!("{v}");
        bail!("{} violations", report.violations.len());
    }
    Ok(v)
}

/// Processes of the soak still alive 5 s after it stopped them.
async fn wait_gone(markers: &[PathBuf]) -> Vec<u32> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let left = chaos::processes_mentioning(markers);
        if left.is_empty() || Instant::now() > until {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The addresses a config names.
struct Settings {
    admin: SocketAddr,
    listen: SocketAddr,
    dns: SocketAddr,
    statics: Vec<SocketAddr>,
    /// The P2P pool's listener and its backend.
    p2p: (SocketAddr, SocketAddr),
    member_port: u16,
    state: PathBuf,
}

impl Settings {
    /// Variant 0 has every static backend and probes each second; variant
    /// 1 drops `b3` and probes every 2 s.
    fn config(&self, variant: u8) -> String {
        let (admin, listen, dns) = (self.admin, self.listen, self.dns);
        let interval = if variant == 0 { "1s" } else { "2s" };
        let mut backends = String::new();
        for (name, addr) in STATIC.iter().zip(&self.statics) {
            if variant == 1 && *name == "b3" {
                continue;
            }
            backends.push_str(&format!("      - {{ name: {name}, addr: \"{addr}\" }}\n"));
        }
        format!(
            "admin: {{ listen: \"{admin}\" }}\nlog: {{ level: info, format: json }}\n\
             state_file: \"{}\"\n\
             defaults:\n  discovery: {{ interval: 1s, hold: 2s }}\n\
             pools:\n  - name: soak\n    listen: \"{listen}\"\n    max_connections: 100000\n    \
             health: {{ probe: connect, interval: {interval}, timeout: 500ms }}\n    \
             quarantine: {{ base: 5s, max: 20s }}\n    \
             discovery: {{ resolver: \"{dns}\" }}\n    backends:\n{backends}      \
             - {{ name: dns, discover: \"{NAME}:{}\" }}\n  \
             - name: p2p\n    listen: \"{}\"\n    \
             health: {{ probe: connect, interval: {interval}, timeout: 500ms }}\n    \
             backends: [\"{}\"]\n",
            self.state.display(),
            self.member_port,
            self.p2p.0,
            self.p2p.1,
        )
    }
}

/// The chaos's own state.
struct Stage<'a> {
    p: &'a Params,
    settings: &'a Settings,
    shared: &'a Arc<Shared>,
    statics: Vec<Backend>,
    dns: &'a mut Dnsmasq,
    hosts: &'a Path,
    proxies: &'a mut Vec<Proxy>,
    variant: u8,
}

/// Each kind of chaos's next time.
struct Due {
    at: Instant,
    every: Duration,
}

impl Due {
    fn new(start: Instant, every: Duration, offset: Duration) -> Due {
        Due {
            at: start + offset + every,
            every,
        }
    }

    fn now(&mut self, now: Instant) -> bool {
        if now < self.at {
            return false;
        }
        self.at = now + self.every;
        true
    }
}

impl Stage<'_> {
    async fn chaos(&mut self, started: Instant, deadline: Instant) {
        let p = self.p;
        let s = Duration::from_secs(1);
        let mut upgrade = Due::new(started, p.upgrade_every, 3 * s);
        let mut reload = Due::new(started, p.reload_every, s);
        let mut flap = Due::new(started, p.dns_every, 2 * s);
        let mut kill = Due::new(started, p.kill_every, 4 * s);
        let mut freeze = Due::new(started, p.freeze_every, 7 * s);
        let mut quarantine = Due::new(started, p.quarantine_every, 5 * s);
        let cold_at = started + Duration::from_secs(p.secs / 2);
        let mut cold_done = false;
        // (when, what) to undo: restarts, thaws, releases.
        let mut undo: Vec<(Instant, Act)> = Vec::new();
        let mut rng = fastrand::Rng::with_seed(11);
        let mut members = 2;
        // The last chaos 5 s before the end, so its closes are over.
        while Instant::now() + Duration::from_secs(5) < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = Instant::now();
            let mut later = Vec::new();
            for (at, act) in undo.drain(..) {
                if at > now {
                    later.push((at, act));
                    continue;
                }
                self.undo(act).await;
            }
            undo = later;
            if !cold_done && now >= cold_at {
                cold_done = true;
                self.cold_restart().await;
                continue;
            }
            if upgrade.now(now) {
                self.upgrade().await;
            }
            if reload.now(now) {
                self.reload().await;
            }
            if flap.now(now) {
                members = 3 - members;
                if let Err(e) =
                    dnsmasq::write_hosts(self.hosts, NAME, members).and_then(|()| self.dns.reload())
                {
                    self.error(format!("DNS flap: {e:#}"));
                }
                self.shared.record.note(Act::DnsFlap);
            }
            if kill.now(now)
                && let Some(i) = self.pick(&mut rng, &undo)
            {
                let b = &mut self.statics[i];
                self.shared.record.note(Act::Kill(b.name.clone()));
                b.kill();
                undo.push((now + 3 * s, Act::Kill(b.name.clone())));
            }
            if freeze.now(now)
                && let Some(i) = self.pick(&mut rng, &undo)
            {
                let b = &self.statics[i];
                self.shared.record.note(Act::Freeze(b.name.clone()));
                if let Err(e) = b.freeze(true) {
                    self.error(format!("freeze: {e:#}"));
                }
                undo.push((now + 5 * s, Act::Freeze(b.name.clone())));
            }
            if quarantine.now(now) {
                let name = STATIC[rng.usize(0..2)].to_owned();
                let path = format!("/pools/soak/backends/{name}/quarantine?for=30s");
                if let Err(e) = self.post(&path).await {
                    self.error(format!("quarantine: {e:#}"));
                }
                self.shared.record.note(Act::Quarantine(name.clone()));
                undo.push((now + 8 * s, Act::Quarantine(name)));
            }
        }
        for (_, act) in undo {
            self.undo(act).await;
        }
    }

    /// A static backend in the config, running, untouched by pending chaos.
    fn pick(&self, rng: &mut fastrand::Rng, undo: &[(Instant, Act)]) -> Option<usize> {
        let busy = |name: &str| {
            undo.iter()
                .any(|(_, a)| matches!(a, Act::Kill(n) | Act::Freeze(n) if n == name))
        };
        let candidates: Vec<usize> = (0..self.statics.len())
            .filter(|&i| {
                let b = &self.statics[i];
                b.running() && !busy(&b.name) && !(self.variant == 1 && b.name == "b3")
            })
            .collect();
        // Never every static backend at once: one always serves.
        if candidates.len() < 2 {
            return None;
        }
        Some(candidates[rng.usize(0..candidates.len())])
    }

    async fn undo(&mut self, act: Act) {
        match act {
            Act::Kill(name) => {
                if let Some(b) = self.statics.iter_mut().find(|b| b.name == name)
                    && let Err(e) = b.restart()
                {
                    self.error(format!("restart {name}: {e:#}"));
                }
            }
            Act::Freeze(name) => {
                self.shared.record.note(Act::Thaw(name.clone()));
                if let Some(b) = self.statics.iter().find(|b| b.name == name)
                    && let Err(e) = b.freeze(false)
                {
                    self.error(format!("thaw {name}: {e:#}"));
                }
            }
            Act::Quarantine(name) => {
                self.shared.record.note(Act::Release(name.clone()));
                let path = format!("/pools/soak/backends/{name}/release");
                if let Err(e) = self.post(&path).await {
                    self.error(format!("release: {e:#}"));
                }
            }
            _ => {}
        }
    }

    async fn upgrade(&mut self) {
        self.shared.record.note(Act::Upgrade);
        match admin::request(
            self.shared.admin,
            "POST",
            "/upgrade",
            Duration::from_secs(120),
        )
        .await
        {
            Ok(answer) => match answer["pid"].as_u64() {
                Some(pid) => self.shared.pid.store(pid as u32, Ordering::Relaxed),
                None => self.error(format!("upgrade answered {answer}")),
            },
            Err(e) => self.error(format!("upgrade: {e:#}")),
        }
    }

    async fn reload(&mut self) {
        self.variant = 1 - self.variant;
        let removed = (self.variant == 1).then(|| "b3".to_owned());
        let Some(proxy) = self.proxies.last() else {
            return;
        };
        let written = std::fs::write(proxy.config_path(), self.settings.config(self.variant));
        self.shared.record.note(Act::Reload(removed));
        if let Err(e) = written {
            return self.error(format!("write the config: {e}"));
        }
        if let Err(e) = self.post("/reload").await {
            self.error(format!("reload: {e:#}"));
        }
    }

    /// SIGTERM to the serving process; once it is gone, a new one on the
    /// same config and state file.
    async fn cold_restart(&mut self) {
        self.shared.record.note(Act::ColdStop);
        let pid = self.shared.pid.load(Ordering::Relaxed);
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
        let until = Instant::now() + Duration::from_secs(15);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let config = self.settings.config(self.variant);
        match Proxy::start(&self.p.proxy, &config, "soak-cold", None) {
            Ok(mut proxy) => {
                if let Err(e) = proxy.wait_for("ready", 1, Duration::from_secs(30)).await {
                    self.error(format!("cold start: {e:#}"));
                }
                self.shared.pid.store(proxy.pid, Ordering::Relaxed);
                self.proxies.push(proxy);
            }
            Err(e) => self.error(format!("cold start: {e:#}")),
        }
        self.shared.record.note(Act::ColdStart);
    }

    async fn post(&self, path: &str) -> anyhow::Result<Value> {
        admin::request(self.shared.admin, "POST", path, Duration::from_secs(10)).await
    }

    fn error(&self, e: String) {
        eprintln!("soak: chaos error: {e}");
        self.shared
            .chaos_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(e);
    }
}

/// Each second until `deadline`: `/healthz`; every 5 s also `/status`,
/// `/metrics` (admin traffic) and a sample of RSS and descriptors.
async fn watch(shared: Arc<Shared>, started: Instant, deadline: Instant) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut n = 0u64;
    while Instant::now() < deadline {
        tick.tick().await;
        n += 1;
        if !healthz(shared.admin).await {
            shared
                .unhealthy
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(SystemTime::now());
        }
        if !n.is_multiple_of(5) {
            continue;
        }
        let _ = get(shared.admin, "/metrics").await;
        let Some(conns) = connections(shared.admin).await else {
            continue;
        };
        let pid = shared.pid.load(Ordering::Relaxed);
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count());
        if let (Ok(rss), Ok(fds)) = (procfs::rss_kib(pid), fds) {
            shared
                .samples
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((started.elapsed().as_secs_f64(), rss, fds, conns));
        }
    }
}

/// The live client connections of every pool, from `/status`.
async fn connections(admin: SocketAddr) -> Option<u64> {
    let answer = get(admin, "/status").await.ok()?;
    let (_, body) = answer.split_once("\r\n\r\n")?;
    let status: Value = serde_json::from_str(body).ok()?;
    status["pools"]
        .as_array()?
        .iter()
        .map(|p| p["connections"].as_u64())
        .sum()
}

async fn healthz(admin: SocketAddr) -> bool {
    get(admin, "/healthz")
        .await
        .is_ok_and(|head| head.starts_with("HTTP/1.1 200"))
}

/// `GET path`: the whole answer (head and body), within 5 s.
async fn get(admin: SocketAddr, path: &str) -> anyhow::Result<String> {
    let exchange = async {
        let mut s = TcpStream::connect(admin).await?;
        let head = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        s.write_all(head.as_bytes()).await?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await?;
        anyhow::Ok(String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(5), exchange).await?
}
