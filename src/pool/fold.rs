//! Folding a flood of like log lines: per key, at most [`LIMIT`] lines in
//! full per [`WINDOW`], the rest counted and reported in one summary line
//! per window while the flood lasts. [`Fold`] is the pure rule (time comes
//! in as `now`); [`Folds`] keeps one per key for a flush task to report.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Lines logged in full per window, per pool and reason.
pub const LIMIT: u32 = 20;
/// The folding window, and so the period of the summary lines.
pub const WINDOW: Duration = Duration::from_secs(1);

/// A counted event gets a line of its own for each of its first this many.
pub const EACH_UP_TO: u64 = 16;

/// Whether the `n`-th (from 1) of a counted run of like events gets its
/// line: each of the first [`EACH_UP_TO`], then the 32nd, 64th, 128th ...;
/// every one is counted elsewhere. So a handful, as a test or an operator
/// makes, each shows, and a run of thousands costs a line per doubling.
pub fn nth_logged(n: u64) -> bool {
    n <= EACH_UP_TO || n.is_power_of_two()
}

/// What to do with one occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    /// Log it in full.
    pub show: bool,
    /// Left out in the previous window and not yet reported: log a summary first.
    pub carried: u64,
    /// The first one left out since no flush was pending: start a flush.
    pub arm: bool,
}

/// What a pending flush should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// The window is still open: look again then.
    Wait(Instant),
    /// The window closed with this many left out: log the summary.
    Report(u64),
    /// Nothing left to report: the flush ends.
    Done,
}

/// One pool and reason's window (pure: time comes in as `now`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fold {
    start: Option<Instant>,
    shown: u32,
    hidden: u64,
    armed: bool,
}

impl Fold {
    /// One occurrence at `now`.
    pub fn hit(&mut self, now: Instant) -> Hit {
        let mut carried = 0;
        if self.start.is_none_or(|s| now >= s + WINDOW) {
            carried = std::mem::take(&mut self.hidden);
            self.start = Some(now);
            self.shown = 0;
        }
        if self.shown < LIMIT {
            self.shown += 1;
            return Hit {
                show: true,
                carried,
                arm: false,
            };
        }
        self.hidden += 1;
        let arm = !self.armed;
        self.armed = true;
        Hit {
            show: false,
            carried,
            arm,
        }
    }

    /// The pending flush looks at the window at `now`.
    pub fn flush(&mut self, now: Instant) -> Flush {
        let Some(start) = self.start else {
            self.armed = false;
            return Flush::Done;
        };
        if now < start + WINDOW {
            return Flush::Wait(start + WINDOW);
        }
        self.start = None;
        self.shown = 0;
        match std::mem::take(&mut self.hidden) {
            0 => {
                self.armed = false;
                Flush::Done
            }
            n => Flush::Report(n),
        }
    }
}

impl Fold {
    /// Lines are left out and a flush is due to report them.
    pub fn armed(&self) -> bool {
        self.armed
    }
}

/// The folds of one kind of line, per key, and the wake of the one task
/// that reports them ([`Folds::due`]). Once [`Folds::close`]d (the task
/// ended), nothing is folded any more: every line is shown.
#[derive(Debug)]
pub struct Folds<K> {
    state: Mutex<(HashMap<K, Fold>, bool)>,
    /// Notified when a key starts leaving lines out.
    pub wake: Notify,
}

impl<K> Default for Folds<K> {
    fn default() -> Folds<K> {
        Folds {
            state: Mutex::new((HashMap::new(), false)),
            wake: Notify::new(),
        }
    }
}

impl<K: Eq + Hash + Copy> Folds<K> {
    /// One line of `key` at `now`: show it, and first report `carried`
    /// when that is more than 0.
    pub fn hit(&self, key: K, now: Instant) -> Hit {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (folds, closed) = &mut *state;
        if *closed {
            return Hit {
                show: true,
                carried: 0,
                arm: false,
            };
        }
        let hit = folds.entry(key).or_default().hit(now);
        if hit.arm {
            self.wake.notify_one();
        }
        hit
    }

    /// The counts whose window closed by `now`, and when to look again
    /// (`None`: nothing is pending).
    pub fn due(&self, now: Instant) -> (Vec<(K, u64)>, Option<Instant>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (mut reports, mut next) = (Vec::new(), None::<Instant>);
        for (key, fold) in state.0.iter_mut().filter(|(_, f)| f.armed()) {
            loop {
                match fold.flush(now) {
                    Flush::Report(n) => reports.push((*key, n)),
                    Flush::Wait(at) => {
                        next = Some(next.map_or(at, |n| n.min(at)));
                        break;
                    }
                    Flush::Done => break,
                }
            }
        }
        (reports, next)
    }

    /// Every count not yet reported; from now on every line is shown.
    pub fn close(&self) -> Vec<(K, u64)> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 = true;
        std::mem::take(&mut state.0)
            .into_iter()
            .filter(|(_, fold)| fold.hidden > 0)
            .map(|(key, fold)| (key, fold.hidden))
            .collect()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn each_of_the_first_sixteen_then_each_doubling() {
        let logged: Vec<u64> = (1..=200).filter(|&n| nth_logged(n)).collect();
        let want: Vec<u64> = (1..=16).chain([32, 64, 128]).collect();
        assert_eq!(logged, want);
    }

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn folds_report_per_key_when_the_window_closes_and_everything_on_close() {
        let folds = Folds::<&str>::default();
        let t = Instant::now();
        for _ in 0..LIMIT + 4 {
            folds.hit("client_closed", t);
        }
        for _ in 0..LIMIT + 1 {
            folds.hit("client_error", t);
        }
        folds.hit("backend_closed", t);
        let (reports, next) = folds.due(t + MS);
        assert_eq!((reports, next), (vec![], Some(t + WINDOW)));
        let (mut reports, next) = folds.due(t + WINDOW);
        reports.sort_unstable();
        assert_eq!(reports, [("client_closed", 4), ("client_error", 1)]);
        assert_eq!(next, None, "nothing pending after the report");
        for _ in 0..LIMIT + 2 {
            folds.hit("client_closed", t + 2 * WINDOW);
        }
        assert_eq!(folds.close(), [("client_closed", 2)]);
        assert!(
            folds.hit("client_closed", t + 2 * WINDOW).show,
            "closed: all shown"
        );
    }
}
