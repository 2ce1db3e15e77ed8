//! After the soak: every violation, and the table.
//!
//! - a stream got a byte that was not the one sent there, or no echo;
//! - a stream connection that lived 2 s or more ended without a `closed`
//!   line for it, or with one whose reason no chaos explains;
//! - any `closed` reason not caused by the chaos: `backend_*` only within
//!   5 s after that backend was killed, `drained` only within 120 s after
//!   that backend was quarantined (its `quarantined` line) or removed (a
//!   reload for `b3`, a DNS flap for a member), `backend_removed` after a
//!   reload or a flap, `shutdown` only around the cold restart; never
//!   `no_backend`, `local_resources`, `handover`, `idle_timeout` or
//!   `pool_removed`;
//! - `/healthz` not answering outside the cold restart;
//! - a chaos step that failed (an upgrade or reload refused, ...);
//! - RSS or descriptors growing over the second half (see [`Slope`]);
//! - a process of the soak still alive after it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::chaos::Act;
use super::load::{How, StreamEnd, Traffic};

pub struct Input<'a> {
    pub secs: f64,
    pub events: &'a [Value],
    pub acts: &'a [(SystemTime, Act)],
    pub ends: &'a [StreamEnd],
    /// The P2P-shaped windows' results.
    pub p2p: &'a [Value],
    pub traffic: &'a Traffic,
    /// (seconds, RSS KiB, descriptors, live connections).
    pub samples: &'a [(f64, u64, usize, u64)],
    pub unhealthy: &'a [SystemTime],
    pub chaos_errors: &'a [String],
    pub left_behind: &'a [u32],
}

pub struct Report {
    rows: Vec<(String, String)>,
    pub violations: Vec<String>,
}

/// `2026-12-03T09:46:58.491232Z` as a time.
fn timestamp(s: &str) -> Option<SystemTime> {
    let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<u64>());
    let (hh, mm, ss) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    // Days from 1970-01-01 of a proleptic Gregorian date.
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    let nanos: u64 = format!("{frac:0<9}")[..9].parse().ok()?;
    Some(
        UNIX_EPOCH
            + Duration::from_secs(days * 86_400 + hh * 3600 + mm * 60 + ss)
            + Duration::from_nanos(nanos),
    )
}

/// A least-squares slope per minute over the samples of the second half.
#[derive(Debug, Clone, Copy)]
pub struct Slope {
    pub first: f64,
    pub last: f64,
    pub per_min: f64,
}

fn slope(points: &[(f64, f64)]) -> Option<Slope> {
    let start = points.last()?.0 / 2.0;
    let half: Vec<(f64, f64)> = points.iter().copied().filter(|p| p.0 >= start).collect();
    if half.len() < 3 {
        return None;
    }
    let n = half.len() as f64;
    let (sx, sy) = half.iter().fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = half.iter().fold((0.0, 0.0), |a, p| {
        (a.0 + (p.0 - mx) * (p.1 - my), a.1 + (p.0 - mx) * (p.0 - mx))
    });
    Some(Slope {
        first: points.first()?.1,
        last: points.last()?.1,
        per_min: if den > 0.0 { num / den * 60.0 } else { 0.0 },
    })
}

fn within(t: SystemTime, from: SystemTime, secs: f64) -> bool {
    t.duration_since(from)
        .is_ok_and(|d| d.as_secs_f64() <= secs)
}

impl Report {
    pub fn new(i: Input<'_>) -> Report {
        let mut v = Vec::new();
        let acts = i.acts;
        let cold: Vec<SystemTime> = acts
            .iter()
            .filter(|(_, a)| matches!(a, Act::ColdStop | Act::ColdStart))
            .map(|(t, _)| *t)
            .collect();
        let in_cold = |t: SystemTime| match (cold.first(), cold.last()) {
            (Some(&a), Some(&b)) => {
                t >= a.checked_sub(Duration::from_secs(1)).unwrap_or(a)
                    && t <= b + Duration::from_secs(2)
            }
            _ => false,
        };
        let acted = |t: SystemTime, secs: f64, f: &dyn Fn(&Act) -> bool| {
            acts.iter().any(|(at, a)| f(a) && within(t, *at, secs))
        };
        let quarantined_at: Vec<(SystemTime, String)> = i
            .events
            .iter()
            .filter(|e| e["message"] == "quarantined")
            .filter_map(|e| {
                Some((
                    timestamp(e["timestamp"].as_str()?)?,
                    e["backend"].as_str()?.to_owned(),
                ))
            })
            .collect();
        let is_static = |b: &str| super::STATIC.contains(&b);

        // Every close line, and the folded ones' counts.
        let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
        let mut lines: BTreeMap<String, Vec<(SystemTime, String)>> = BTreeMap::new();
        for e in i.events.iter().filter(|e| e["message"] == "closed") {
            let reason = e["reason"].as_str().unwrap_or("?").to_owned();
            let n = e["suppressed"].as_u64().unwrap_or(1);
            *by_reason.entry(reason.clone()).or_default() += n;
            let Some(t) = e["timestamp"].as_str().and_then(timestamp) else {
                v.push(format!("a closed line without a timestamp: {e}"));
                continue;
            };
            let backend = e["backend"].as_str().unwrap_or("");
            let explained = match reason.as_str() {
                "client_closed" | "client_error" | "rebalanced" => true,
                "shutdown" => in_cold(t),
                "backend_closed" | "backend_error" => {
                    e.get("suppressed").is_some()
                        || acted(t, 5.0, &|a| matches!(a, Act::Kill(n) if n == backend))
                }
                "drained" => {
                    quarantined_at
                        .iter()
                        .any(|(at, b)| b == backend && within(t, *at, 120.0))
                        || (backend == "b3"
                            && acted(t, 120.0, &|a| matches!(a, Act::Reload(Some(_)))))
                        || (!is_static(backend) && acted(t, 120.0, &|a| *a == Act::DnsFlap))
                }
                "backend_removed" => {
                    acted(t, 120.0, &|a| matches!(a, Act::Reload(_) | Act::DnsFlap))
                }
                _ => false,
            };
            if !explained {
                v.push(format!(
                    "closed, reason {reason}, not explained by the chaos: {e}"
                ));
            }
            if let Some(client) = e["client"].as_str() {
                lines
                    .entry(client.to_owned())
                    .or_default()
                    .push((t, reason));
            }
        }

        // Every stream connection: exact bytes, and an end explained.
        let mut ended_by: BTreeMap<String, u64> = BTreeMap::new();
        for end in i.ends {
            match &end.how {
                How::Ours => *ended_by.entry("soak".into()).or_default() += 1,
                How::Mismatch { at } => v.push(format!(
                    "stream {}: byte {at} is not the one sent",
                    end.local
                )),
                How::Stalled => v.push(format!("stream {}: no echo within 60 s", end.local)),
                How::Closed(why) => {
                    let lived = end.ended.duration_since(end.started).unwrap_or_default();
                    // The line nearest its end (a later client may reuse
                    // the port).
                    let gap = |t: SystemTime| {
                        t.duration_since(end.ended)
                            .or_else(|_| end.ended.duration_since(t))
                            .unwrap_or_default()
                    };
                    let line = lines.get(&end.local.to_string()).and_then(|ls| {
                        ls.iter()
                            .filter(|(t, _)| {
                                *t >= end.started && *t <= end.ended + Duration::from_secs(5)
                            })
                            .min_by_key(|(t, _)| gap(*t))
                    });
                    match line {
                        Some((_, reason)) => *ended_by.entry(reason.clone()).or_default() += 1,
                        None if lived < Duration::from_secs(2) || in_cold(end.ended) => {
                            *ended_by.entry("unlogged (short)".into()).or_default() += 1
                        }
                        None => v.push(format!(
                            "stream {}: ended ({why}) after {lived:?} without a closed line",
                            end.local
                        )),
                    }
                }
            }
        }

        // The P2P-shaped load: a connection ends only by a close (the cold
        // restart, a backend's kill, ...); any other error is a violation.
        let (mut sent, mut echoed, mut announced) = (0, 0, 0);
        let mut p2p_errors: BTreeMap<String, u64> = BTreeMap::new();
        let unix = |t: SystemTime| {
            t.duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        let cold_span = match (cold.first(), cold.last()) {
            (Some(&a), Some(&b)) => Some((unix(a) - 1.0, unix(b) + 2.0)),
            _ => None,
        };
        for w in i.p2p {
            // A window that spans the cold restart loses its connections,
            // and those still connecting then fail: that is the restart.
            let spans_cold = cold_span.is_some_and(|(a, b)| {
                w["soak_from"].as_f64().unwrap_or(0.0) <= b
                    && w["soak_to"].as_f64().unwrap_or(f64::MAX) >= a
            });
            if let Some(f) = w["failed"].as_str() {
                v.push(format!("a P2P-shaped window failed: {f}"));
            }
            sent += w["sent"].as_u64().unwrap_or(0);
            echoed += w["echoed"].as_u64().unwrap_or(0);
            announced += w["announced"].as_u64().unwrap_or(0);
            let kinds = w["error_kinds"].as_object().into_iter().flatten();
            let connect = w["connect_error_kinds"].as_object().into_iter().flatten();
            for (kind, n) in kinds.chain(connect) {
                *p2p_errors.entry(kind.clone()).or_default() += n.as_u64().unwrap_or(0);
                let closed = ["closed by the other end", "reset", "refused", "Broken pipe"];
                if !spans_cold && !closed.iter().any(|c| kind.contains(c)) {
                    v.push(format!("P2P-shaped connections: {n} × {kind}"));
                }
            }
        }

        for t in i.unhealthy.iter().filter(|t| !in_cold(**t)) {
            v.push(format!("/healthz did not answer at {t:?}"));
        }
        for e in i.chaos_errors {
            v.push(format!("chaos step failed: {e}"));
        }
        for pid in i.left_behind {
            v.push(format!("process {pid} left behind"));
        }
        let t = i.traffic;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        if load(&t.churn_mismatch) > 0 {
            v.push(format!(
                "{} churned connections echoed other bytes",
                load(&t.churn_mismatch)
            ));
        }
        let rss = slope(
            &i.samples
                .iter()
                .map(|s| (s.0, s.1 as f64))
                .collect::<Vec<_>>(),
        );
        let fds = slope(
            &i.samples
                .iter()
                // Descriptors beyond the two each live connection holds:
                // what a leak would grow, whatever the load's phase.
                .map(|s| (s.0, s.2 as f64 - 2.0 * s.3 as f64))
                .collect::<Vec<_>>(),
        );
        // Growth that would double the RSS within an hour, or add a
        // descriptor a second.
        if let Some(r) = rss
            && r.per_min > r.first / 60.0
        {
            v.push(format!(
                "RSS grows {:.0} KiB/min over the second half",
                r.per_min
            ));
        }
        if let Some(f) = fds
            && f.per_min > 60.0
        {
            v.push(format!(
                "descriptors grow {:.1}/min over the second half",
                f.per_min
            ));
        }

        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for (_, a) in acts {
            *counts.entry(a.kind()).or_default() += 1;
        }
        let fmt_slope = |s: Option<Slope>, unit: &str| match s {
            Some(s) => format!(
                "{:.0} → {:.0} {unit}, slope {:+.1} {unit}/min",
                s.first, s.last, s.per_min
            ),
            None => "too few samples".into(),
        };
        let join = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut rows = vec![
            ("duration".into(), format!("{:.0} s", i.secs)),
            (
                "connections".into(),
                format!(
                    "{} stream connections, {} churned ({} failed), {} hostile",
                    load(&t.stream_conns),
                    load(&t.churned),
                    load(&t.churn_failed),
                    load(&t.hostile)
                ),
            ),
            (
                "bytes verified".into(),
                format!("{:.1} MB (both ways)", load(&t.verified_bytes) as f64 / 1e6),
            ),
        ];
        for kind in [
            "upgrades",
            "reloads",
            "dns_flaps",
            "kills",
            "freezes",
            "quarantines",
            "cold_restarts",
        ] {
            rows.push((
                kind.into(),
                counts.get(kind).copied().unwrap_or(0).to_string(),
            ));
        }
        rows.push((
            "P2P-shaped".into(),
            format!(
                "{} windows, {sent} pings sent, {echoed} echoed, {announced} announcements; errors: {}",
                i.p2p.len(),
                if p2p_errors.is_empty() { "none".into() } else { join(&p2p_errors) }
            ),
        ));
        rows.push(("closes by reason".into(), join(&by_reason)));
        rows.push(("stream ends by reason".into(), join(&ended_by)));
        rows.push(("RSS".into(), fmt_slope(rss, "KiB")));
        rows.push((
            "descriptors beyond 2 per connection".into(),
            fmt_slope(fds, ""),
        ));
        rows.push(("violations".into(), v.len().to_string()));
        Report {
            rows,
            violations: v,
        }
    }

    pub fn table(&self) -> String {
        let mut out = String::from("| soak | |\n|---|---|\n");
        for (k, val) in &self.rows {
            let _ = writeln!(out, "| {k} | {val} |");
        }
        for (n, e) in self.violations.iter().take(20).enumerate() {
            let _ = writeln!(out, "violation {}: {e}", n + 1);
        }
        out
    }

    pub fn json(&self) -> Value {
        let rows: serde_json::Map<String, Value> = self
            .rows
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        json!({ "test": "soak", "figures": rows, "violations": self.violations })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(at: SystemTime, backend: &str, reason: &str) -> Value {
        let secs = at.duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
        let (days, rest) = (secs / 86_400, secs % 86_400);
        // 2026-12-03 is day 20,790.
        assert_eq!(days, 20_790, "the test's times are on 2026-12-03");
        let ts = format!(
            "2026-12-03T{:02}:{:02}:{:02}.000000Z",
            rest / 3600,
            rest / 60 % 60,
            rest % 60
        );
        json!({"message": "closed", "timestamp": ts, "backend": backend,
               "client": "127.0.0.1:1000", "reason": reason})
    }

    fn violations(events: &[Value], acts: &[(SystemTime, Act)]) -> Vec<String> {
        let traffic = Traffic::default();
        Report::new(Input {
            secs: 60.0,
            events,
            acts,
            ends: &[],
            p2p: &[],
            traffic: &traffic,
            samples: &[],
            unhealthy: &[],
            chaos_errors: &[],
            left_behind: &[],
        })
        .violations
    }

    #[test]
    fn a_close_counts_only_when_the_chaos_explains_it() {
        let t0 = UNIX_EPOCH + Duration::from_secs(20_790 * 86_400 + 36_000);
        let s = |n: u64| t0 + Duration::from_secs(n);
        let killed_b1 = [(s(0), Act::Kill("b1".into()))];
        assert!(violations(&[closed(s(1), "b1", "backend_closed")], &killed_b1).is_empty());
        // Another backend, or long after the kill: not explained.
        assert_eq!(
            violations(&[closed(s(1), "b2", "backend_closed")], &killed_b1).len(),
            1
        );
        assert_eq!(
            violations(&[closed(s(30), "b1", "backend_error")], &killed_b1).len(),
            1
        );
        // Never explained, whatever the chaos.
        for reason in ["no_backend", "local_resources", "handover", "idle_timeout"] {
            assert_eq!(
                violations(&[closed(s(1), "b1", reason)], &killed_b1).len(),
                1,
                "{reason}"
            );
        }
        // A shutdown only around the cold restart.
        let cold = [(s(10), Act::ColdStop), (s(12), Act::ColdStart)];
        assert!(violations(&[closed(s(11), "b1", "shutdown")], &cold).is_empty());
        assert_eq!(
            violations(&[closed(s(40), "b1", "shutdown")], &cold).len(),
            1
        );
    }

    #[test]
    fn timestamps_parse_to_the_second_and_below() {
        let t = timestamp("2026-12-03T09:46:58.491232Z").expect("parses");
        let secs = t
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        // date -u -d 2026-12-03T09:46:58Z +%s
        assert!((secs - 1_796_291_218.491_232).abs() < 1e-3, "{secs}");
        assert!(timestamp("2026-12-03 09:46:58").is_none());
    }

    #[test]
    fn a_flat_series_has_no_slope_and_a_rising_one_has_its_rate() {
        let flat: Vec<(f64, f64)> = (0..20).map(|i| (i as f64 * 5.0, 100.0)).collect();
        assert_eq!(slope(&flat).expect("enough").per_min, 0.0);
        let rising: Vec<(f64, f64)> = (0..20).map(|i| (i as f64 * 5.0, i as f64 * 5.0)).collect();
        assert!((slope(&rising).expect("enough").per_min - 60.0).abs() < 1e-9);
    }
}
