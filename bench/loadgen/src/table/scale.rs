//! The `--scale` part of the summary: the P2P load (no proxy, HAProxy,
//! pin-proxy; latency added over no proxy), pin-proxy's spread drain, and
//! the live upgrade. Each section only when the results have its case.

use std::fmt::Write as _;

use serde_json::Value;

use super::{DIRECT, HA, PIN, div, fmt, info, median, per_round, values};

// The direction only names the figure; nothing here has a target.
use super::Better::Lower;

/// The three sections, each after a blank line.
pub(super) fn render(recs: &[Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    out.push_str(&p2p(recs)?);
    out.push_str(&drain(recs)?);
    out.push_str(&upgrade(recs)?);
    Ok(out)
}

/// `a / b / c` of the medians of `fields` for `target`.
fn cells(recs: &[Value], target: &str, case: &str, fields: &[&str]) -> String {
    let parts: Vec<String> = fields
        .iter()
        .map(|f| fmt(median(&values(recs, target, case, f))))
        .collect();
    parts.join(" / ")
}

/// The median of one target's figure minus no proxy's, per field.
fn added(recs: &[Value], target: &str, case: &str, fields: &[&str]) -> Vec<Option<f64>> {
    fields
        .iter()
        .map(|f| {
            let t = median(&values(recs, target, case, f))?;
            let d = median(&values(recs, DIRECT, case, f))?;
            Some(t - d)
        })
        .collect()
}

/// A count (connections, closes, errors): whole, thousands separated.
fn count(v: Option<f64>) -> String {
    match v {
        Some(x) if x.abs() < 100.0 => format!("{}", x.round() as i64),
        other => fmt(other.map(f64::round)),
    }
}

fn joined(v: &[Option<f64>], each: impl Fn(Option<f64>) -> String) -> String {
    v.iter().map(|&x| each(x)).collect::<Vec<_>>().join(" / ")
}

fn ratio(r: Option<f64>) -> String {
    r.map_or("–".into(), |r| format!("{r:.2}"))
}

const RTT: [&str; 3] = ["rtt_p50_us", "rtt_p99_us", "rtt_p999_us"];
const CALM: [&str; 3] = ["rtt_calm_p50_us", "rtt_calm_p99_us", "rtt_calm_p999_us"];
const STALLS: [&str; 2] = ["stall_slots", "stall_pings"];
const ONEWAY: [&str; 3] = ["oneway_p50_us", "oneway_p99_us", "oneway_p999_us"];
const HEALTH: [&str; 4] = ["established", "connect_errors", "errors", "echo_missing"];

fn p2p(recs: &[Value]) -> anyhow::Result<String> {
    let case = "p2p";
    let Some(first) = recs.iter().find(|r| r["case"] == case) else {
        return Ok(String::new());
    };
    let mut out = String::new();
    writeln!(
        out,
        "\nP2P load: {} connections, {} s recorded, messages of 100-300 B every 1-2 s both ways (medians across rounds):\n",
        count(first["conns"].as_f64()),
        count(first["secs"].as_f64()),
    )?;
    writeln!(
        out,
        "| figure | no proxy | HAProxy | pin-proxy | pin-proxy / HAProxy | per round |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---|")?;
    // (label, fields, whether no proxy has it)
    let rows: [(&str, &[&str], bool); 8] = [
        ("round trip p50 / p99 / p99.9, µs", &RTT, true),
        (
            "stalls: 10 ms slots where ≥ 90 % of ≥ 10 pings took over 2 ms / pings sent in them",
            &STALLS,
            true,
        ),
        (
            "round trip outside the stalls p50 / p99 / p99.9, µs",
            &CALM,
            true,
        ),
        (
            "one-way backend → client p50 / p99 / p99.9, µs",
            &ONEWAY,
            true,
        ),
        ("proxy CPU, % of one CPU", &["proxy_cpu_pct"], false),
        ("client CPU, % of one CPU", &["client_cpu_pct"], true),
        ("backend CPU, % of one CPU", &["server_cpu_pct"], true),
        (
            "messages/s (pings, echoes, announcements)",
            &["msgs_per_s"],
            true,
        ),
    ];
    for (label, fields, direct) in rows {
        let (mut ratios, mut rounds) = (vec![], vec![]);
        for f in fields {
            ratios.push(div(
                median(&values(recs, PIN, case, f)),
                median(&values(recs, HA, case, f)),
            ));
            rounds.push(per_round(recs, &info(case, f, Lower)).join(" "));
        }
        let d = if direct {
            cells(recs, DIRECT, case, fields)
        } else {
            "–".to_owned()
        };
        writeln!(
            out,
            "| {label} | {d} | {} | {} | {} | {} |",
            cells(recs, HA, case, fields),
            cells(recs, PIN, case, fields),
            joined(&ratios, ratio),
            rounds.join(" / "),
        )?;
    }
    let health = |target: &str| joined(&medians(recs, target, case, &HEALTH), count);
    writeln!(
        out,
        "| established / connect errors / errors after / echoes missing | {} | {} | {} | – | – |",
        health(DIRECT),
        health(HA),
        health(PIN),
    )?;
    for (label, fields) in [
        (
            "added round trip (minus no proxy) p50 / p99 / p99.9, µs",
            &RTT,
        ),
        (
            "added one-way (minus no proxy) p50 / p99 / p99.9, µs",
            &ONEWAY,
        ),
    ] {
        let (ha, pin) = (
            added(recs, HA, case, fields),
            added(recs, PIN, case, fields),
        );
        // A ratio of differences only says something when both are added
        // time; at the far tail one may come out below no proxy's (noise).
        let ratios: Vec<Option<f64>> = pin
            .iter()
            .zip(&ha)
            .map(|(&p, &h)| match (p, h) {
                (Some(p), Some(h)) if p > 0.0 && h > 0.0 => Some(p / h),
                _ => None,
            })
            .collect();
        writeln!(
            out,
            "| {label} | – | {} | {} | {} | – |",
            joined(&ha, fmt),
            joined(&pin, fmt),
            joined(&ratios, ratio),
        )?;
    }
    Ok(out)
}

/// The median of each of `fields` for `target`.
fn medians(recs: &[Value], target: &str, case: &str, fields: &[&str]) -> Vec<Option<f64>> {
    fields
        .iter()
        .map(|f| median(&values(recs, target, case, f)))
        .collect()
}

/// The scale of a drain row whose figures are counts.
const COUNT: f64 = 0.0;

fn drain(recs: &[Value]) -> anyhow::Result<String> {
    let runs: Vec<&Value> = recs.iter().filter(|r| r["case"] == "drain").collect();
    let Some(first) = runs.first() else {
        return Ok(String::new());
    };
    let mut out = String::new();
    writeln!(
        out,
        "\nDrain (pin-proxy only): {} idle clients on one backend, quarantined with `health.drain_spread` {} ms; each client redials and echoes 4 B; {} ping-pong connections on the other backend (median, then each round):\n",
        count(first["conns"].as_f64()),
        count(first["spread_ms"].as_f64()),
        count(first["pingers"].as_f64()),
    )?;
    writeln!(out, "| figure | median | per round |")?;
    writeln!(out, "|---|---:|---|")?;
    let rows: [(&str, &[&str], f64); 9] = [
        ("drain, first close to last, ms", &["drain_ms"], 1.0),
        (
            "first close after the quarantine request, ms",
            &["first_close_ms"],
            1.0,
        ),
        (
            "most closes in 100 ms / planned",
            &["max_closes_per_100ms", "planned_closes_per_100ms"],
            1.0,
        ),
        (
            "longest pause between two closes, ms",
            &["max_close_pause_ms"],
            1.0,
        ),
        (
            "close to re-established echo p50 / p99 / max, ms",
            &["gap_p50_us", "gap_p99_us", "gap_max_us"],
            1e-3,
        ),
        (
            "clients closed / re-established / failed redials / never back / not closed",
            &[
                "closed",
                "reopened",
                "redials_failed",
                "never_reopened",
                "not_closed",
            ],
            COUNT,
        ),
        (
            "pingers' longest round trip, during / before, ms",
            &["ping_drain_max_us", "ping_baseline_max_us"],
            1e-3,
        ),
        (
            "pingers' p99 round trip, during / before, ms",
            &["ping_drain_p99_us", "ping_baseline_p99_us"],
            1e-3,
        ),
        (
            "proxy CPU from the request to the last echo, s",
            &["proxy_cpu_s"],
            1.0,
        ),
    ];
    for (label, fields, scale) in rows {
        let show = |v: Option<f64>| {
            if scale == COUNT {
                count(v)
            } else {
                fmt(v.map(|v| v * scale))
            }
        };
        let each = |r: &Value| {
            fields
                .iter()
                .map(|f| show(r[*f].as_f64()))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let med: Vec<String> = fields
            .iter()
            .map(|f| {
                let v: Vec<f64> = runs.iter().filter_map(|r| r[*f].as_f64()).collect();
                show(median(&v))
            })
            .collect();
        let rounds: Vec<String> = runs.iter().map(|r| each(r)).collect();
        writeln!(
            out,
            "| {label} | {} | {} |",
            med.join(" / "),
            rounds.join("; ")
        )?;
    }
    Ok(out)
}

fn upgrade(recs: &[Value]) -> anyhow::Result<String> {
    let runs: Vec<&Value> = recs.iter().filter(|r| r["case"] == "upgrade").collect();
    let Some(first) = runs.first() else {
        return Ok(String::new());
    };
    let mut out = String::new();
    writeln!(
        out,
        "\nLive upgrade (pin-proxy only): {} connections, {} of them in ping-pong (median of every upgrade, then each round's upgrades):\n",
        count(first["conns"].as_f64()),
        count(first["pingers"].as_f64()),
    )?;
    writeln!(out, "| figure | median | each upgrade |")?;
    writeln!(out, "|---|---:|---|")?;
    let rows: [(&str, &str, f64); 5] = [
        ("handover, ms", "handover_ms", 1.0),
        ("adoption in the new process, ms", "adopt_ms", 1.0),
        (
            "longest ping-pong round trip during it, ms",
            "stall_max_us",
            1e-3,
        ),
        (
            "new process's RSS before adoption, MiB",
            "rss_new_before_kib",
            1.0 / 1024.0,
        ),
        (
            "new process's RSS after adoption, MiB",
            "rss_new_after_kib",
            1.0 / 1024.0,
        ),
    ];
    for (label, field, scale) in rows {
        let per_run: Vec<Vec<f64>> = runs
            .iter()
            .map(|r| {
                r["upgrades"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|u| u[field].as_f64().map(|v| v * scale))
                    .collect()
            })
            .collect();
        let all: Vec<f64> = per_run.iter().flatten().copied().collect();
        let each: Vec<String> = per_run
            .iter()
            .map(|v| {
                v.iter()
                    .map(|&x| fmt(Some(x)))
                    .collect::<Vec<_>>()
                    .join(" / ")
            })
            .collect();
        writeln!(
            out,
            "| {label} | {} | {} |",
            fmt(median(&all)),
            each.join("; ")
        )?;
    }
    for (label, field, scale) in [
        (
            "longest round trip without an upgrade (2 s), ms",
            "baseline_max_us",
            1e-3,
        ),
        ("old process's RSS, MiB", "rss_old_kib", 1.0 / 1024.0),
    ] {
        let v: Vec<f64> = runs
            .iter()
            .filter_map(|r| r[field].as_f64().map(|v| v * scale))
            .collect();
        let each: Vec<String> = v.iter().map(|&x| fmt(Some(x))).collect();
        writeln!(
            out,
            "| {label} | {} | {} |",
            fmt(median(&v)),
            each.join("; ")
        )?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn added_latency_is_the_median_over_no_proxy() {
        let recs = vec![
            json!({ "case": "p2p", "target": "direct", "round": 1, "rtt_p50_us": 100.0, "conns": 10, "secs": 5 }),
            json!({ "case": "p2p", "target": "pin-proxy", "round": 1, "rtt_p50_us": 130.0 }),
            json!({ "case": "p2p", "target": "haproxy", "round": 1, "rtt_p50_us": 160.0 }),
        ];
        assert_eq!(added(&recs, PIN, "p2p", &["rtt_p50_us"]), [Some(30.0)]);
        let text = p2p(&recs).unwrap();
        assert!(
            text.contains("| 60.0 / – / – | 30.0 / – / – | 0.50 / – / – |"),
            "{text}"
        );
        assert!(drain(&recs).unwrap().is_empty());
    }

    #[test]
    fn stall_rows_show_every_target_and_the_ratio() {
        let recs = vec![
            json!({ "case": "p2p", "target": "direct", "round": 1, "stall_slots": 4.0, "stall_pings": 200.0, "rtt_calm_p999_us": 900.0, "conns": 10, "secs": 5 }),
            json!({ "case": "p2p", "target": "pin-proxy", "round": 1, "stall_slots": 10.0, "stall_pings": 500.0, "rtt_calm_p999_us": 1000.0 }),
            json!({ "case": "p2p", "target": "haproxy", "round": 1, "stall_slots": 40.0, "stall_pings": 2000.0, "rtt_calm_p999_us": 2000.0 }),
        ];
        let text = p2p(&recs).unwrap();
        assert!(
            text.contains(
                "pings sent in them | 4.00 / 200 | 40.0 / 2,000 | 10.0 / 500 | 0.25 / 0.25 |"
            ),
            "{text}"
        );
        assert!(
            text.contains("outside the stalls p50 / p99 / p99.9, µs | – / – / 900 | – / – / 2,000 | – / – / 1,000 | – / – / 0.50 |"),
            "{text}"
        );
    }
}
