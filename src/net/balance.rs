//! Which event loop serves a new client.
//!
//! Each worker accepts on its own `SO_REUSEPORT` socket, and the kernel
//! picks that socket by a hash of the client's address and port, not by
//! load: 64 long-lived clients can land 37/26, and the busier loop then
//! sets the pace for all of them. So the loop that accepted a client
//! keeps it unless another loop holds clearly fewer tasks (a task is a
//! connection, give or take one accept loop per listener on every
//! worker); then the client is served there. Clients are accepted into no
//! epoll set (`net::listener`), so the socket joins only the serving
//! loop's set. The slack keeps ordinary jitter (short
//! connections coming and going) from moving sockets back and forth.
//!
//! `PIN_PROXY_HANDOFF=off` in the environment turns it off, to compare.

use std::sync::{Arc, OnceLock};

use tokio::runtime::Handle;

/// A loop keeps its client unless it holds at least this many tasks more
/// than the least loaded one (plus 1/32 of that one's, so thousands of
/// clients are never moved for a hash's ordinary unevenness).
const SLACK: usize = 3;

/// Whether a loop holding `mine` tasks passes a new client to one holding
/// `least`.
pub fn crowded(mine: usize, least: usize) -> bool {
    mine >= least + SLACK + least / 32
}

/// Whether hand-off is on (`PIN_PROXY_HANDOFF=off` turns it off).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("PIN_PROXY_HANDOFF").is_none_or(|v| v != "off"))
}

/// The data workers' event loops, as the accept loops see them.
#[derive(Debug, Clone)]
pub struct Loops {
    handles: Arc<[Handle]>,
}

impl Loops {
    /// These loops (one per data worker).
    pub fn new(handles: &[Handle]) -> Loops {
        Loops {
            handles: handles.into(),
        }
    }

    /// Tasks alive on each loop now.
    #[cfg(test)]
    pub fn loads(&self) -> Vec<usize> {
        self.handles.iter().map(load).collect()
    }

    /// The loop a client accepted on loop `me` goes to, when it is not
    /// `me`'s own: the least loaded one, if `me` is [`crowded`] beside it.
    pub fn elsewhere(&self, me: usize) -> Option<&Handle> {
        if self.handles.len() < 2 || !enabled() {
            return None;
        }
        let mine = load(self.handles.get(me)?);
        let (least, other) = self
            .handles
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != me)
            .map(|(_, h)| (load(h), h))
            .min_by_key(|(n, _)| *n)?;
        crowded(mine, least).then_some(other)
    }
}

fn load(handle: &Handle) -> usize {
    handle.metrics().num_alive_tasks()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_passes_clients_on_only_when_clearly_busier() {
        // Even, or within the slack: keep.
        for (mine, least) in [(0, 0), (32, 32), (34, 32), (2, 0), (320, 313)] {
            assert!(!crowded(mine, least), "{mine} vs {least}");
        }
        // 37/26 of 64 long-lived clients: pass on until within the slack.
        assert!(crowded(37, 26));
        assert!(crowded(36, 32));
        // Thousands: moved only past 3 + 1/32 (about 3 %).
        assert!(!crowded(4_560, 4_450));
        assert!(crowded(4_600, 4_400));
    }
}

#[cfg(test)]
#[path = "balance_tests.rs"]
mod loop_tests;
