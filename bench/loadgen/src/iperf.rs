//! Throughput: run the `iperf3` client against a target (or one client
//! against each of several targets, all at once) while metering the
//! proxy's CPU, and turn iperf3's JSON into Gbit/s and CPU seconds per GB.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::process::Command;
use tokio::task::JoinSet;

use crate::procfs::CpuMeter;

/// iperf3 gets this long beyond its own test time before it is killed.
const GRACE: Duration = Duration::from_secs(30);

/// One iperf3 run.
#[derive(Debug, Clone)]
pub struct Params {
    /// The iperf3 servers, or proxies in front of them: one client each,
    /// all at once (an iperf3 server serves one test at a time, and reads
    /// every stream of it on one thread).
    pub targets: Vec<SocketAddr>,
    /// Parallel streams (`-P`) of each client.
    pub streams: u32,
    /// Test seconds (`-t`).
    pub time: u32,
    /// The proxy to meter.
    pub pid: Option<u32>,
    /// Keep iperf3's own JSON here (an array of them for several targets).
    pub raw: Option<PathBuf>,
}

/// What one client received.
struct Received {
    bytes: f64,
    bits_per_second: f64,
    report: Value,
}

/// Run it and return the result as JSON.
///
/// # Errors
/// When iperf3 cannot be run, fails, times out or prints no result.
pub async fn run(p: Params) -> anyhow::Result<Value> {
    let Some(first) = p.targets.first().copied() else {
        bail!("no target");
    };
    let meter = CpuMeter::start(p.pid)?;
    let limit = Duration::from_secs(u64::from(p.time)) + GRACE;
    let mut clients = JoinSet::new();
    for (i, target) in p.targets.iter().copied().enumerate() {
        let (streams, time) = (p.streams, p.time);
        clients.spawn(async move { (i, client(target, streams, time, limit).await) });
    }
    let mut received: Vec<Option<Received>> = p.targets.iter().map(|_| None).collect();
    while let Some(joined) = clients.join_next().await {
        let (i, result) = joined.context("an iperf3 client task failed")?;
        let target = p.targets[i];
        received[i] = Some(result.with_context(|| format!("iperf3 against {target}"))?);
    }
    let cpu = meter.stop()?;
    let received: Vec<Received> = received.into_iter().flatten().collect();
    if let Some(raw) = &p.raw {
        let text = match received.as_slice() {
            [one] => serde_json::to_vec(&one.report)?,
            many => serde_json::to_vec(&many.iter().map(|r| &r.report).collect::<Vec<_>>())?,
        };
        std::fs::write(raw, text).with_context(|| format!("write {}", raw.display()))?;
    }
    let bytes: f64 = received.iter().map(|r| r.bytes).sum();
    let bps: f64 = received.iter().map(|r| r.bits_per_second).sum();
    let targets: Vec<String> = p.targets.iter().map(ToString::to_string).collect();
    let mut out = json!({
        "test": "iperf", "target": first.to_string(), "targets": targets,
        "clients": received.len(), "streams": p.streams,
        "secs": p.time, "bytes": bytes, "gbit_s": (bps / 1e7).round() / 100.0,
    });
    if let (Some(cpu), Some(o)) = (cpu, out.as_object_mut()) {
        o.insert("proxy_cpu_s".into(), json!(cpu));
        let per_gb = (bytes > 0.0).then(|| (cpu / (bytes / 1e9) * 1000.0).round() / 1000.0);
        o.insert("cpu_s_per_gb".into(), json!(per_gb));
    }
    Ok(out)
}

/// One iperf3 client against `target`: what its server received.
async fn client(
    target: SocketAddr,
    streams: u32,
    time: u32,
    limit: Duration,
) -> anyhow::Result<Received> {
    let mut cmd = Command::new("iperf3");
    cmd.args(["-c", &target.ip().to_string()])
        .args(["-p", &target.port().to_string()])
        .args(["-t", &time.to_string()])
        .args(["-P", &streams.to_string()])
        .args(["--connect-timeout", "5000", "-J"])
        .kill_on_drop(true);
    let output = tokio::time::timeout(limit, cmd.output())
        .await
        .context("iperf3 did not finish in time")?
        .context("run iperf3 (is it installed?)")?;
    let report: Value = serde_json::from_slice(&output.stdout).context("parse iperf3 -J output")?;
    if let Some(err) = report.get("error") {
        bail!("iperf3: {err}");
    }
    let sum = &report["end"]["sum_received"];
    let (Some(bits_per_second), Some(bytes)) =
        (sum["bits_per_second"].as_f64(), sum["bytes"].as_f64())
    else {
        bail!("iperf3 output has no end.sum_received");
    };
    Ok(Received {
        bytes,
        bits_per_second,
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether iperf3 runs here; without it the test says so and passes,
    /// unless `PIN_PROXY_REQUIRE_PEERS=1` (as `.ci/run` sets) asks for it.
    fn have_iperf3() -> bool {
        let found = std::process::Command::new("iperf3")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            assert!(
                std::env::var_os("PIN_PROXY_REQUIRE_PEERS").is_none_or(|v| v != "1"),
                "iperf3 is required (PIN_PROXY_REQUIRE_PEERS=1) but not found"
            );
            eprintln!("notice: iperf3 not found, the iperf test is skipped");
        }
        found
    }

    /// Whether a socket listens on 127.0.0.1:`port`, from /proc/net/tcp.
    fn listening(port: u16) -> bool {
        let local = format!("0100007F:{port:04X}");
        std::fs::read_to_string("/proc/net/tcp").is_ok_and(|table| {
            table.lines().skip(1).any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A")
            })
        })
    }

    #[tokio::test]
    async fn one_client_per_target_and_the_figures_summed() {
        if !have_iperf3() {
            return;
        }
        let _ports = crate::ports::TEST_PORTS.lock().await;
        let ports = crate::ports::free(2).unwrap();
        let mut servers = Vec::new();
        for port in &ports {
            let server = Command::new("iperf3")
                .args(["-s", "-B", "127.0.0.1", "-p", &port.to_string()])
                .stdout(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            servers.push(server);
        }
        let targets: Vec<SocketAddr> = ports
            .iter()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect();
        // The servers may not listen yet: wait until both do, without
        // connecting (iperf3 -s takes any connection for a test and
        // reopens its socket after it, refusing clients meanwhile).
        for port in &ports {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while !listening(*port) {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "iperf3 -s on {port}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let raw = std::env::temp_dir().join(format!("loadgen-iperf-{}.json", std::process::id()));
        let p = Params {
            targets: targets.clone(),
            streams: 1,
            time: 1,
            pid: None,
            raw: Some(raw.clone()),
        };
        let out = run(p).await.unwrap();
        let reports: Vec<Value> = serde_json::from_slice(&std::fs::read(&raw).unwrap()).unwrap();
        let _ = std::fs::remove_file(&raw);
        assert_eq!(out["clients"], 2, "{out}");
        assert_eq!(reports.len(), 2);
        // Each server received its own client's bytes, and the total is theirs.
        let each: Vec<f64> = reports
            .iter()
            .map(|r| r["end"]["sum_received"]["bytes"].as_f64().unwrap())
            .collect();
        assert!(each.iter().all(|b| *b > 0.0), "{each:?}");
        assert_eq!(out["bytes"].as_f64().unwrap(), each.iter().sum::<f64>());
        let servers_ports: Vec<String> = reports
            .iter()
            .map(|r| r["start"]["connecting_to"]["port"].to_string())
            .collect();
        let wanted: Vec<String> = ports.iter().map(ToString::to_string).collect();
        assert_eq!(servers_ports, wanted);
        // Gone before the ports are given back: an iperf3 -s still alive
        // listens again on its port after each test, and would take the
        // next test's connections there.
        for mut server in servers {
            server.kill().await.unwrap();
        }
    }
}
