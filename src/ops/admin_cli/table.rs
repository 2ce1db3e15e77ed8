//! The `status` command's table: one block per pool, one row per backend.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use crate::ops::status::{BackendStatus, PoolStatus, Status};
use crate::pool::health::{ProbeOutcome, QuarantineReason, State};

const HEADER: [&str; 9] = [
    "BACKEND",
    "STATE",
    "CONNS",
    "HEIGHT",
    "LAG",
    "QUARANTINE",
    "LAST PROBE",
    "BYTES UP",
    "BYTES DOWN",
];
/// Columns aligned right (numbers).
const RIGHT: [bool; 9] = [false, false, true, true, true, false, false, true, true];

/// `status` as text, with ages and remaining windows relative to `now`.
pub fn render(status: &Status, now: SystemTime) -> String {
    let mut out = format!(
        "pin-proxy {}, pid {}, generation {}, up {}\n",
        status.version,
        status.pid,
        status.generation,
        crate::config::span(Duration::from_secs(status.uptime_s))
    );
    for pool in &status.pools {
        out.push('\n');
        pool_block(&mut out, pool, now);
    }
    out
}

fn pool_block(out: &mut String, pool: &PoolStatus, now: SystemTime) {
    let listen: Vec<String> = pool.listen.iter().map(ToString::to_string).collect();
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "pool {}  listen {}  connections {}",
        pool.name,
        listen.join(", "),
        pool.connections
    );
    let mut rows = vec![HEADER.map(str::to_owned)];
    let best = best_height(pool);
    rows.extend(pool.backends.iter().map(|b| row(b, pool, best, now)));
    aligned(out, &rows, &RIGHT);
    for b in &pool.backends {
        if let Some(node) = &b.node {
            let _ = writeln!(out, "  node {}: {node}", b.name);
        }
        if b.state == State::Unsuitable
            && let Some(p) = &b.last_probe
        {
            let _ = writeln!(out, "  unsuitable {}: {}", b.name, p.detail);
        }
    }
    for d in &pool.discovery {
        let last = match (&d.last_lookup, &d.error) {
            (None, _) => "not looked up yet".to_owned(),
            (Some(at), None) => format!("last lookup ok {} ago", ago(at, now)),
            (Some(at), Some(e)) => {
                format!("last lookup failed {} ago: {e}; members kept", ago(at, now))
            }
        };
        let _ = writeln!(
            out,
            "  discovered {} from {}: {} members, {last}",
            d.name, d.query, d.members
        );
    }
}

/// `rows` (the header first) in columns, each as wide as its widest
/// cell, aligned right where `right` says, indented by two spaces.
pub(super) fn aligned<const N: usize>(out: &mut String, rows: &[[String; N]], right: &[bool; N]) {
    let widths: Vec<usize> = (0..N)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .zip(right)
            .map(|((cell, &w), &right)| {
                if right {
                    format!("{cell:>w$}")
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        // Writing to a String cannot fail.
        let _ = writeln!(out, "  {}", cells.join("  ").trim_end());
    }
}

fn ago(at: &str, now: SystemTime) -> String {
    parse(at).map_or_else(|| at.to_owned(), |at| age(at, now))
}

/// The highest height among the pool's usable backends outside a
/// quarantine: what the LAG column counts from (as the status page does).
fn best_height(pool: &PoolStatus) -> Option<u64> {
    pool.backends
        .iter()
        .filter(|b| b.state.is_usable() && b.quarantine.is_none())
        .filter_map(|b| b.height)
        .max()
}

/// How far `height` trails `best`: `9`, `0`, `2 ahead`, `-` when either
/// is unknown.
fn lag(height: Option<u64>, best: Option<u64>) -> String {
    match (height, best) {
        (Some(h), Some(best)) if h > best => format!("{} ahead", h - best),
        (Some(h), Some(best)) => (best - h).to_string(),
        _ => "-".to_owned(),
    }
}

fn row(b: &BackendStatus, pool: &PoolStatus, best: Option<u64>, now: SystemTime) -> [String; 9] {
    let name = if b.backup {
        format!("{} (backup)", b.name)
    } else {
        b.name.clone()
    };
    let quarantine = b.quarantine.as_ref().map_or_else(
        || "-".to_owned(),
        |q| match parse(&q.until) {
            Some(until) if until <= now => format!("{} until {} (ended)", q.reason, q.until),
            Some(until) => format!("{} until {} ({} left)", q.reason, q.until, age(now, until)),
            None => format!("{} until {}", q.reason, q.until),
        },
    );
    let probe = b.last_probe.as_ref().map_or_else(
        || "-".to_owned(),
        |p| match parse(&p.at) {
            Some(at) => format!("{} {} ago", p.outcome, age(at, now)),
            None => p.outcome.to_string(),
        },
    );
    let mut state = state(b, pool, now);
    if let Some(at) = &b.leaving_at {
        // Writing to a String cannot fail.
        let _ = write!(state, ", leaving at {at} (not in DNS answers)");
    }
    [
        name,
        state,
        b.connections.to_string(),
        b.height.map_or_else(|| "-".to_owned(), |h| h.to_string()),
        lag(b.height, best),
        quarantine,
        probe,
        bytes(b.bytes_up),
        bytes(b.bytes_down),
    ]
}

/// The state with the transition under way, if any: a bad verdict that
/// has not reached `fall` yet, or a window that is over while the probes
/// that bring the backend back are awaited, or a lagging backend whose
/// probes find it caught up while its window runs.
fn state(b: &BackendStatus, pool: &PoolStatus, now: SystemTime) -> String {
    match &b.quarantine {
        Some(q) if parse(&q.until).is_some_and(|until| until <= now) => {
            let left = pool.rise.saturating_sub(b.good_probes).max(1);
            let mut text = if q.reason == QuarantineReason::Manual {
                "released".to_owned()
            } else {
                format!("{}, window over", b.state)
            };
            text.push_str(if left > 1 {
                ", awaiting probes"
            } else {
                ", awaiting probe"
            });
            if pool.rise > 1 {
                // Writing to a String cannot fail.
                let _ = write!(text, " ({} of {} passed)", b.good_probes, pool.rise);
            }
            text
        }
        Some(q) if caught_up(b) => format!("{}, caught up, returns at {}", b.state, q.until),
        None if b.bad_probes > 0 => {
            let of = if pool.fall > 0 {
                format!(" of {}", pool.fall)
            } else {
                String::new()
            };
            let probes = if b.bad_probes == 1 && pool.fall == 0 {
                "probe"
            } else {
                "probes"
            };
            format!("{} ({}{of} failed {probes})", b.state, b.bad_probes)
        }
        _ => b.state.to_string(),
    }
}

/// Quarantined for lagging, and the last probe passed: it has caught up and
/// waits out its window.
fn caught_up(b: &BackendStatus) -> bool {
    let passed = b
        .last_probe
        .as_ref()
        .is_some_and(|p| p.outcome == ProbeOutcome::Healthy);
    passed
        && b.quarantine
            .as_ref()
            .is_some_and(|q| q.reason == QuarantineReason::Lagging)
}

fn parse(rfc3339: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(rfc3339).ok()
}

/// `to - from`, whole seconds, `0s` if negative.
fn age(from: SystemTime, to: SystemTime) -> String {
    let d = to.duration_since(from).unwrap_or(Duration::ZERO);
    crate::config::span(Duration::from_secs(d.as_secs())).to_string()
}

/// `812 B`, `1.5 KiB`, `3.2 GiB`.
pub(super) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::status::{DiscoveryStatus, ProbeStatus, QuarantineStatus};
    use crate::pool::health::State;

    fn backend(name: &str) -> BackendStatus {
        BackendStatus {
            name: name.to_owned(),
            addr: "127.0.0.1:1".to_owned(),
            backup: false,
            discovered_from: None,
            leaving_at: None,
            state: State::Healthy,
            connections: 12,
            height: Some(2_700_000),
            quarantine: None,
            strikes: 0,
            bad_probes: 0,
            good_probes: 0,
            last_probe: Some(ProbeStatus {
                at: "2026-01-01T00:00:00Z".to_owned(),
                outcome: ProbeOutcome::Healthy,
                detail: String::new(),
            }),
            bytes_up: 1536,
            bytes_down: 5 * 1024 * 1024 * 1024,
            refused_by_node: 0,
            source_fallbacks: 0,
            node: None,
        }
    }

    #[test]
    fn table_shows_every_column() {
        let mut q = backend("b");
        q.state = State::Quarantined;
        q.backup = true;
        q.quarantine = Some(QuarantineStatus {
            until: "2026-01-01T00:10:30Z".to_owned(),
            reason: QuarantineReason::Manual,
        });
        let status = Status {
            version: "1.0.0".to_owned(),
            pid: 4321,
            generation: 2,
            uptime_s: 3700,
            pools: vec![PoolStatus {
                name: "p".to_owned(),
                listen: vec!["127.0.0.1:9333".parse().unwrap()],
                connections: 12,
                fall: 2,
                rise: 1,
                backends: vec![backend("a"), q],
                discovery: vec![DiscoveryStatus {
                    name: "ltc".to_owned(),
                    query: "nodes.test:9333".to_owned(),
                    members: 3,
                    last_lookup: Some("2026-01-01T00:00:25Z".to_owned()),
                    error: Some("no records found".to_owned()),
                }],
            }],
        };
        let now = humantime::parse_rfc3339("2026-01-01T00:00:30Z").unwrap();
        let text = render(&status, now);
        assert!(
            text.contains("pool p  listen 127.0.0.1:9333  connections 12"),
            "{text}"
        );
        let a = text
            .lines()
            .find(|l| l.trim_start().starts_with("a "))
            .unwrap();
        for cell in [
            "healthy",
            "12",
            "2700000",
            "healthy 30s ago",
            "1.5 KiB",
            "5.0 GiB",
        ] {
            assert!(a.contains(cell), "{cell} not in {a}");
        }
        let b = text.lines().find(|l| l.contains("b (backup)")).unwrap();
        assert!(b.contains("quarantined"), "{b}");
        assert!(
            b.contains("manual until 2026-01-01T00:10:30Z (10m left)"),
            "{b}"
        );
        assert!(
            text.contains(
                "discovered ltc from nodes.test:9333: 3 members, last lookup failed 5s ago: no records found; members kept"
            ),
            "{text}"
        );
        assert_eq!(bytes(0), "0 B");
    }

    fn pool(fall: u32, rise: u32, backends: Vec<BackendStatus>) -> PoolStatus {
        PoolStatus {
            name: "p".to_owned(),
            listen: vec![],
            connections: 0,
            fall,
            rise,
            backends,
            discovery: vec![],
        }
    }

    /// The enum value `/status` names `name`.
    fn named<T: serde::de::DeserializeOwned>(name: &str) -> T {
        serde_json::from_value(serde_json::Value::from(name)).unwrap()
    }

    fn quarantined(name: &str, state: &str, reason: &str, until: &str) -> BackendStatus {
        let mut b = backend(name);
        b.state = named(state);
        b.quarantine = Some(QuarantineStatus {
            until: until.to_owned(),
            reason: named(reason),
        });
        b
    }

    #[test]
    fn the_state_shows_the_transition_under_way() {
        let now = humantime::parse_rfc3339("2026-01-01T00:00:30Z").unwrap();
        let mut falling = backend("falling");
        falling.bad_probes = 1;
        let released = quarantined("released", "quarantined", "manual", "2026-01-01T00:00:30Z");
        let mut rising = quarantined("rising", "down", "down", "2026-01-01T00:00:10Z");
        rising.good_probes = 1;
        let held = quarantined("held", "quarantined", "manual", "2026-01-01T00:05:00Z");
        let p = pool(2, 1, vec![]);
        assert_eq!(state(&falling, &p, now), "healthy (1 of 2 failed probes)");
        assert_eq!(state(&released, &p, now), "released, awaiting probe");
        assert_eq!(state(&held, &p, now), "quarantined");
        assert_eq!(state(&backend("plain"), &p, now), "healthy");
        let p = pool(3, 3, vec![]);
        assert_eq!(
            state(&rising, &p, now),
            "down, window over, awaiting probes (1 of 3 passed)"
        );
        assert_eq!(
            state(&released, &p, now),
            "released, awaiting probes (0 of 3 passed)"
        );
        // From an instance that does not report the thresholds.
        assert_eq!(
            state(&falling, &pool(0, 0, vec![]), now),
            "healthy (1 failed probe)"
        );

        let text = render_pool(pool(2, 1, vec![released, held]), now);
        let row = text.lines().find(|l| l.contains("released")).unwrap();
        assert!(
            row.contains("manual until 2026-01-01T00:00:30Z (ended)"),
            "{row}"
        );
        assert!(!row.contains("0s left"), "{row}");
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("held "))
            .unwrap();
        assert!(row.contains("(4m 30s left)"), "{row}");
    }

    #[test]
    fn lag_counts_from_the_best_usable_height_and_a_caught_up_backend_says_so() {
        let now = humantime::parse_rfc3339("2026-01-01T00:00:30Z").unwrap();
        let mut a = backend("a");
        a.height = Some(21);
        let mut behind = quarantined("behind", "lagging", "lagging", "2026-01-01T00:05:00Z");
        behind.height = Some(12);
        behind.last_probe.as_mut().unwrap().outcome = ProbeOutcome::Lagging;
        let mut caught = quarantined("caught", "lagging", "lagging", "2026-01-01T00:05:00Z");
        caught.height = Some(21);
        let mut ahead = backend("ahead");
        ahead.state = State::Unknown;
        ahead.height = Some(23);
        let mut none = backend("none");
        none.height = None;
        let p = pool(2, 1, vec![a, behind, caught, ahead, none]);
        assert_eq!(state(&p.backends[1], &p, now), "lagging");
        assert_eq!(
            state(&p.backends[2], &p, now),
            "lagging, caught up, returns at 2026-01-01T00:05:00Z"
        );
        let mut p = p;
        p.backends[0].leaving_at = Some("2026-01-01T00:04:00Z".to_owned());
        let text = render_pool(p, now);
        let a = text
            .lines()
            .find(|l| l.trim_start().starts_with("a "))
            .unwrap();
        assert!(
            a.contains("healthy, leaving at 2026-01-01T00:04:00Z (not in DNS answers)"),
            "{a}"
        );
        let header = text.lines().nth(1).unwrap();
        assert!(header.contains("HEIGHT  LAG  QUARANTINE"), "{header}");
        let cells = |name: &str| -> Vec<String> {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{name} ")))
                .unwrap();
            line.split("  ")
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect()
        };
        // Counted from 23, the unknown one's: usable and not quarantined.
        assert_eq!(cells("a")[4], "2", "{text}");
        assert_eq!(cells("behind")[4], "11", "{text}");
        assert_eq!(cells("ahead")[4], "0", "{text}");
        assert_eq!(cells("none")[3], "-", "{text}");
        assert_eq!(cells("none")[4], "-", "{text}");
        assert_eq!(lag(Some(25), Some(21)), "4 ahead");
    }

    fn render_pool(pool: PoolStatus, now: SystemTime) -> String {
        let mut out = String::new();
        pool_block(&mut out, &pool, now);
        out
    }
}
