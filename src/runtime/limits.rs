//! Start-up resource limits: raise the open-file limit to its hard cap, since
//! every spliced connection holds two descriptors.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The open-file limit in effect after trying to raise it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimit {
    /// Soft limit before (`None` = unlimited).
    pub before: Option<u64>,
    /// Soft limit now.
    pub now: Option<u64>,
    /// Hard limit.
    pub hard: Option<u64>,
}

/// Raise `RLIMIT_NOFILE`'s soft limit to the hard limit. Never fails: if the
/// kernel refuses, the old limit stays and is reported as such.
pub fn raise_nofile() -> FileLimit {
    let old = getrlimit(Resource::Nofile);
    if old.current != old.maximum {
        let wanted = Rlimit {
            current: old.maximum,
            maximum: old.maximum,
        };
        // Refusal leaves the old limit, which we read back and report.
        let _ = setrlimit(Resource::Nofile, wanted);
    }
    let now = getrlimit(Resource::Nofile);
    FileLimit {
        before: old.current,
        now: now.current,
        hard: now.maximum,
    }
}

/// How many client connections the process can hold at once with its
/// current open-file limit: two descriptors each, after the descriptors
/// already open (listeners, the runtimes' epoll instances, logs: call this
/// once they are) and a reserve for probes, the admin endpoint and reloads.
/// Accepting stops at this number (clients wait in the backlog) instead of
/// running out of descriptors mid-connection.
pub fn connection_budget() -> usize {
    let limit = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    let reserve = (limit / 4).clamp(16, 256) + open;
    let budget = limit.saturating_sub(reserve) / 2;
    usize::try_from(budget)
        .unwrap_or(usize::MAX)
        .clamp(1, 1 << 24)
}

/// This process's resident memory in KiB (`VmRSS`), for the events that
/// report it; `None` where `/proc` does not say.
pub fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}
