//! A pin-proxy the load tool starts itself (live upgrade, drain): the
//! given binary on a config the caller wrote, its JSON log kept in a
//! scratch directory and read back for events, optionally pinned to CPUs
//! with `taskset`. Dropping it stops it, and the processes its live
//! upgrades started.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// A running pin-proxy.
pub struct Proxy {
    child: Child,
    /// The first process's id (later ones are in its log, `upgraded.pid`).
    pub pid: u32,
    dir: PathBuf,
    log: PathBuf,
}

impl Proxy {
    /// Write `config` to a scratch directory named after `name` and run
    /// `bin` on it, under `taskset -c CPUS` when `cpus` is given (a live
    /// upgrade's new process inherits the same CPUs).
    ///
    /// # Errors
    /// The directory cannot be written or the program started.
    pub fn start(
        bin: &Path,
        config: &str,
        name: &str,
        cpus: Option<&str>,
    ) -> anyhow::Result<Proxy> {
        let dir = std::env::temp_dir().join(format!("loadgen-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let config_path = dir.join("config.yaml");
        std::fs::write(&config_path, config)
            .with_context(|| format!("write {}", config_path.display()))?;
        let log = dir.join("log.jsonl");
        let out = std::fs::File::create(&log)?;
        let mut cmd = match cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(cpus).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = cmd
            .args(["run", "-c"])
            .arg(&config_path)
            .env_remove("RUST_LOG")
            .stdout(Stdio::from(out))
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let pid = child.id();
        Ok(Proxy {
            child,
            pid,
            dir,
            log,
        })
    }

    /// Its config file (a reload reads it again).
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.yaml")
    }

    /// Every event in the log so far, oldest first.
    pub fn all_events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }

    /// Every event named `message` in the log so far, oldest first.
    pub fn events(&self, message: &str) -> Vec<Value> {
        // Not written yet reads as no events.
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["message"] == message)
            .collect()
    }

    /// The `n`-th event named `message` (from 1), waiting for it.
    ///
    /// # Errors
    /// It did not come within `timeout`, or the process exited.
    pub async fn wait_for(
        &mut self,
        message: &str,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.events(message).into_iter().nth(n.saturating_sub(1)) {
                return Ok(e);
            }
            // The first process exits after a live upgrade: only an exit
            // before any upgrade is a failure.
            if let Ok(Some(status)) = self.child.try_wait()
                && self.events("upgraded").is_empty()
            {
                bail!("pin-proxy exited ({status}) before {message} #{n}");
            }
            if Instant::now() > deadline {
                bail!("no {message} #{n} in the log within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let last = self
            .events("upgraded")
            .iter()
            .rev()
            .find_map(|e| e["pid"].as_u64());
        if let Some(pid) = last {
            // Already gone is fine: there is nothing left to stop.
            let _ = Command::new("kill")
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status();
        }
        // Both fail only when it has already exited and been reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A scratch directory left behind costs nothing but disk.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
