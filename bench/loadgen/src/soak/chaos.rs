//! The soak's chaos: echo backends as processes of their own (so they can
//! be killed and frozen), and what was done to what and when, for the
//! checks that account for every close.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::SystemTime;

use anyhow::Context;
use rustix::process::{Pid, Signal, kill_process};

use crate::child::Kid;

/// Something the soak did to the proxy or its backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// SIGKILL of a backend (by name).
    Kill(String),
    /// SIGSTOP of a backend.
    Freeze(String),
    /// SIGCONT of it.
    Thaw(String),
    /// A manual quarantine (released later).
    Quarantine(String),
    Release(String),
    /// A reload; the backend it removed, if any.
    Reload(Option<String>),
    /// A live upgrade.
    Upgrade,
    /// The DNS name's members changed.
    DnsFlap,
    /// SIGTERM of the proxy and a start on the same state file.
    ColdStop,
    ColdStart,
}

impl Act {
    /// How it is counted in the table.
    pub fn kind(&self) -> &'static str {
        match self {
            Act::Kill(_) => "kills",
            Act::Freeze(_) => "freezes",
            Act::Thaw(_) => "thaws",
            Act::Quarantine(_) => "quarantines",
            Act::Release(_) => "releases",
            Act::Reload(_) => "reloads",
            Act::Upgrade => "upgrades",
            Act::DnsFlap => "dns_flaps",
            Act::ColdStop => "cold_restarts",
            Act::ColdStart => "cold_starts",
        }
    }
}

/// What was done, in order.
#[derive(Debug, Default)]
pub struct Record(Mutex<Vec<(SystemTime, Act)>>);

impl Record {
    pub fn note(&self, act: Act) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((SystemTime::now(), act));
    }

    pub fn all(&self) -> Vec<(SystemTime, Act)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// An echo backend process (`loadgen echo-server`) on a fixed address.
pub struct Backend {
    pub name: String,
    pub addr: SocketAddr,
    kid: Option<Kid>,
}

impl Backend {
    /// Start `loadgen echo-server` on `addr`.
    ///
    /// # Errors
    /// It cannot be started.
    pub fn start(name: &str, addr: SocketAddr) -> anyhow::Result<Backend> {
        let mut b = Backend {
            name: name.to_owned(),
            addr,
            kid: None,
        };
        b.restart()?;
        Ok(b)
    }

    /// A P2P-shaped backend (`loadgen p2p-server`) on `addr`.
    ///
    /// # Errors
    /// It cannot be started.
    pub fn p2p(name: &str, addr: SocketAddr) -> anyhow::Result<Backend> {
        let me = std::env::current_exe().context("this program's path")?;
        let mut cmd = Command::new(me);
        cmd.args(["p2p-server", "--threads", "1", "--listen"])
            .arg(addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        Ok(Backend {
            name: name.to_owned(),
            addr,
            kid: Some(Kid::spawn(&mut cmd, &format!("backend {name}"))?),
        })
    }

    /// Start it again on its address (after a kill).
    ///
    /// # Errors
    /// It cannot be started.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let me = std::env::current_exe().context("this program's path")?;
        let mut cmd = Command::new(me);
        cmd.args(["echo-server", "--threads", "1", "--listen"])
            .arg(self.addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        self.kid = Some(Kid::spawn(&mut cmd, &format!("backend {}", self.name))?);
        Ok(())
    }

    /// Up (started and not killed since).
    pub fn running(&self) -> bool {
        self.kid.is_some()
    }

    /// SIGKILL; it stays down until [`Backend::restart`].
    pub fn kill(&mut self) {
        // Dropping the child kills and reaps it.
        self.kid = None;
    }

    /// SIGSTOP (`true`) or SIGCONT.
    ///
    /// # Errors
    /// It is not running.
    pub fn freeze(&self, frozen: bool) -> anyhow::Result<()> {
        let kid = self.kid.as_ref().context("not running")?;
        let pid = i32::try_from(kid.pid())
            .ok()
            .and_then(Pid::from_raw)
            .context("backend pid")?;
        let sig = if frozen { Signal::STOP } else { Signal::CONT };
        kill_process(pid, sig).with_context(|| format!("signal backend {}", self.name))
    }
}

/// Processes whose command line mentions one of `markers` (the soak's
/// config files): after the soak, none may be left.
pub fn processes_mentioning(markers: &[PathBuf]) -> Vec<u32> {
    let markers: Vec<String> = markers
        .iter()
        .map(|m| m.to_string_lossy().into_owned())
        .collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != std::process::id())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    let line = String::from_utf8_lossy(&c);
                    markers.iter().any(|m| line.contains(m.as_str()))
                })
                .unwrap_or(false)
        })
        .collect()
}
