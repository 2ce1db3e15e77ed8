//! Stalls in a P2P run's window: 10 ms slots (by send time) in which
//! nearly every ping was slow. A stall of the whole machine (the VM
//! descheduled, the load tool itself held up) hits every connection at
//! once, whatever the path; a stall of one proxy event loop hits only the
//! connections on that loop. Counting the slots per target, and taking
//! the percentiles again without them, tells the two apart: a proxy that
//! stalls shows more stall slots than no proxy, or a worse tail outside
//! them.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use serde_json::{Value, json};

use crate::window;

/// Width of a slot, ns.
const SLOT_NS: u64 = 10_000_000;

/// A round trip over this is slow.
const SLOW_US: u32 = 2_000;

/// A slot is a stall when at least this many pings were sent in it...
const STALL_MIN_PINGS: u32 = 10;

/// ...and at least this share of them were slow.
const STALL_SHARE: f64 = 0.9;

/// Every ping's round trip, by when it was sent in the window.
#[derive(Default)]
pub struct Pings {
    /// `(slot, round trip µs)`.
    all: Vec<(u32, u32)>,
}

/// One slot's counts.
#[derive(Clone, Copy, Default)]
struct Slot {
    pings: u32,
    slow: u32,
    worst_us: u32,
}

impl Slot {
    fn stalled(self) -> bool {
        self.pings >= STALL_MIN_PINGS && f64::from(self.slow) >= STALL_SHARE * f64::from(self.pings)
    }
}

impl Pings {
    /// A ping sent `offset` into the window came back after `rtt`.
    pub fn record(&mut self, offset: Duration, rtt: Duration) {
        let slot = u32::try_from(offset.as_nanos() / u128::from(SLOT_NS)).unwrap_or(u32::MAX);
        let us = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX);
        self.all.push((slot, us));
    }

    fn slots(&self) -> Vec<Slot> {
        let n = self
            .all
            .iter()
            .map(|&(s, _)| s as usize + 1)
            .max()
            .unwrap_or(0);
        let mut slots = vec![Slot::default(); n];
        for &(s, us) in &self.all {
            let slot = &mut slots[s as usize];
            slot.pings += 1;
            slot.slow += u32::from(us > SLOW_US);
            slot.worst_us = slot.worst_us.max(us);
        }
        slots
    }

    /// `stall_slots`, `stall_pings` and the round trip of the pings sent
    /// outside the stall slots as `rtt_calm_p50_us` and so on; with
    /// `timeline`, also the slots there as text, a line each: `offset_ms
    /// pings slow worst_us stall`.
    pub fn summary(&self, timeline: Option<&Path>) -> anyhow::Result<Value> {
        let slots = self.slots();
        if let Some(path) = timeline {
            let mut out = format!("# offset_ms pings slow_over_{SLOW_US}us worst_us stall\n");
            for (i, s) in slots.iter().enumerate() {
                let ms = i as u64 * SLOT_NS / 1_000_000;
                let _ = writeln!(
                    out,
                    "{ms} {} {} {} {}",
                    s.pings,
                    s.slow,
                    s.worst_us,
                    u8::from(s.stalled())
                );
            }
            std::fs::write(path, out).with_context(|| format!("write {}", path.display()))?;
        }
        let mut calm: Histogram<u64> = window::histogram();
        let mut stall_pings = 0u64;
        for &(s, us) in &self.all {
            if slots[s as usize].stalled() {
                stall_pings += 1;
            } else {
                window::record(&mut calm, Duration::from_micros(u64::from(us)));
            }
        }
        let mut out = json!({
            "stall_slots": slots.iter().filter(|s| s.stalled()).count(),
            "stall_pings": stall_pings,
        });
        if let Value::Object(p) = window::percentiles(&calm) {
            for (k, v) in p {
                out[format!("rtt_calm_{k}")] = v;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_slot_where_nearly_every_ping_was_slow_is_a_stall_and_leaves_the_calm_percentiles() {
        let mut p = Pings::default();
        // Slot 0: 20 fast pings. Slot 1: 19 of 20 slow (a stall). Slot 2:
        // 10 of 20 slow (one loop of two held up: not a stall).
        for i in 0..20 {
            p.record(ms(1), Duration::from_micros(100));
            p.record(
                ms(11),
                Duration::from_micros(if i == 0 { 100 } else { 9_000 }),
            );
            p.record(
                ms(21),
                Duration::from_micros(if i % 2 == 0 { 100 } else { 5_000 }),
            );
        }
        let path =
            std::env::temp_dir().join(format!("loadgen-timeline-{}.txt", std::process::id()));
        let s = p.summary(Some(&path)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines,
            ["0 20 0 100 0", "10 20 19 9000 1", "20 20 10 5000 0"]
        );
        assert_eq!(s["stall_slots"], 1);
        assert_eq!(s["stall_pings"], 20);
        // Outside the stall the worst is slot 2's 5 ms, not the stall's 9 ms.
        let max = s["rtt_calm_max_us"].as_f64().unwrap();
        assert!((4_990.0..=5_010.0).contains(&max), "{max}");
    }

    #[test]
    fn a_slot_with_few_pings_is_not_a_stall() {
        let mut p = Pings::default();
        for _ in 0..(STALL_MIN_PINGS - 1) {
            p.record(ms(5), Duration::from_micros(9_000));
        }
        assert_eq!(p.summary(None).unwrap()["stall_slots"], 0);
    }
}
