//! Live upgrades under load: start pin-proxy (the given binary) in front
//! of an echo backend, hold CONNS connections (PINGERS of them doing
//! ping-pong all along, the rest idle), upgrade it UPGRADES times, and
//! report how long each handover took, the longest round trip a pinger
//! saw during it (against the longest without one) and the new process's
//! RSS before and after it adopted the connections. Every connection is
//! checked to echo after the last upgrade.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::admin::{self, free_port};
use crate::echo::round_trip;
use crate::procfs;
use crate::proxy::Proxy;

/// What to run.
pub struct Params {
    pub proxy: PathBuf,
    pub conns: usize,
    pub pingers: usize,
    pub upgrades: usize,
    /// Run the proxy under `taskset -c` with these CPUs.
    pub proxy_cpus: Option<String>,
}

pub async fn run(p: Params) -> anyhow::Result<Value> {
    // Each connection is a client socket and the backend's, both here.
    let need = 2 * p.conns as u64 + 64;
    procfs::need_open_files(std::process::id(), need, "loadgen upgrade", "--conns")?;
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let backend = echo.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = echo.accept().await {
            tokio::spawn(crate::echo::echo_plain(s));
        }
    });
    let (admin, listen) = (free_port()?, free_port()?);
    let config = format!(
        "admin: {{ listen: \"{admin}\" }}\nlog: {{ level: info, format: json }}\n\
         pools:\n  - name: p\n    listen: \"{listen}\"\n    max_connections: 100000\n    \
         rebalance: {{ interval: 0s }}\n    health: {{ probe: connect, interval: 1h }}\n    \
         backends: [\"{backend}\"]\n"
    );
    let mut proxy = Proxy::start(&p.proxy, &config, "upgrade", p.proxy_cpus.as_deref())?;
    measure(&p, admin, listen, &mut proxy).await
}

async fn measure(
    p: &Params,
    admin: SocketAddr,
    listen: SocketAddr,
    proxy: &mut Proxy,
) -> anyhow::Result<Value> {
    let first = proxy.pid;
    proxy.wait_for("ready", 1, Duration::from_secs(30)).await?;
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
        let wait = Duration::from_secs(30);
        let upgraded = proxy.wait_for("upgraded", u, wait).await?;
        let adopted = proxy.wait_for("adopted", u, wait).await?;
        let inherited = proxy.wait_for("inherited", u, wait).await?;
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
