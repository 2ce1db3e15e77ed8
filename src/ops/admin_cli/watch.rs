//! `status --watch`: the table again every second until Ctrl-C. On a
//! terminal each frame replaces the last; otherwise frames follow one
//! another, a blank line after each, for a log or a pipe.

use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{SignalKind, signal};
use tokio::time::MissedTickBehavior;

use super::{Instance, status};
use crate::ops::status::rfc3339;

/// Time between the starts of two fetches.
pub const EVERY: Duration = Duration::from_secs(1);
/// Cursor home, then clear the screen.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Fetch and print `/status` every [`EVERY`] to `out` until SIGINT, then
/// return `Ok`. A failed fetch prints its error as the frame and the next
/// tick tries again. `terminal`: clear the screen before each frame.
///
/// # Errors
/// When the signal handler cannot be set up, or writing to `out` fails
/// other than by its reader going away (which ends the watch).
pub async fn watch(
    admin: &Instance,
    json: bool,
    out: &mut impl Write,
    terminal: bool,
) -> anyhow::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interrupt.recv() => return Ok(()),
            _ = tick.tick() => {}
        }
        let fetched = tokio::select! {
            _ = interrupt.recv() => return Ok(()),
            r = status(admin, json) => r,
        };
        let body = fetched.unwrap_or_else(|e| format!("error: {e:#}\ntrying again every second\n"));
        let frame = frame(admin, &body, SystemTime::now(), terminal);
        match out.write_all(frame.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// One frame: a line with the time, then `body`.
fn frame(admin: &Instance, body: &str, now: SystemTime, terminal: bool) -> String {
    let head = format!(
        "every {}s: {}{}  {}  (Ctrl-C ends)\n\n",
        EVERY.as_secs(),
        admin.addr(),
        admin.origin(),
        rfc3339(now)
    );
    if terminal {
        format!("{CLEAR}{head}{body}")
    } else {
        format!("{head}{body}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_frame_clears_the_screen_a_piped_one_ends_with_a_blank_line() {
        let now = humantime::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        let admin = Instance::given("127.0.0.1:9900");
        let tty = frame(&admin, "table\n", now, true);
        assert!(
            tty.starts_with("\x1b[H\x1b[2Jevery 1s: 127.0.0.1:9900  2026-01-01T00:00:00Z"),
            "{tty:?}"
        );
        assert!(tty.ends_with("\n\ntable\n"), "{tty:?}");
        let piped = frame(&admin, "table\n", now, false);
        assert!(!piped.contains('\x1b'), "{piped:?}");
        assert!(piped.ends_with("table\n\n"), "{piped:?}");
    }
}
