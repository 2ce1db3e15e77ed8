//! Durations as people write them in config.yaml: `100d`, `2h 30m`,
//! `1s 500ms`. humantime's own display counts months and years of
//! 30.44 and 365.25 days (`3months 8days 16h` for 100 days), which no
//! operator wrote; what is printed here reads back through humantime.

use std::fmt;
use std::time::Duration;

/// `d` in days, hours, minutes, seconds, milliseconds, microseconds and
/// nanoseconds, the units that are not zero, largest first (`0s` for
/// zero): a value below a millisecond never reads as `0s`.
pub fn span(d: Duration) -> Span {
    Span(d)
}

/// A duration to display; see [`span`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span(Duration);

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs();
        let parts = [
            (secs / 86_400, "d"),
            (secs / 3_600 % 24, "h"),
            (secs / 60 % 60, "m"),
            (secs % 60, "s"),
            (u64::from(self.0.subsec_millis()), "ms"),
            (u64::from(self.0.subsec_micros() % 1_000), "us"),
            (u64::from(self.0.subsec_nanos() % 1_000), "ns"),
        ];
        let mut first = true;
        for (n, unit) in parts.into_iter().filter(|(n, _)| *n > 0) {
            if !first {
                f.write_str(" ")?;
            }
            write!(f, "{n}{unit}")?;
            first = false;
        }
        if first {
            f.write_str("0s")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_units_largest_first() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_micros(400), "400us"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(1_500_001), "1ms 500us 1ns"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1_500), "1s 500ms"),
            (Duration::from_secs(600), "10m"),
            (Duration::from_secs(9_000), "2h 30m"),
            (Duration::from_secs(100 * 86_400), "100d"),
            (Duration::from_secs(86_400 + 3_661), "1d 1h 1m 1s"),
        ];
        for (d, want) in cases {
            assert_eq!(span(d).to_string(), want, "{d:?}");
        }
    }

    #[test]
    fn reads_back_through_humantime() {
        for secs in [1, 59, 61, 3_599, 86_399, 86_401, 8_640_000, 31_622_400] {
            for millis in [0, 1, 999] {
                let d = Duration::from_secs(secs) + Duration::from_millis(millis);
                let text = span(d).to_string();
                assert_eq!(humantime::parse_duration(&text).ok(), Some(d), "{text}");
            }
        }
    }
}
