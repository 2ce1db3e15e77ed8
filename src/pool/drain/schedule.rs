//! When each close of a spread drain is due: a pure function of the
//! drain's start, its spread, how many connections it planned to close and
//! the clock.

use std::time::Duration;

use tokio::time::Instant;

use crate::pool::health::later;

/// The pace of one drain. Close number `i` (0-based, oldest connection
/// first) is due at `start + spread * i / planned`, rounded up to the
/// nanosecond: `planned` closes take `spread * (planned - 1) / planned`
/// (50 over 5 s: one every 100 ms, the last at 4.9 s), the first at once.
/// Closes beyond `planned` (connections that arrived while it ran) keep
/// the same pace. A zero spread makes every close due at `start`.
///
/// A drain held up by the last-leg rule is [`resumed`](Schedule::resumed)
/// at the same pace, so a pause never turns into a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    start: Instant,
    spread: Duration,
    /// At least 1.
    planned: u64,
    /// Closes made before `start` (under an earlier schedule).
    first: u64,
}

impl Schedule {
    /// `planned` closes spread over `spread` from `start`.
    pub fn new(start: Instant, spread: Duration, planned: usize) -> Schedule {
        Schedule {
            start,
            spread,
            planned: (planned as u64).max(1),
            first: 0,
        }
    }

    /// How many closes (counted from the drain's first) are due by `now`.
    pub fn due(&self, now: Instant) -> u64 {
        if now < self.start {
            return self.first;
        }
        let spread = self.spread.as_nanos();
        if spread == 0 {
            return u64::MAX;
        }
        let elapsed = now.duration_since(self.start).as_nanos();
        let slots = elapsed.saturating_mul(u128::from(self.planned)) / spread;
        let slots = u64::try_from(slots).unwrap_or(u64::MAX);
        self.first.saturating_add(slots).saturating_add(1)
    }

    /// When close number `i` (counted from the drain's first) is due.
    pub fn at(&self, i: u64) -> Instant {
        let n = u128::from(i.saturating_sub(self.first));
        let offset = (self.spread.as_nanos().saturating_mul(n)).div_ceil(u128::from(self.planned));
        let offset = Duration::from_nanos(u64::try_from(offset).unwrap_or(u64::MAX));
        later(self.start, offset)
    }

    /// The same pace, restarted at `now` with close number `next` due at
    /// once: for a drain that the last-leg rule held up.
    pub fn resumed(&self, next: u64, now: Instant) -> Schedule {
        Schedule {
            start: now,
            first: next,
            ..*self
        }
    }

    /// True when every close is due at its start.
    pub fn is_at_once(&self) -> bool {
        self.spread.is_zero()
    }

    /// Every close from `next` on due at `now`: the backend went `down`.
    pub fn at_once(&self, next: u64, now: Instant) -> Schedule {
        Schedule {
            spread: Duration::ZERO,
            ..self.resumed(next, now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// (spread ms, planned, elapsed ms, closes due)
    #[test]
    fn closes_due_by_elapsed_time() {
        let table: &[(u64, usize, u64, u64)] = &[
            // 50 over 5 s: one per 100 ms, the first at once, the last at 4.9 s.
            (5000, 50, 0, 1),
            (5000, 50, 99, 1),
            (5000, 50, 100, 2),
            (5000, 50, 2550, 26),
            (5000, 50, 4899, 49),
            (5000, 50, 4900, 50),
            // Later arrivals keep the pace past the planned count.
            (5000, 50, 5000, 51),
            // Zero spread: everything at once.
            (0, 50, 0, u64::MAX),
            // One connection: at once; a second arrival half a spread later.
            (10_000, 1, 0, 1),
            (10_000, 1, 9_999, 1),
            (10_000, 1, 10_000, 2),
            // Uneven division: 3 over 10 s at 0, 3.334 s and 6.667 s.
            (10_000, 3, 3_333, 1),
            (10_000, 3, 3_334, 2),
            (10_000, 3, 6_666, 2),
            (10_000, 3, 6_667, 3),
            // A drain planned with nothing still paces arrivals.
            (1000, 0, 0, 1),
            (1000, 0, 1000, 2),
        ];
        let start = Instant::now();
        for &(spread, planned, elapsed, due) in table {
            let s = Schedule::new(start, ms(spread), planned);
            assert_eq!(
                s.due(start + ms(elapsed)),
                due,
                "{planned} over {spread} ms, at {elapsed} ms"
            );
        }
    }

    /// Each close is due exactly at the instant `at` names: not a
    /// nanosecond before, for every `i`, whatever the rounding.
    #[test]
    fn at_and_due_agree_at_every_close() {
        let start = Instant::now();
        for (spread, planned) in [(ms(5000), 50), (ms(10_000), 3), (ms(7), 3), (ms(1), 1000)] {
            let s = Schedule::new(start, spread, planned);
            for i in 0..planned as u64 * 2 {
                let t = s.at(i);
                assert_eq!(s.due(t), i + 1, "{planned} over {spread:?}, close {i}");
                if t > start {
                    let before = t - Duration::from_nanos(1);
                    assert_eq!(s.due(before), i, "{planned} over {spread:?}, close {i}");
                }
            }
        }
        let s = Schedule::new(start, ms(5000), 50);
        assert_eq!(s.at(0), start);
        assert_eq!(s.at(49), start + ms(4900));
        assert_eq!(Schedule::new(start, Duration::ZERO, 9).at(8), start);
    }

    #[test]
    fn a_resumed_schedule_keeps_the_pace_from_its_next_close() {
        let start = Instant::now();
        let s = Schedule::new(start, ms(5000), 50);
        // Held up at 1 s with 10 closed; resumed at 3 s.
        let r = s.resumed(10, start + ms(3000));
        assert_eq!(
            r.due(start + ms(2999)),
            10,
            "nothing more before the resume"
        );
        assert_eq!(r.due(start + ms(3000)), 11, "the next one at once");
        assert_eq!(r.due(start + ms(3099)), 11, "then at the old pace");
        assert_eq!(r.due(start + ms(3100)), 12);
        assert_eq!(r.at(10), start + ms(3000));
        assert_eq!(r.at(49), start + ms(6900));
    }

    #[test]
    fn at_once_makes_every_remaining_close_due_now() {
        let start = Instant::now();
        let s = Schedule::new(start, ms(5000), 50).at_once(7, start + ms(700));
        assert_eq!(s.due(start + ms(699)), 7);
        assert_eq!(s.due(start + ms(700)), u64::MAX);
        assert_eq!(s.at(30), start + ms(700));
    }

    #[test]
    fn huge_spreads_do_not_overflow() {
        let start = Instant::now();
        let s = Schedule::new(start, Duration::from_secs(u64::MAX / 4), usize::MAX);
        assert!(s.at(u64::MAX) >= start);
        assert!(s.due(start + Duration::from_secs(86_400 * 365)) >= 1);
    }
}
