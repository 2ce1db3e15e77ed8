//! The measured window of a load run: a warm-up that is not recorded, then
//! `duration` that is, with the proxy's CPU read at both edges; and the
//! latency histogram every load loop records into, and the JSON helpers
//! their reports share.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::procfs::CpuMeter;

/// Latencies are recorded in nanoseconds, up to a minute, 3 significant digits.
const MAX_NS: u64 = 60_000_000_000;

/// When recording starts and ends.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Warm-up ends, recording starts.
    pub start: Instant,
    /// Recording ends; load loops stop here.
    pub end: Instant,
}

impl Window {
    /// A window starting `warmup` from now and lasting `duration`.
    pub fn new(warmup: Duration, duration: Duration) -> Window {
        let start = Instant::now() + warmup;
        Window {
            start,
            end: start + duration,
        }
    }

    /// Whether an operation that finished at `at` is recorded.
    pub fn records(&self, at: Instant) -> bool {
        at >= self.start && at < self.end
    }

    /// Read `pid`'s CPU at the window's start and end (the loops run
    /// meanwhile), returning the CPU seconds in between.
    ///
    /// # Errors
    /// When the process cannot be read.
    pub async fn meter(&self, pid: Option<u32>) -> anyhow::Result<Option<f64>> {
        tokio::time::sleep_until(self.start).await;
        let meter = CpuMeter::start(pid)?;
        tokio::time::sleep_until(self.end).await;
        meter.stop()
    }

    /// Seconds recorded.
    pub fn secs(&self) -> f64 {
        (self.end - self.start).as_secs_f64()
    }
}

/// An empty latency histogram.
pub fn histogram() -> Histogram<u64> {
    // Fixed, valid bounds: this cannot fail.
    Histogram::new_with_bounds(1, MAX_NS, 3).expect("static histogram bounds")
}

/// Record `elapsed`, clamped into the histogram's range.
pub fn record(h: &mut Histogram<u64>, elapsed: Duration) {
    let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(MAX_NS);
    h.saturating_record(ns.clamp(1, MAX_NS));
}

/// p50 / p99 / p99.9 / max in microseconds, as JSON fields.
pub fn percentiles(h: &Histogram<u64>) -> Value {
    let us = |ns: u64| (ns as f64 / 1000.0 * 100.0).round() / 100.0;
    json!({
        "p50_us": us(h.value_at_quantile(0.50)),
        "p99_us": us(h.value_at_quantile(0.99)),
        "p999_us": us(h.value_at_quantile(0.999)),
        "max_us": us(h.max()),
    })
}

/// Add `extra`'s fields to `out`.
pub fn merge(out: &mut Value, extra: Value) {
    if let (Some(o), Value::Object(e)) = (out.as_object_mut(), extra) {
        o.extend(e);
    }
}

/// `total / n`, rounded to 2 decimals; `None` when `n` is 0.
pub fn per(total: f64, n: u64) -> Option<f64> {
    (n > 0).then(|| (total / n as f64 * 100.0).round() / 100.0)
}
