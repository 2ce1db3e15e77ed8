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
