//! The performance targets on connection churn and the latency tails, each
//! judged strictly (no noise band) on pin-proxy / HAProxy of the medians
//! across rounds, as the main table computes its ratios. Beside it, the
//! median of the per-round ratios: both proxies of a round ran within a
//! minute of each other, so that figure cancels the machine's drift from
//! round to round, which the ratio of medians does not.

use std::fmt::Write as _;

use serde_json::Value;

use super::Better::{Higher, Lower};
use super::{Metric, m, median, ratio_of_medians, round_ratios};

/// The figures and their targets.
const TARGETS: &[(&str, Metric)] = &[
    (
        "churn, backend closes first: conn/s",
        m("churn", "conn_per_s", Higher, 1.05),
    ),
    (
        "churn, backend closes first: CPU µs per connection",
        m("churn", "cpu_us_per_conn", Lower, 0.95),
    ),
    (
        "churn, backend closes first: p99 µs",
        m("churn", "p99_us", Lower, 1.0),
    ),
    (
        "churn, client closes first (two targets): conn/s",
        m("churn_cf", "conn_per_s", Higher, 1.05),
    ),
    (
        "churn, client closes first (two targets): CPU µs per connection",
        m("churn_cf", "cpu_us_per_conn", Lower, 0.95),
    ),
    (
        "churn, client closes first (two targets): p99 µs",
        m("churn_cf", "p99_us", Lower, 1.0),
    ),
    (
        "ping-pong 64 B, 64 conns: p99.9 µs",
        m("pp64", "p999_us", Lower, 1.0),
    ),
    (
        "ping-pong 64 B, 1 conn pinned: p99 µs",
        m("pp1", "p99_us", Lower, 0.95),
    ),
];

/// The section, after a blank line; empty when no run has these cases.
pub(super) fn render(recs: &[Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    let present = |mt: &Metric| recs.iter().any(|r| r["case"] == mt.case);
    if !TARGETS.iter().any(|(_, mt)| present(mt)) {
        return Ok(out);
    }
    writeln!(
        out,
        "Targets on churn and the tails (verdict on the ratio of medians, strict):\n"
    )?;
    writeln!(
        out,
        "| figure | pin-proxy / HAProxy (medians) | median of per-round ratios | per round | target | verdict |"
    )?;
    writeln!(out, "|---|---:|---:|---|---|---|")?;
    for (label, mt) in TARGETS {
        let ratio = ratio_of_medians(recs, mt);
        let rounds = round_ratios(recs, mt);
        let listed: Vec<String> = rounds.iter().map(|r| format!("{r:.2}")).collect();
        let sign = if mt.better == Higher { "≥" } else { "≤" };
        writeln!(
            out,
            "| {label} | {} | {} | {} | {sign} {:.2}× | {} |",
            two(ratio),
            two(median(&rounds)),
            listed.join(" "),
            mt.target,
            verdict(ratio, mt)
        )?;
    }
    out.push('\n');
    Ok(out)
}

fn two(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.2}"))
}

/// Met or missed exactly as the target reads.
fn verdict(ratio: Option<f64>, mt: &Metric) -> &'static str {
    match (ratio, mt.better) {
        (None, _) => "no data",
        (Some(r), Higher) if r >= mt.target => "met",
        (Some(r), Lower) if r <= mt.target => "met",
        _ => "MISSED",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{HA, PIN};
    use super::*;

    fn run(round: i64, target: &str, conn_per_s: f64) -> Value {
        json!({ "round": round, "target": target, "case": "churn", "conn_per_s": conn_per_s })
    }

    #[test]
    fn judges_the_ratio_of_medians_and_lists_the_paired_one() {
        // Round 2 ran on a slower machine: its pair is level, the other two
        // put pin-proxy 1.10 ahead.
        let recs = [
            run(1, PIN, 11_000.0),
            run(1, HA, 10_000.0),
            run(2, PIN, 6_000.0),
            run(2, HA, 6_000.0),
            run(3, PIN, 8_800.0),
            run(3, HA, 8_000.0),
        ];
        let out = render(&recs).unwrap();
        let row = out
            .lines()
            .find(|l| l.starts_with("| churn, backend closes first: conn/s"))
            .unwrap();
        // Medians 8,800 / 8,000 = 1.10; per round 1.10 1.00 1.10.
        assert_eq!(
            row,
            "| churn, backend closes first: conn/s | 1.10 | 1.10 | 1.10 1.00 1.10 | ≥ 1.05× | met |"
        );
        let cpu = out
            .lines()
            .find(|l| l.starts_with("| churn, backend closes first: CPU"))
            .unwrap();
        assert!(cpu.ends_with("| no data |"), "{cpu}");
    }

    #[test]
    fn strict_verdicts() {
        let hi = m("x", "y", Higher, 1.05);
        assert_eq!(verdict(Some(1.05), &hi), "met");
        assert_eq!(verdict(Some(1.04), &hi), "MISSED");
        let lo = m("x", "y", Lower, 1.0);
        assert_eq!(verdict(Some(1.01), &lo), "MISSED");
        assert_eq!(verdict(Some(1.0), &lo), "met");
        assert_eq!(verdict(None, &lo), "no data");
    }

    #[test]
    fn nothing_without_the_cases() {
        let recs = [json!({ "round": 1, "target": PIN, "case": "iperf1", "gbit_s": 20.0 })];
        assert_eq!(render(&recs).unwrap(), "");
    }
}
