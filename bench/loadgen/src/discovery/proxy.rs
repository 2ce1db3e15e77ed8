//! The proxy under test as the discovery benchmark sees it: its config,
//! its process, the members `/status` shows and the `lookup` events in its
//! log.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use super::{ENTRY, LOG_LEVEL, Params};
use crate::admin::{self, free_port};
use crate::child::Kid;

/// The proxy's config: one pool whose `backends` list is `backend`,
/// probed at start-up only, no rebalancing.
pub(super) fn write_config(
    path: &Path,
    admin: SocketAddr,
    p: &Params,
    backend: &str,
    resolver: Option<SocketAddr>,
) -> anyhow::Result<()> {
    let listen = free_port()?;
    let discovery = match resolver {
        Some(r) => format!(
            "    discovery: {{ interval: {}ms, hold: 5m, resolver: \"{r}\" }}\n",
            p.interval.as_millis()
        ),
        None => String::new(),
    };
    let text = format!(
        "admin: {{ listen: \"{admin}\" }}\nlog: {{ level: \"{LOG_LEVEL}\", format: json }}\n\
         pools:\n  - name: p\n    listen: \"{listen}\"\n    \
         rebalance: {{ interval: 0s }}\n    health: {{ probe: connect, interval: 1h }}\n\
         {discovery}    backends: [{backend}]\n"
    );
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

pub(super) fn start_proxy(bin: &Path, config: &Path, log: &Path) -> anyhow::Result<Kid> {
    let out = std::fs::File::create(log)?;
    let mut cmd = Command::new(bin);
    cmd.args(["run", "-c"])
        .arg(config)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::inherit());
    Kid::spawn(&mut cmd, &format!("{}", bin.display()))
}

/// Poll `/status` every `every_ms` until the pool has `n` discovered
/// members (for `n` = 0: until it answers at all); the document and its
/// size.
pub(super) async fn wait_members(
    proxy: &mut Kid,
    admin: SocketAddr,
    n: usize,
    timeout: Duration,
    every_ms: u64,
) -> anyhow::Result<(Value, usize)> {
    let deadline = Instant::now() + timeout;
    loop {
        proxy.alive()?;
        let last = match admin::request(admin, "GET", "/status", Duration::from_secs(10)).await {
            Ok(status) => {
                let pool = &status["pools"][0];
                let members = pool["discovery"][0]["members"].as_u64().unwrap_or(0);
                let listed = pool["backends"].as_array().map_or(0, |b| {
                    b.iter().filter(|b| b["discovered_from"] == ENTRY).count()
                });
                if members == n as u64 && listed == n {
                    let size = status.to_string().len();
                    return Ok((status, size));
                }
                format!(
                    "{members} members, {listed} listed, {}",
                    pool["discovery"][0]
                )
            }
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() > deadline {
            bail!("/status did not show {n} members within {timeout:?}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(every_ms)).await;
    }
}

/// The `lookup` events logged so far.
pub(super) fn lookups(log: &Path) -> Vec<Value> {
    events(log, "lookup")
}

/// The events named `message` logged so far.
pub(super) fn events(log: &Path, message: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["message"] == message)
        .collect()
}

/// Wait until `n` lookup events are logged; the count then (`n` or more).
pub(super) async fn wait_lookups(
    proxy: &mut Kid,
    log: &Path,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        proxy.alive()?;
        let seen = lookups(log).len();
        if seen >= n {
            return Ok(seen);
        }
        if Instant::now() > deadline {
            bail!("{seen} lookup events logged, not {n}, within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
