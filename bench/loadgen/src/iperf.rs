//! Throughput: run the `iperf3` client against a target while metering the
//! proxy's CPU, and turn iperf3's JSON into Gbit/s and CPU seconds per GB.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::procfs::CpuMeter;

/// iperf3 gets this long beyond its own test time before it is killed.
const GRACE: Duration = Duration::from_secs(30);

/// One iperf3 run.
#[derive(Debug, Clone)]
pub struct Params {
    /// The iperf3 server, or a proxy in front of it.
    pub target: SocketAddr,
    /// Parallel streams (`-P`).
    pub streams: u32,
    /// Test seconds (`-t`).
    pub time: u32,
    /// The proxy to meter.
    pub pid: Option<u32>,
    /// Keep iperf3's own JSON here.
    pub raw: Option<PathBuf>,
}

/// Run it and return the result as JSON.
///
/// # Errors
/// When iperf3 cannot be run, fails, times out or prints no result.
pub async fn run(p: Params) -> anyhow::Result<Value> {
    let mut cmd = Command::new("iperf3");
    cmd.args(["-c", &p.target.ip().to_string()])
        .args(["-p", &p.target.port().to_string()])
        .args(["-t", &p.time.to_string()])
        .args(["-P", &p.streams.to_string()])
        .args(["--connect-timeout", "5000", "-J"])
        .kill_on_drop(true);
    let meter = CpuMeter::start(p.pid)?;
    let limit = Duration::from_secs(u64::from(p.time)) + GRACE;
    let output = tokio::time::timeout(limit, cmd.output())
        .await
        .context("iperf3 did not finish in time")?
        .context("run iperf3 (is it installed?)")?;
    let cpu = meter.stop()?;
    if let Some(raw) = &p.raw {
        std::fs::write(raw, &output.stdout).with_context(|| format!("write {}", raw.display()))?;
    }
    let report: Value = serde_json::from_slice(&output.stdout).context("parse iperf3 -J output")?;
    if let Some(err) = report.get("error") {
        bail!("iperf3: {err}");
    }
    let sum = &report["end"]["sum_received"];
    let (Some(bps), Some(bytes)) = (sum["bits_per_second"].as_f64(), sum["bytes"].as_f64()) else {
        bail!("iperf3 output has no end.sum_received");
    };
    let mut out = json!({
        "test": "iperf", "target": p.target.to_string(), "streams": p.streams,
        "secs": p.time, "bytes": bytes, "gbit_s": (bps / 1e7).round() / 100.0,
    });
    if let (Some(cpu), Some(o)) = (cpu, out.as_object_mut()) {
        o.insert("proxy_cpu_s".into(), json!(cpu));
        let per_gb = (bytes > 0.0).then(|| (cpu / (bytes / 1e9) * 1000.0).round() / 1000.0);
        o.insert("cpu_s_per_gb".into(), json!(per_gb));
    }
    Ok(out)
}
