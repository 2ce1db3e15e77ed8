//! The summary run.sh prints: one Markdown table of medians across rounds
//! with pin-proxy / HAProxy ratios and a verdict per target, then the
//! targets on churn and the latency tails ([`targets`]), then the idle
//! scaling rows, then the `--scale` runs ([`scale`]) where there are any.
//! Input: the JSON lines of one run, each tagged with `round`, `target`
//! (`direct`, `pin-proxy`, `haproxy`) and `case`.

mod scale;
mod targets;

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

/// Ratios this close to a 1.0 target count as ties (the run-to-run noise).
const TIE: f64 = 0.15;

const DIRECT: &str = "direct";
const PIN: &str = "pin-proxy";
const HA: &str = "haproxy";

/// Which way is better.
#[derive(Clone, Copy, PartialEq)]
enum Better {
    Higher,
    Lower,
}

/// One figure: a metric of one case, and its target ratio to HAProxy.
struct Metric {
    case: &'static str,
    field: &'static str,
    better: Better,
    target: f64,
}

const fn m(case: &'static str, field: &'static str, better: Better, target: f64) -> Metric {
    Metric {
        case,
        field,
        better,
        target,
    }
}

/// A figure with no target: shown and compared, never judged.
const fn info(case: &'static str, field: &'static str, better: Better) -> Metric {
    m(case, field, better, f64::NAN)
}

use Better::{Higher, Lower};

/// The rows, in the shape of issue 5's reference table (plus a few).
const ROWS: &[(&str, &[Metric])] = &[
    (
        "iperf3 1 stream, Gbit/s",
        &[m("iperf1", "gbit_s", Higher, 1.0)],
    ),
    (
        "iperf3 8 streams to one server (one receiving thread), Gbit/s",
        &[m("iperf8", "gbit_s", Higher, 1.0)],
    ),
    (
        "iperf3 8 streams to 8 servers (one receiving thread each), Gbit/s",
        &[m("iperf8r", "gbit_s", Higher, 1.0)],
    ),
    (
        "proxy CPU s per GB (1 stream)",
        &[m("iperf1", "cpu_s_per_gb", Lower, 1.0)],
    ),
    (
        "proxy CPU s per GB (8 streams to one server)",
        &[m("iperf8", "cpu_s_per_gb", Lower, 1.0)],
    ),
    (
        "proxy CPU s per GB (8 streams to 8 servers)",
        &[m("iperf8r", "cpu_s_per_gb", Lower, 1.0)],
    ),
    (
        "ping-pong 64 B, 1 conn, client+proxy+backend on one CPU: p50 µs / req/s",
        &[m("pp1", "p50_us", Lower, 1.0), m("pp1", "rps", Higher, 1.0)],
    ),
    (
        "ping-pong 64 B, 1 conn pinned (same): p99 µs",
        &[m("pp1", "p99_us", Lower, 1.0)],
    ),
    (
        "proxy CPU µs per request (same)",
        &[m("pp1", "cpu_us_per_req", Lower, 1.0)],
    ),
    (
        "ping-pong 64 B, 64 conns: req/s, p99 µs",
        &[
            m("pp64", "rps", Higher, 1.0),
            m("pp64", "p99_us", Lower, 1.0),
        ],
    ),
    (
        "ping-pong 64 B, 64 conns: p50 µs",
        &[m("pp64", "p50_us", Lower, 1.0)],
    ),
    (
        "proxy CPU µs per request (64 conns)",
        &[m("pp64", "cpu_us_per_req", Lower, 1.0)],
    ),
    (
        "connect+echo+close, 32 concurrent, backend closes first: conn/s",
        &[m("churn", "conn_per_s", Higher, 1.0)],
    ),
    (
        "proxy CPU µs per connection (same)",
        &[m("churn", "cpu_us_per_conn", Lower, 1.0)],
    ),
    (
        "connect to close (same): p50 / p99 µs",
        &[
            info("churn", "p50_us", Lower),
            info("churn", "p99_us", Lower),
        ],
    ),
    (
        "connect+echo+close, 32 concurrent over two targets, client closes first: conn/s",
        &[info("churn_cf", "conn_per_s", Higher)],
    ),
    (
        "proxy CPU µs per connection (same)",
        &[info("churn_cf", "cpu_us_per_conn", Lower)],
    ),
    (
        "connect to close (same): p50 / p99 µs",
        &[
            info("churn_cf", "p50_us", Lower),
            info("churn_cf", "p99_us", Lower),
        ],
    ),
    (
        "RSS per idle connection (at the held count), KiB",
        &[m("idle", "kib_per_conn", Lower, 0.5)],
    ),
    (
        "idle connections held and verified after hold",
        &[m("idle", "alive_after_hold", Higher, 1.0)],
    ),
];

/// Render the summary of `results` (JSON lines).
///
/// # Errors
/// When the file cannot be read or a line is not JSON.
pub fn render(results: &Path, haproxy_label: &str) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(results).with_context(|| format!("read {}", results.display()))?;
    let recs: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("parse results line")?;
    let mut out = String::new();
    writeln!(
        out,
        "| figure | no proxy (loopback limit) | {haproxy_label} | pin-proxy | pin-proxy / HAProxy | per round | target | verdict |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---|---|---|")?;
    for (label, metrics) in ROWS {
        let cell = |target: &str| {
            let parts: Vec<String> = metrics
                .iter()
                .map(|mt| fmt(median(&values(&recs, target, mt.case, mt.field))))
                .collect();
            parts.join(" / ")
        };
        let direct = if metrics.iter().all(|mt| is_proxy_only(mt.field)) {
            "–".to_owned()
        } else {
            cell(DIRECT)
        };
        let (mut ratios, mut rounds, mut targets, mut verdicts) = (vec![], vec![], vec![], vec![]);
        for mt in metrics.iter() {
            let ratio = ratio_of_medians(&recs, mt);
            ratios.push(ratio.map_or("–".into(), |r| format!("{r:.2}")));
            rounds.push(per_round(&recs, mt).join(" "));
            let sign = if mt.better == Higher { "≥" } else { "≤" };
            targets.push(if mt.target.is_nan() {
                "–".to_owned()
            } else {
                format!("{sign} {:.1}×", mt.target)
            });
            verdicts.push(verdict(ratio, mt));
        }
        writeln!(
            out,
            "| {label} | {direct} | {} | {} | {} | {} | {} | {} |",
            cell(HA),
            cell(PIN),
            ratios.join(" / "),
            rounds.join(" / "),
            targets.join(" / "),
            verdicts.join(" / ")
        )?;
    }
    out.push('\n');
    out.push_str(&targets::render(&recs)?);
    out.push_str(&loop_spread(&recs)?);
    out.push_str(&scaling(&recs)?);
    out.push_str(&scale::render(&recs)?);
    Ok(out)
}

fn is_proxy_only(field: &str) -> bool {
    field.starts_with("cpu_") || field == "kib_per_conn" || field == "alive_after_hold"
}

fn values(recs: &[Value], target: &str, case: &str, field: &str) -> Vec<f64> {
    recs.iter()
        .filter(|r| r["target"] == target && r["case"] == case)
        .filter_map(|r| r[field].as_f64())
        .collect()
}

/// pin-proxy's median across rounds over HAProxy's.
fn ratio_of_medians(recs: &[Value], mt: &Metric) -> Option<f64> {
    div(
        median(&values(recs, PIN, mt.case, mt.field)),
        median(&values(recs, HA, mt.case, mt.field)),
    )
}

/// pin-proxy / HAProxy in each round where both have the figure.
fn per_round(recs: &[Value], mt: &Metric) -> Vec<String> {
    round_ratios(recs, mt)
        .into_iter()
        .map(|r| format!("{r:.2}"))
        .collect()
}

/// [`per_round`]'s ratios as numbers, in round order.
fn round_ratios(recs: &[Value], mt: &Metric) -> Vec<f64> {
    let mut rounds: Vec<i64> = recs.iter().filter_map(|r| r["round"].as_i64()).collect();
    rounds.sort_unstable();
    rounds.dedup();
    let get = |round: i64, target: &str| {
        recs.iter()
            .find(|r| r["round"] == round && r["target"] == target && r["case"] == mt.case)
            .and_then(|r| r[mt.field].as_f64())
    };
    rounds
        .into_iter()
        .filter_map(|n| div(get(n, PIN), get(n, HA)))
        .collect()
}

/// The 64-connection ping-pong per round: how pin-proxy's and HAProxy's
/// event loops shared the connections (`loop_conns`, from their epoll
/// sets) and the CPU (`thread_cpu_s`), beside the round's ratios.
fn loop_spread(recs: &[Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    let find = |round: &Value, target: &str| {
        recs.iter()
            .find(|r| r["round"] == *round && r["target"] == target && r["case"] == "pp64")
    };
    let split = |r: Option<&Value>| -> String {
        let Some(r) = r else { return "–".into() };
        let conns: Vec<String> = r["loop_conns"]
            .as_array()
            .map(|a| a.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default();
        let cpu: Vec<String> = r["thread_cpu_s"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t[1].as_f64())
                    .map(|s| format!("{s:.2}"))
                    .collect()
            })
            .unwrap_or_default();
        format!("{} ({} s)", conns.join("/"), cpu.join("/"))
    };
    let ratio = |pin: Option<&Value>, ha: Option<&Value>, field: &str| {
        div(
            pin.and_then(|r| r[field].as_f64()),
            ha.and_then(|r| r[field].as_f64()),
        )
        .map_or("–".into(), |r| format!("{r:.2}"))
    };
    let rounds: Vec<&Value> = recs
        .iter()
        .filter(|r| r["case"] == "pp64" && r["target"] == PIN && r.get("loop_conns").is_some())
        .map(|r| &r["round"])
        .collect();
    if rounds.is_empty() {
        return Ok(out);
    }
    writeln!(
        out,
        "64 connections over the event loops (connections per loop, and CPU s per loop thread):\n"
    )?;
    writeln!(
        out,
        "| round | pin-proxy | HAProxy | req/s pin/HA | p99 pin/HA |"
    )?;
    writeln!(out, "|---|---|---|---:|---:|")?;
    for round in rounds {
        let (pin, ha) = (find(round, PIN), find(round, HA));
        writeln!(
            out,
            "| {round} | {} | {} | {} | {} |",
            split(pin),
            split(ha),
            ratio(pin, ha, "rps"),
            ratio(pin, ha, "p99_us")
        )?;
    }
    out.push('\n');
    Ok(out)
}

fn verdict(ratio: Option<f64>, mt: &Metric) -> &'static str {
    if mt.target.is_nan() {
        return "–";
    }
    let Some(r) = ratio else { return "no data" };
    let band = if mt.target == 1.0 { TIE } else { 0.0 };
    let (met, tie) = match mt.better {
        Higher => (r >= mt.target, r >= mt.target - band),
        Lower => (r <= mt.target, r <= mt.target + band),
    };
    match (met, tie) {
        (true, _) => "met",
        (false, true) => "tie (noise)",
        _ => "MISSED",
    }
}

/// The idle scaling rows: medians per step across rounds.
fn scaling(recs: &[Value]) -> anyhow::Result<String> {
    let steps = |target: &str| -> Vec<Vec<Value>> {
        recs.iter()
            .filter(|r| r["target"] == target && r["case"] == "idle")
            .filter_map(|r| r["steps"].as_array().cloned())
            .collect()
    };
    let (pin, ha) = (steps(PIN), steps(HA));
    let n = pin.iter().chain(&ha).map(Vec::len).max().unwrap_or(0);
    let at = |runs: &[Vec<Value>], i: usize, field: &str| {
        median(
            &runs
                .iter()
                .filter_map(|s| s.get(i).and_then(|row| row[field].as_f64()))
                .collect::<Vec<_>>(),
        )
    };
    let mut out = String::new();
    writeln!(
        out,
        "| idle conns held | pin-proxy RSS Δ MiB (KiB/conn) | HAProxy RSS Δ MiB (KiB/conn) | pin-proxy CPU to open, µs/conn | HAProxy CPU to open, µs/conn | pin-proxy CPU while idle, % | HAProxy CPU while idle, % | pin-proxy ramp, conn/s | HAProxy ramp, conn/s |"
    )?;
    writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for i in 0..n {
        let mib = |runs: &[Vec<Value>]| {
            format!(
                "{} ({})",
                fmt(at(runs, i, "rss_delta_kib").map(|k| k / 1024.0)),
                fmt(at(runs, i, "kib_per_conn"))
            )
        };
        // The proxies may hold different counts at the last step.
        let held = match (at(&pin, i, "held"), at(&ha, i, "held")) {
            (Some(p), Some(h)) if p != h => format!("{} / {}", fmt(Some(p)), fmt(Some(h))),
            (p, h) => fmt(p.or(h)),
        };
        writeln!(
            out,
            "| {held} | {} | {} | {} | {} | {} | {} | {} | {} |",
            mib(&pin),
            mib(&ha),
            fmt(at(&pin, i, "setup_cpu_us_per_conn")),
            fmt(at(&ha, i, "setup_cpu_us_per_conn")),
            fmt(at(&pin, i, "idle_cpu_pct")),
            fmt(at(&ha, i, "idle_cpu_pct")),
            fmt(at(&pin, i, "ramp_conn_per_s")),
            fmt(at(&ha, i, "ramp_conn_per_s")),
        )?;
    }
    Ok(out)
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if !n.is_multiple_of(2) => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

fn div(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

/// 3 significant figures at most, thousands separated: 0.41, 16.1, 56,058.
fn fmt(v: Option<f64>) -> String {
    let Some(v) = v else { return "–".into() };
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        let n = v.round() as i64;
        let digits = n.abs().to_string();
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(c);
        }
        if n < 0 {
            format!("-{grouped}")
        } else {
            grouped
        }
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_the_reference_table() {
        assert_eq!(fmt(Some(56058.4)), "56,058");
        assert_eq!(fmt(Some(16.14)), "16.1");
        assert_eq!(fmt(Some(0.412)), "0.41");
        assert_eq!(fmt(None), "–");
    }

    #[test]
    fn medians_and_verdicts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[1.0, 2.0]), Some(1.5));
        let hi = m("x", "y", Higher, 1.0);
        assert_eq!(verdict(Some(1.02), &hi), "met");
        assert_eq!(verdict(Some(0.9), &hi), "tie (noise)");
        assert_eq!(verdict(Some(0.8), &hi), "MISSED");
        let rss = m("idle", "kib_per_conn", Lower, 0.5);
        assert_eq!(verdict(Some(0.55), &rss), "MISSED");
    }
}
