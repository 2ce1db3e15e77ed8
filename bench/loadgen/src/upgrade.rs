//! Live upgrades under load: start pin-proxy (the given binary) in front
//! of an echo backend, hold CONNS connections (PINGERS of them doing
//! ping-pong all along, the rest idle), upgrade it UPGRADES times, and
//! report how long each handover took, the longest round trip a pinger
//! saw during it (against the longest without one) and the new process's
//! RSS before and after it adopted the connections. Every connection is
//! checked to echo after the last upgrade.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::admin::{self, free_port};
use crate::procfs;

/// What to run.
pub struct Params {
    pub proxy: PathBuf,
    pub conns: usize,
    pub pingers: usize,
    pub upgrades: usize,
}

pub async fn run(p: Params) -> anyhow::Result<Value> {
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let backend = echo.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = echo.accept().await {
            tokio::spawn(crate::echo::echo_plain(s));
        }
    });
    let dir = std::env::temp_dir().join(format!("loadgen-upgrade-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (admin, listen) = (free_port()?, free_port()?);
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "admin: {{ listen: \"{admin}\" }}\nlog: {{ level: info, format: json }}\n\
             pools:\n  - name: p\n    listen: \"{listen}\"\n    max_connections: 100000\n    \
             rebalance: {{ interval: 0s }}\n    health: {{ probe: connect, interval: 1h }}\n    \
             backends: [\"{backend}\"]\n"
        ),
    )?;
    let log = dir.join("log.jsonl");
    let mut proxy = Proxy::start(&p.proxy, &config, &log)?;
    let result = measure(&p, admin, listen, &log, proxy.pid).await;
    proxy.stop(&log);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure(
    p: &Params,
    admin: SocketAddr,
    listen: SocketAddr,
    log: &std::path::Path,
    first: u32,
) -> anyhow::Result<Value> {
    wait_for(log, "ready", 1, Duration::from_secs(30)).await?;
    let idle = p.conns.saturating_sub(p.pingers);
    let mut held = Vec::with_capacity(idle);
    for _ in 0..idle {
        let mut s = TcpStream::connect(listen)
            .await
            .context("connect an idle client")?;
        round_trip(&mut s).await?;
        held.push(s);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let worst_us = Arc::new(AtomicU64::new(0));
    let rounds = Arc::new(AtomicU64::new(0));
    let mut pingers = Vec::new();
    for _ in 0..p.pingers {
        let mut s = TcpStream::connect(listen).await?;
        let (stop, worst_us, rounds) = (stop.clone(), worst_us.clone(), rounds.clone());
        pingers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                round_trip(&mut s).await?;
                worst_us.fetch_max(t.elapsed().as_micros() as u64, Ordering::Relaxed);
                rounds.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    // The longest round trip without an upgrade, over as long a window.
    tokio::time::sleep(Duration::from_secs(1)).await;
    worst_us.store(0, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let baseline_us = worst_us.swap(0, Ordering::Relaxed);
    let rss_old_kib = procfs::rss_kib(first)?;

    let mut runs = Vec::new();
    for u in 1..=p.upgrades {
        worst_us.store(0, Ordering::Relaxed);
        let t = Instant::now();
        let answer = admin::request(admin, "POST", "/upgrade", Duration::from_secs(120)).await?;
        let cli_ms = t.elapsed().as_secs_f64() * 1e3;
        // Pingers that were stalled finish their round now.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let stall_us = worst_us.swap(0, Ordering::Relaxed);
        let upgraded = wait_for(log, "upgraded", u, Duration::from_secs(30)).await?;
        let adopted = wait_for(log, "adopted", u, Duration::from_secs(30)).await?;
        let inherited = wait_for(log, "inherited", u, Duration::from_secs(30)).await?;
        let pid = answer["pid"].as_u64().context("pid in the answer")? as u32;
        tokio::time::sleep(Duration::from_millis(500)).await;
        runs.push(json!({
            "generation": answer["generation"],
            "connections": answer["connections"],
            "handover_ms": upgraded["duration_ms"],
            "adopt_ms": adopted["duration_ms"],
            "request_ms": cli_ms,
            "stall_max_us": stall_us,
            "rss_new_before_kib": inherited["rss_kib"],
            "rss_new_after_kib": adopted["rss_kib"],
            "rss_new_settled_kib": procfs::rss_kib(pid).ok(),
        }));
        eprintln!(
            "upgrade {u}: {} connections, handover {} ms, longest round trip {} us (without: {baseline_us} us)",
            answer["connections"], upgraded["duration_ms"], stall_us
        );
    }
    stop.store(true, Ordering::Relaxed);
    for h in pingers {
        h.await?.context("a pinger failed")?;
    }
    for s in &mut held {
        round_trip(s)
            .await
            .context("an idle client after the upgrades")?;
    }
    Ok(json!({
        "test": "upgrade",
        "conns": p.conns,
        "pingers": p.pingers,
        "baseline_max_us": baseline_us,
        "rss_old_kib": rss_old_kib,
        "rounds": rounds.load(Ordering::Relaxed),
        "upgrades": runs,
    }))
}

async fn round_trip(s: &mut TcpStream) -> anyhow::Result<()> {
    let msg = [7u8; 64];
    s.write_all(&msg).await?;
    let mut got = [0u8; 64];
    s.read_exact(&mut got).await?;
    if got != msg {
        bail!("wrong echo");
    }
    Ok(())
}

/// The `n`-th event named `message` in the log, waiting for it.
async fn wait_for(
    log: &std::path::Path,
    message: &str,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["message"] == message)
            .collect();
        if let Some(e) = found.get(n - 1) {
            return Ok(e.clone());
        }
        if Instant::now() > deadline {
            bail!("no {message} #{n} in the log within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first pin-proxy process; later ones are found in its log.
struct Proxy {
    child: Child,
    pid: u32,
}

impl Proxy {
    fn start(
        bin: &std::path::Path,
        config: &std::path::Path,
        log: &std::path::Path,
    ) -> anyhow::Result<Proxy> {
        let out = std::fs::File::create(log)?;
        let child = Command::new(bin)
            .args(["run", "-c"])
            .arg(config)
            .env_remove("RUST_LOG")
            .stdout(Stdio::from(out))
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let pid = child.id();
        Ok(Proxy { child, pid })
    }

    /// Stop whichever process serves now.
    fn stop(&mut self, log: &std::path::Path) {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let last = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["message"] == "upgraded")
            .filter_map(|e| e["pid"].as_u64())
            .last();
        if let Some(pid) = last {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
