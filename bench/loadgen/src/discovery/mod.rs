//! Discovery at N members: dnsmasq answers one name with N A records on
//! 127.x addresses (nothing listens there; probes run once, at start-up),
//! pin-proxy (the given binary) follows it, and over ROUNDS lookup
//! intervals this reports the cost of a lookup as the proxy logs it
//! (`lookup` events, `ms`), the proxy's CPU per lookup, its RSS against a
//! proxy with one static backend, and how long one more address takes to
//! show in `/status` after dnsmasq reads its hosts file again.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::admin::{self, free_port};
use crate::child::Kid;
use crate::dnsmasq::{self, Dnsmasq};
use crate::procfs;
use proxy::{events, lookups, start_proxy, wait_lookups, wait_members, write_config};

mod proxy;

/// The name dnsmasq answers and the entry that discovers it.
const NAME: &str = "big.test";
const DOMAIN: &str = "test";
const ENTRY: &str = "big";
const PORT: u16 = 9333;
const LOG_LEVEL: &str = "warn,pin_proxy::runtime::discover=debug";
/// dnsmasq answers a TCP connection from a process forked before a reload
/// for up to this many queries or this long (see [`Dnsmasq::end_tcp_children`]).
const TCP_MAX_QUERIES: u32 = 100;
const CHILD_LIFETIME: Duration = Duration::from_secs(150);
/// Before reading an RSS after a burst of allocations.
const SETTLE: Duration = Duration::from_secs(5);

/// What to run.
pub struct Params {
    pub proxy: PathBuf,
    pub dnsmasq: PathBuf,
    pub members: usize,
    pub interval: Duration,
    pub rounds: usize,
}

pub async fn run(p: Params) -> anyhow::Result<Value> {
    if !p.dnsmasq.is_file() {
        let why = format!("no dnsmasq at {}", p.dnsmasq.display());
        eprintln!("discovery: skipped: {why} (apt-get install dnsmasq-base, or --dnsmasq PATH)");
        return Ok(json!({ "test": "discovery", "members": p.members, "skipped": why }));
    }
    if p.members == 0 || p.rounds == 0 || p.interval.is_zero() {
        bail!("--members, --rounds and --interval must be more than 0");
    }
    let dir = std::env::temp_dir().join(format!("loadgen-discovery-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    // Every child lives inside `measure`: dropping it (an error, a signal)
    // kills them.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let result = tokio::select! {
        r = measure(&p, &dir) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow::anyhow!("terminated")),
    };
    // Only a temporary directory of ours; a leftover is harmless.
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure(p: &Params, dir: &Path) -> anyhow::Result<Value> {
    let load_before = procfs::loadavg()?;
    let rss_base_kib = baseline(p, dir).await?;

    let hosts = dir.join("hosts");
    dnsmasq::write_hosts(&hosts, NAME, p.members)?;
    let mut dns = Dnsmasq::start(&p.dnsmasq, &hosts, DOMAIN, &dir.join("dnsmasq.log")).await?;
    let answer = dnsmasq::query_a(dns.addr, NAME).await?;
    let fits = answer.records == p.members && !answer.truncated && answer.rcode == 0;
    let dns_answer = json!({
        "records": answer.records,
        "bytes": answer.bytes,
        "truncated": answer.truncated,
        "rcode": answer.rcode,
        // Its first answer after it started: includes reading the hosts file.
        "first_answer_ms": ms(answer.elapsed),
    });

    let admin = free_port()?;
    let config = dir.join("config.yaml");
    let discover = format!("{{ name: {ENTRY}, discover: \"{NAME}:{PORT}\" }}");
    write_config(&config, admin, p, &discover, Some(dns.addr))?;
    let log = dir.join("log.jsonl");
    let started = Instant::now();
    let mut proxy = start_proxy(&p.proxy, &config, &log)?;
    let pid = proxy.pid();
    let full = Duration::from_secs(30) + p.interval * 3;
    if !fits {
        return too_big(p, &mut proxy, admin, dns_answer, full).await;
    }
    let (_, status_bytes) = wait_members(&mut proxy, admin, p.members, full, 100).await?;
    let to_members_ms = started.elapsed().as_millis() as u64;
    let rss_members_kib = procfs::rss_kib(pid)?;
    let t = Instant::now();
    admin::request(admin, "GET", "/status", Duration::from_secs(10)).await?;
    let status_ms = ms(t.elapsed());

    // The window runs from one lookup event to the ROUNDS-th after it.
    let per_round = p.interval * 2 + Duration::from_secs(5);
    let before = lookups(&log).len();
    let first = wait_lookups(&mut proxy, &log, before + 1, per_round).await?;
    let (cpu0, ns0) = (procfs::cpu_seconds(pid)?, procfs::on_cpu_ns(pid)?);
    let dns_ns0 = dns.on_cpu_ns()?;
    let bound = per_round * p.rounds as u32;
    wait_lookups(&mut proxy, &log, first + p.rounds, bound).await?;
    let (cpu1, ns1) = (procfs::cpu_seconds(pid)?, procfs::on_cpu_ns(pid)?);
    let dns_ns1 = dns.on_cpu_ns()?;
    let all = lookups(&log);
    let window = all.get(first..first + p.rounds).context("lookup events")?;
    let mut lookup_ms: Vec<u64> = window.iter().filter_map(|e| e["ms"].as_u64()).collect();
    lookup_ms.sort_unstable();
    let found_ok = window
        .iter()
        .all(|e| e["found"].as_u64() == Some(p.members as u64));
    let rss_kib = procfs::rss_kib(pid)?;

    // One more address, as dnsmasq serves it; then one more with its TCP
    // children ended, so that the next lookup reaches the reloaded data.
    let stale = p.interval * TCP_MAX_QUERIES;
    let bound = stale.min(CHILD_LIFETIME) + per_round * 2;
    let changed = change(
        &mut proxy,
        &mut dns,
        &hosts,
        &log,
        admin,
        p.members + 1,
        false,
        bound,
    )
    .await?;
    let bound = per_round * 2;
    let fresh = change(
        &mut proxy,
        &mut dns,
        &hosts,
        &log,
        admin,
        p.members + 2,
        true,
        bound,
    )
    .await?;
    // Right after `/status` was polled every 20 ms; the allocator returns
    // what that took within a few seconds.
    let rss_polled_kib = procfs::rss_kib(pid)?;
    tokio::time::sleep(SETTLE).await;
    let rss_after_change_kib = procfs::rss_kib(pid)?;

    let rounds = p.rounds as f64;
    let per_member_b = (rss_kib as f64 - rss_base_kib as f64) * 1024.0 / p.members as f64;
    let out = json!({
        "test": "discovery",
        "members": p.members,
        "fits": true,
        "interval_ms": p.interval.as_millis() as u64,
        "rounds": p.rounds,
        "dns_answer": dns_answer,
        "to_members_ms": to_members_ms,
        "lookup_ms": {
            "p50": quantile(&lookup_ms, 0.50),
            "p99": quantile(&lookup_ms, 0.99),
            "max": lookup_ms.last(),
            "n": lookup_ms.len(),
        },
        "every_lookup_found_all": found_ok,
        "cpu_ms_per_lookup": round2((cpu1 - cpu0) * 1e3 / rounds),
        "on_cpu_ms_per_lookup": round2((ns1 - ns0) as f64 / 1e6 / rounds),
        "dnsmasq_on_cpu_ms_per_lookup": round2((dns_ns1 - dns_ns0) as f64 / 1e6 / rounds),
        "rss_kib": rss_kib,
        "rss_at_members_kib": rss_members_kib,
        "rss_polled_kib": rss_polled_kib,
        "rss_after_change_kib": rss_after_change_kib,
        "rss_baseline_kib": rss_base_kib,
        "rss_per_member_b": per_member_b.round(),
        "status_bytes": status_bytes,
        "status_ms": status_ms,
        "change": changed,
        "change_fresh": fresh,
        "loadavg": [load_before, procfs::loadavg()?],
    });
    eprintln!(
        "discovery: {} members, lookup p50/p99/max {:?}/{:?}/{:?} ms, CPU {:.2} ms per lookup, \
         RSS {rss_kib} KiB (one static backend: {rss_base_kib} KiB, {per_member_b:.0} B a member), \
         one more member in /status after {} ms ({} ms with dnsmasq's TCP children ended)",
        p.members,
        quantile(&lookup_ms, 0.50),
        quantile(&lookup_ms, 0.99),
        lookup_ms.last(),
        (ns1 - ns0) as f64 / 1e6 / rounds,
        changed["ms"],
        fresh["ms"],
    );
    Ok(out)
}

/// RSS of a proxy with the same pool but one static backend, once settled.
async fn baseline(p: &Params, dir: &Path) -> anyhow::Result<u64> {
    let admin = free_port()?;
    let config = dir.join("baseline.yaml");
    let backend = format!("\"{}:{PORT}\"", dnsmasq::address(0));
    write_config(&config, admin, p, &backend, None)?;
    let mut proxy = start_proxy(&p.proxy, &config, &dir.join("baseline.jsonl"))?;
    wait_members(&mut proxy, admin, 0, Duration::from_secs(30), 100).await?;
    // Its start-up probe and first ticks done, as for the measured one.
    tokio::time::sleep(SETTLE).await;
    procfs::rss_kib(proxy.pid())
}

/// When one DNS message cannot hold every member (at most 65,535 bytes
/// over TCP, 16 bytes an A record): what the proxy makes of the answer.
async fn too_big(
    p: &Params,
    proxy: &mut Kid,
    admin: SocketAddr,
    dns_answer: Value,
    timeout: Duration,
) -> anyhow::Result<Value> {
    let deadline = Instant::now() + timeout;
    let entry = loop {
        proxy.alive()?;
        let status = admin::request(admin, "GET", "/status", Duration::from_secs(10)).await;
        let entry = status.map(|s| s["pools"][0]["discovery"][0].clone());
        match entry {
            Ok(e) if !e["last_lookup"].is_null() => break e,
            _ if Instant::now() > deadline => {
                bail!("no lookup in /status within {timeout:?}: {entry:?}")
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "discovery: {} members do not fit one DNS answer: dnsmasq sends {} ({} bytes, truncated: {}); \
         the proxy: {} members, error {}",
        p.members,
        dns_answer["records"],
        dns_answer["bytes"],
        dns_answer["truncated"],
        entry["members"],
        entry["error"],
    );
    Ok(json!({
        "test": "discovery",
        "members": p.members,
        "fits": false,
        "dns_answer": dns_answer,
        "proxy_discovery": entry,
    }))
}

/// Rewrite the hosts file with `to` addresses and SIGHUP dnsmasq (with
/// `fresh`, end its TCP children too); wait until `/status` shows `to`
/// members: how long that took, how many lookups it took, the `ms` of the
/// one that found them, and lookups that failed meanwhile.
#[allow(clippy::too_many_arguments)]
async fn change(
    proxy: &mut Kid,
    dns: &mut Dnsmasq,
    hosts: &Path,
    log: &Path,
    admin: SocketAddr,
    to: usize,
    fresh: bool,
    bound: Duration,
) -> anyhow::Result<Value> {
    dnsmasq::write_hosts(hosts, NAME, to)?;
    let (seen, failed) = (lookups(log).len(), events(log, "discovery_failed").len());
    let t = Instant::now();
    dns.reload()?;
    let ended = if fresh { dns.end_tcp_children()? } else { 0 };
    wait_members(proxy, admin, to, bound, 20).await?;
    let took = ms(t.elapsed());
    let after = lookups(log).split_off(seen);
    let at = after
        .iter()
        .position(|e| e["found"].as_u64() == Some(to as u64));
    Ok(json!({
        "members": to,
        "ms": took,
        "tcp_children_ended": ended,
        "lookups": at.map(|i| i + 1),
        // Counted from the proxy's start: dnsmasq ends a TCP connection
        // after 100 queries, so #101, #201, … reach a fresh process.
        "nth_lookup": at.map(|i| seen + i + 1),
        "lookup_ms": at.and_then(|i| after[i]["ms"].as_u64()),
        "failed_lookups": events(log, "discovery_failed").len() - failed,
    }))
}

/// Nearest rank.
fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
    sorted.get(rank - 1).copied()
}

fn ms(d: Duration) -> f64 {
    round2(d.as_secs_f64() * 1e3)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
