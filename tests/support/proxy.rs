//! Run the real `pin-proxy` binary with a config and read its JSON log events.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Log events read so far, shared with the reader thread.
#[derive(Default)]
struct Events {
    lines: Mutex<Vec<Value>>,
    more: Condvar,
}

/// A running pin-proxy process; killed on drop.
pub struct Proxy {
    child: Child,
    config: std::path::PathBuf,
    events: Arc<Events>,
    addrs: Vec<(String, SocketAddr)>,
    _dir: tempfile::TempDir,
}

/// Path of the binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_pin-proxy")
}

impl Proxy {
    /// Start pin-proxy on `yaml` (JSON logs at debug level unless the yaml
    /// says otherwise) and wait until it reports `ready`.
    pub fn start(yaml: &str) -> Proxy {
        Proxy::start_with_env(yaml, &[])
    }

    /// As [`Proxy::start`], with extra environment variables.
    pub fn start_with_env(yaml: &str, env: &[(&str, &str)]) -> Proxy {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, with_log(yaml)).expect("write config");
        let mut child = Command::new(binary())
            .arg("run")
            .arg("-c")
            .arg(&path)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn pin-proxy");
        let stdout = child.stdout.take().expect("stdout");
        let events = Arc::new(Events::default());
        let sink = events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| panic!("log line is not JSON: {line}"));
                sink.lines.lock().unwrap().push(value);
                sink.more.notify_all();
            }
        });
        let mut proxy = Proxy {
            child,
            config: path,
            events,
            addrs: Vec::new(),
            _dir: dir,
        };
        proxy.wait_event(|e| e["message"] == "ready", Duration::from_secs(10));
        proxy.addrs = proxy
            .events()
            .iter()
            .filter(|e| e["message"] == "listening")
            .map(|e| {
                let pool = e["pool"].as_str().unwrap().to_owned();
                (pool, e["listen"].as_str().unwrap().parse().unwrap())
            })
            .collect();
        proxy
    }

    /// The first bound address of `pool`.
    pub fn addr(&self, pool: &str) -> SocketAddr {
        self.addrs_of(pool)[0]
    }

    /// Every bound address of `pool`.
    pub fn addrs_of(&self, pool: &str) -> Vec<SocketAddr> {
        let found: Vec<_> = self
            .addrs
            .iter()
            .filter(|(p, _)| p == pool)
            .map(|(_, a)| *a)
            .collect();
        assert!(!found.is_empty(), "pool {pool} is not listening");
        found
    }

    /// Every event logged so far.
    pub fn events(&self) -> Vec<Value> {
        self.events.lines.lock().unwrap().clone()
    }

    /// Events whose `message` is `name`.
    pub fn named(&self, name: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["message"] == name)
            .collect()
    }

    /// Wait for an event matching `pred`; panics with the log on timeout.
    pub fn wait_event(&self, pred: impl Fn(&Value) -> bool, timeout: Duration) -> Value {
        self.wait_count(&pred, 1, timeout).remove(0)
    }

    /// Wait until `n` events match `pred` and return them.
    pub fn wait_count(
        &self,
        pred: impl Fn(&Value) -> bool,
        n: usize,
        timeout: Duration,
    ) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut lines = self.events.lines.lock().unwrap();
        loop {
            let found: Vec<Value> = lines.iter().filter(|e| pred(e)).cloned().collect();
            if found.len() >= n {
                return found;
            }
            let now = Instant::now();
            if now >= deadline {
                let log: Vec<String> = lines.iter().map(|e| e.to_string()).collect();
                panic!(
                    "timed out waiting for {n} matching events (found {}); log:\n{}",
                    found.len(),
                    log.join("\n")
                );
            }
            lines = self
                .events
                .more
                .wait_timeout(lines, deadline - now)
                .unwrap()
                .0;
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The config file the process reads (and re-reads on SIGHUP).
    pub fn config_path(&self) -> &std::path::Path {
        &self.config
    }

    /// Replace the config file (the same `log:` default applies) and send
    /// SIGHUP; returns the `reloaded` or `reload_failed` event.
    pub fn reload(&self, yaml: &str) -> Value {
        let before = self.events().len();
        std::fs::write(&self.config, with_log(yaml)).expect("write config");
        self.signal("HUP");
        let outcome = |e: &Value| e["message"] == "reloaded" || e["message"] == "reload_failed";
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(e) = self.events().into_iter().skip(before).find(|e| outcome(e)) {
                return e;
            }
            assert!(Instant::now() < deadline, "no reload outcome logged");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Send a signal (`TERM`, `INT`, `HUP`) to the process.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Wait for the process to exit, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

/// JSON logs at debug level unless the yaml sets `log:` itself.
fn with_log(yaml: &str) -> String {
    if yaml.contains("\nlog:") || yaml.starts_with("log:") {
        yaml.to_owned()
    } else {
        format!("log: {{ level: debug, format: json }}\n{yaml}")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
