//! What the benchmark reads about the proxy from /proc: CPU time
//! (utime + stime of every thread, `/proc/PID/stat`; nanoseconds on a CPU,
//! `/proc/PID/task/*/schedstat`), resident memory (`VmRSS`,
//! `/proc/PID/status`) and the open-file limit (`/proc/PID/limits`).

use anyhow::{Context, bail};

/// CPU seconds (user + system, all threads) the process has used so far.
///
/// # Errors
/// When the process is gone or its stat line does not parse.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    cpu_seconds_of(&format!("/proc/{pid}/stat"))
}

/// CPU seconds of the stat line at `path` (a process's or a thread's).
fn cpu_seconds_of(path: &str) -> anyhow::Result<f64> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {path}"))?;
    // The command name (field 2) may hold spaces and parentheses: split after
    // its closing parenthesis. Field 3 (state) is then index 0, so utime
    // (field 14) is index 11 and stime (field 15) index 12.
    let rest = text
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .with_context(|| format!("parse {path}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> anyhow::Result<u64> {
        let field = fields
            .get(i)
            .with_context(|| format!("{path}: short line"))?;
        field
            .parse()
            .with_context(|| format!("{path}: field {}", i + 3))
    };
    let ticks = tick(11)? + tick(12)?;
    let hz = rustix::param::clock_ticks_per_second();
    if hz == 0 {
        bail!("clock ticks per second is 0");
    }
    Ok(ticks as f64 / hz as f64)
}

/// Resident set size in KiB.
///
/// # Errors
/// When the process is gone or has no `VmRSS` line.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .with_context(|| format!("{path}: no VmRSS"))?;
    let kib = line.trim().trim_end_matches("kB").trim();
    kib.parse()
        .with_context(|| format!("{path}: VmRSS {kib:?}"))
}

/// Nanoseconds on a CPU of the process's threads alive now (the first
/// field of each `/proc/PID/task/TID/schedstat`): finer than the clock
/// ticks of [`cpu_seconds`], but threads that have ended are not counted.
///
/// # Errors
/// When the process is gone.
pub fn on_cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for task in std::fs::read_dir(&dir).with_context(|| format!("read {dir}"))? {
        let path = task?.path().join("schedstat");
        // A thread that ended since the listing counts as nothing.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let ns = text.split_whitespace().next().unwrap_or_default();
        total += ns
            .parse::<u64>()
            .with_context(|| format!("{}: {ns:?}", path.display()))?;
    }
    Ok(total)
}

/// The soft open-file limit of a process (`Max open files` in
/// `/proc/PID/limits`); `None` when unlimited.
///
/// # Errors
/// When the process is gone or the line does not parse.
pub fn open_files_limit(pid: u32) -> anyhow::Result<Option<u64>> {
    let path = format!("/proc/{pid}/limits");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    let soft = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .with_context(|| format!("{path}: no Max open files line"))?;
    if soft == "unlimited" {
        return Ok(None);
    }
    soft.parse()
        .map(Some)
        .with_context(|| format!("{path}: Max open files {soft:?}"))
}

/// An error saying what to change unless `pid` (called `who`) may open
/// `need` files; `flag` is the option that sets the count.
///
/// # Errors
/// The limit is lower, or cannot be read.
pub fn need_open_files(pid: u32, need: u64, who: &str, flag: &str) -> anyhow::Result<()> {
    match open_files_limit(pid)? {
        Some(limit) if limit < need => bail!(
            "{who} (pid {pid}) may open {limit} files and needs {need} for these \
             connections: raise its limit (ulimit -n, at most the hard limit) or lower {flag}"
        ),
        _ => Ok(()),
    }
}

/// The load averages over 1, 5 and 15 minutes (`/proc/loadavg`).
///
/// # Errors
/// When the file cannot be read.
pub fn loadavg() -> anyhow::Result<String> {
    let text = std::fs::read_to_string("/proc/loadavg").context("read /proc/loadavg")?;
    Ok(text
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" "))
}

/// CPU used by an optional process between [`CpuMeter::start`] and
/// [`CpuMeter::stop`].
#[derive(Debug, Clone, Copy)]
pub struct CpuMeter {
    pid: Option<u32>,
    at_start: f64,
}

impl CpuMeter {
    /// Start measuring `pid` (nothing to measure when `None`).
    ///
    /// # Errors
    /// When the process cannot be read.
    pub fn start(pid: Option<u32>) -> anyhow::Result<CpuMeter> {
        let at_start = match pid {
            Some(pid) => cpu_seconds(pid)?,
            None => 0.0,
        };
        Ok(CpuMeter { pid, at_start })
    }

    /// CPU seconds used since `start`, or `None` without a process.
    ///
    /// # Errors
    /// When the process cannot be read (it died during the run).
    pub fn stop(&self) -> anyhow::Result<Option<f64>> {
        match self.pid {
            // Clock ticks are 1/100 s or so: drop the float noise below 1 ms.
            Some(pid) => Ok(Some(
                ((cpu_seconds(pid)? - self.at_start) * 1000.0).round() / 1000.0,
            )),
            None => Ok(None),
        }
    }
}

/// How many descriptors each of the process's epoll instances watches
/// (the `tfd:` lines of `/proc/PID/fdinfo/FD` for every
/// `anon_inode:[eventpoll]`), by descriptor number. One event loop has one
/// instance, so the growth of these sets while clients connect is how
/// the proxy spread them over its loops (two descriptors a connection).
/// An instance open under two descriptors (tokio keeps a duplicate for
/// its registry) is counted once: the second lists the same set.
///
/// # Errors
/// When the process is gone or its descriptors cannot be read.
pub fn poll_sets(pid: u32) -> anyhow::Result<Vec<(u32, usize)>> {
    let dir = format!("/proc/{pid}/fd");
    let mut sets = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("read {dir}"))? {
        let entry = entry?;
        // A descriptor closed since the listing is not an epoll instance.
        let Ok(link) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if link.to_string_lossy() != "anon_inode:[eventpoll]" {
            continue;
        }
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
            continue;
        };
        let watched: Vec<&str> = info
            .lines()
            .filter_map(|l| l.strip_prefix("tfd:"))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        sets.push((fd, watched.join(" ")));
    }
    sets.sort_unstable();
    let mut unique: Vec<(u32, usize)> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (fd, watched) in &sets {
        if !watched.is_empty() && seen.contains(&watched.as_str()) {
            continue;
        }
        seen.push(watched);
        unique.push((*fd, watched.split(' ').filter(|w| !w.is_empty()).count()));
    }
    Ok(unique)
}

/// Connections each event loop took between two [`poll_sets`] readings:
/// half the growth of each set, largest first, loops that took none left
/// out.
pub fn loop_split(before: &[(u32, usize)], after: &[(u32, usize)]) -> Vec<usize> {
    let mut split: Vec<usize> = after
        .iter()
        .map(|(fd, n)| {
            let was = before.iter().find(|(f, _)| f == fd).map_or(0, |(_, n)| *n);
            n.saturating_sub(was) / 2
        })
        .filter(|&n| n > 0)
        .collect();
    split.sort_unstable_by(|a, b| b.cmp(a));
    split
}

/// CPU seconds (user + system) of each thread alive now, by thread id,
/// with its name (`/proc/PID/task/TID/stat`).
///
/// # Errors
/// When the process is gone.
pub fn thread_cpu(pid: u32) -> anyhow::Result<Vec<(u32, String, f64)>> {
    let dir = format!("/proc/{pid}/task");
    let mut out = Vec::new();
    for task in std::fs::read_dir(&dir).with_context(|| format!("read {dir}"))? {
        let task = task?;
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        // A thread that ended since the listing is left out.
        let Ok(secs) = cpu_seconds_of(&format!("{dir}/{tid}/stat")) else {
            continue;
        };
        out.push((tid, name.trim().to_owned(), secs));
    }
    Ok(out)
}

/// Each thread's CPU seconds between two [`thread_cpu`] readings, for
/// the threads that used at least `min` seconds, largest first.
pub fn thread_delta(
    before: &[(u32, String, f64)],
    after: &[(u32, String, f64)],
    min: f64,
) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = after
        .iter()
        .map(|(tid, name, secs)| {
            let was = before
                .iter()
                .find(|(t, _, _)| t == tid)
                .map_or(0.0, |(_, _, s)| *s);
            (name.clone(), ((secs - was) * 1000.0).round() / 1000.0)
        })
        .filter(|(_, s)| *s >= min)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        assert!(cpu_seconds(me).unwrap() >= 0.0);
        assert!(rss_kib(me).unwrap() > 0);
        assert!(on_cpu_ns(me).unwrap() > 0);
        assert!(open_files_limit(me).is_ok());
        assert!(need_open_files(me, 1 << 40, "me", "--n").is_err());
    }

    #[test]
    fn loop_split_halves_each_sets_growth_largest_first() {
        let before = [(3, 2), (9, 4), (12, 4)];
        let after = [(3, 2), (9, 60), (12, 78), (20, 4)];
        assert_eq!(loop_split(&before, &after), vec![37, 28, 2]);
    }
}
