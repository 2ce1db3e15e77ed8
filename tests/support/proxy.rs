//! Run the real `pin-proxy` binary with a config and read its JSON log events.
//! Waits are async (a `watch` fed by the log reader thread wakes them); the
//! `_blocking` forms are for plain `#[test]`s only.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::watch;

/// Log events read so far, shared with the reader thread.
struct Events {
    lines: Mutex<Vec<Value>>,
    /// Wakes blocking waits.
    more: Condvar,
    /// The number of lines read, for async waits.
    count: watch::Sender<usize>,
    /// Set once the process's stdout closed: every line is in.
    ended: watch::Sender<bool>,
}

/// Events of `lines` from index `from` on that match `pred`, if at least `n`.
fn found(
    lines: &[Value],
    from: usize,
    pred: &impl Fn(&Value) -> bool,
    n: usize,
) -> Option<Vec<Value>> {
    let found: Vec<Value> = lines
        .iter()
        .skip(from)
        .filter(|e| pred(e))
        .cloned()
        .collect();
    (found.len() >= n).then_some(found)
}

impl Events {
    fn new() -> Events {
        Events {
            lines: Mutex::default(),
            more: Condvar::new(),
            count: watch::Sender::new(0),
            ended: watch::Sender::new(false),
        }
    }

    /// The timeout panic, with the whole log. The lock is let go first: a
    /// poisoned one would make the drop of the [`Proxy`] panic again, and
    /// a panic while unwinding aborts every test of the binary.
    fn timed_out(&self, what: &str) -> ! {
        let log: Vec<String> = {
            let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
            lines.iter().map(|e| e.to_string()).collect()
        };
        panic!("timed out waiting for {what}; log:\n{}", log.join("\n"));
    }

    /// Wait (async) until `n` events from index `from` on match `pred`.
    async fn wait(
        &self,
        from: usize,
        pred: impl Fn(&Value) -> bool,
        n: usize,
        timeout: Duration,
    ) -> Vec<Value> {
        let what = format!("{n} matching events");
        self.wait_for(&what, timeout, |lines| found(lines, from, &pred, n))
            .await
    }

    /// Wait (async) until `check` of the whole log gives an answer, woken
    /// by each new line; panics with the log on timeout.
    async fn wait_for<R>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&[Value]) -> Option<R>,
    ) -> R {
        let deadline = tokio::time::Instant::now() + timeout;
        let look = || check(&self.lines.lock().unwrap_or_else(PoisonError::into_inner));
        // Subscribed before looking, so no line read in between is missed.
        let (mut more, mut ended) = (self.count.subscribe(), self.ended.subscribe());
        loop {
            // Read before looking: once it is set, every line is in.
            let over = *ended.borrow_and_update();
            if let Some(found) = look() {
                return found;
            }
            if over {
                self.timed_out(&format!("{what} (the log ended)"));
            }
            tokio::select! {
                r = tokio::time::timeout_at(deadline, more.changed()) => {
                    if !matches!(r, Ok(Ok(()))) {
                        return look().unwrap_or_else(|| self.timed_out(what));
                    }
                }
                // The process closed its stdout: look once more, above.
                _ = ended.changed() => {}
            }
        }
    }

    /// As [`Events::wait`], blocking the thread.
    fn wait_blocking(
        &self,
        from: usize,
        pred: impl Fn(&Value) -> bool,
        n: usize,
        timeout: Duration,
    ) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut lines = self.lines.lock().unwrap();
        loop {
            if let Some(found) = found(&lines, from, &pred, n) {
                return found;
            }
            let now = Instant::now();
            if now >= deadline {
                drop(lines);
                self.timed_out(&format!("{n} matching events"));
            }
            lines = self.more.wait_timeout(lines, deadline - now).unwrap().0;
        }
    }
}

/// The connections one `closed` event accounts for: 1 for a full line,
/// `suppressed` for a summary line.
pub fn closed_accounted(e: &Value) -> usize {
    e["suppressed"].as_u64().map_or(1, |n| n as usize)
}

/// The `closed` events of `events` matching `pred`, once they account for
/// at least `n` connections.
fn closed_of(events: &[Value], n: usize, pred: &impl Fn(&Value) -> bool) -> Option<Vec<Value>> {
    let found: Vec<Value> = events
        .iter()
        .filter(|e| e["message"] == "closed" && pred(e))
        .cloned()
        .collect();
    (found.iter().map(closed_accounted).sum::<usize>() >= n).then_some(found)
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
    pub async fn start(yaml: &str) -> Proxy {
        Proxy::start_with_env(yaml, &[]).await
    }

    /// As [`Proxy::start`], with extra environment variables.
    pub async fn start_with_env(yaml: &str, env: &[(&str, &str)]) -> Proxy {
        Proxy::start_from(std::path::Path::new(binary()), yaml, env).await
    }

    /// As [`Proxy::start_with_env`], running the binary at `bin` (a copy a
    /// test may replace, to upgrade to something else).
    pub async fn start_from(bin: &std::path::Path, yaml: &str, env: &[(&str, &str)]) -> Proxy {
        let mut proxy = Proxy::spawn_from(bin, yaml, env);
        proxy
            .events
            .wait(0, |e| e["message"] == "ready", 1, START)
            .await;
        proxy.ready();
        proxy
    }

    /// As [`Proxy::start`], blocking the thread (for plain `#[test]`s).
    pub fn start_blocking(yaml: &str) -> Proxy {
        let mut proxy = Proxy::spawn(yaml, &[]);
        proxy
            .events
            .wait_blocking(0, |e| e["message"] == "ready", 1, START);
        proxy.ready();
        proxy
    }

    /// As [`Proxy::start_blocking`], the process running inside the network
    /// namespace `netns` (`ip netns exec`, which execs it: [`Proxy::pid`]
    /// is still pin-proxy's), so it binds and connects there.
    pub fn start_in_netns_blocking(netns: &str, yaml: &str) -> Proxy {
        let mut proxy = Proxy::spawn_in(Some(netns), std::path::Path::new(binary()), yaml, &[]);
        proxy
            .events
            .wait_blocking(0, |e| e["message"] == "ready", 1, START);
        proxy.ready();
        proxy
    }

    fn spawn(yaml: &str, env: &[(&str, &str)]) -> Proxy {
        Proxy::spawn_from(std::path::Path::new(binary()), yaml, env)
    }

    fn spawn_from(bin: &std::path::Path, yaml: &str, env: &[(&str, &str)]) -> Proxy {
        Proxy::spawn_in(None, bin, yaml, env)
    }

    fn spawn_in(
        netns: Option<&str>,
        bin: &std::path::Path,
        yaml: &str,
        env: &[(&str, &str)],
    ) -> Proxy {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, with_log(yaml)).expect("write config");
        let command = || match netns {
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(bin);
                cmd
            }
            None => Command::new(bin),
        };
        let mut child = loop {
            let spawned = command()
                .arg("run")
                .arg("-c")
                .arg(&path)
                .env_remove("RUST_LOG")
                .envs(env.iter().copied())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn();
            match spawned {
                // A copy of the binary just written may still be open for
                // writing in a child another test thread is forking: retry.
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other.expect("spawn pin-proxy"),
            }
        };
        let stdout = child.stdout.take().expect("stdout");
        let events = Arc::new(Events::new());
        let sink = events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| panic!("log line is not JSON: {line}"));
                let n = {
                    let mut lines = sink.lines.lock().unwrap();
                    lines.push(value);
                    lines.len()
                };
                sink.more.notify_all();
                sink.count.send_replace(n);
            }
            sink.ended.send_replace(true);
        });
        Proxy {
            child,
            config: path,
            events,
            addrs: Vec::new(),
            _dir: dir,
        }
    }

    /// Take the listen addresses from the log, once `ready` is logged.
    fn ready(&mut self) {
        self.addrs = self
            .events()
            .iter()
            .filter(|e| e["message"] == "listening")
            .map(|e| {
                let pool = e["pool"].as_str().unwrap().to_owned();
                (pool, e["listen"].as_str().unwrap().parse().unwrap())
            })
            .collect();
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
        let lines = self.events.lines.lock();
        lines.unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Events whose `message` is `name`.
    pub fn named(&self, name: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["message"] == name)
            .collect()
    }

    /// Wait for an event matching `pred`; panics with the log on timeout.
    pub async fn wait_event(&self, pred: impl Fn(&Value) -> bool, timeout: Duration) -> Value {
        self.wait_count(pred, 1, timeout).await.remove(0)
    }

    /// Wait until `n` events match `pred` and return them.
    pub async fn wait_count(
        &self,
        pred: impl Fn(&Value) -> bool,
        n: usize,
        timeout: Duration,
    ) -> Vec<Value> {
        self.events.wait(0, pred, n, timeout).await
    }

    /// Wait until `check` of every event so far gives an answer (woken by
    /// each new line); panics with the log, naming `what`, on timeout.
    pub async fn wait_log<R>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&[Value]) -> Option<R>,
    ) -> R {
        self.events.wait_for(what, timeout, check).await
    }

    /// Wait until the `closed` events matching `pred` account for `n`
    /// connections: a full line for one, a summary line (which folds a
    /// flood's short connections, and names no client) for its
    /// `suppressed` count. Returns those events.
    pub async fn wait_closed(
        &self,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let what = format!("closed events of {n} connections");
        self.wait_log(&what, timeout, |events| closed_of(events, n, &pred))
            .await
    }

    /// As [`Proxy::wait_closed`], blocking the thread (for plain `#[test]`s).
    pub fn wait_closed_blocking(
        &self,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut lines = self.events.lines.lock().unwrap();
        loop {
            if let Some(found) = closed_of(&lines, n, &pred) {
                return found;
            }
            let now = Instant::now();
            if now >= deadline {
                drop(lines);
                self.events
                    .timed_out(&format!("closed events of {n} connections"));
            }
            lines = self
                .events
                .more
                .wait_timeout(lines, deadline - now)
                .unwrap()
                .0;
        }
    }

    /// As [`Proxy::wait_event`], blocking the thread (for plain `#[test]`s).
    pub fn wait_event_blocking(&self, pred: impl Fn(&Value) -> bool, timeout: Duration) -> Value {
        self.wait_count_blocking(pred, 1, timeout).remove(0)
    }

    /// As [`Proxy::wait_count`], blocking the thread (for plain `#[test]`s).
    pub fn wait_count_blocking(
        &self,
        pred: impl Fn(&Value) -> bool,
        n: usize,
        timeout: Duration,
    ) -> Vec<Value> {
        self.events.wait_blocking(0, pred, n, timeout)
    }

    /// Every event, once the process has closed its stdout (exited): no
    /// line can come after these.
    pub async fn all_events(&self, timeout: Duration) -> Vec<Value> {
        let mut ended = self.events.ended.subscribe();
        tokio::time::timeout(timeout, ended.wait_for(|e| *e))
            .await
            .unwrap_or_else(|_| self.events.timed_out("the end of the log"))
            .expect("the reader keeps its sender");
        self.events()
    }

    /// The process id of the first process (the one this started).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process that serves now: the last one a live upgrade started,
    /// or the first.
    pub fn live_pid(&self) -> u32 {
        self.named("upgraded")
            .last()
            .and_then(|e| e["pid"].as_u64())
            .map_or(self.child.id(), |pid| pid as u32)
    }

    /// The admin endpoint's address, once it was logged.
    pub fn admin(&self) -> SocketAddr {
        let e = self.named("admin_listening");
        e.first()
            .and_then(|e| e["listen"].as_str())
            .expect("admin_listening logged")
            .parse()
            .expect("admin address")
    }

    /// The config file the process reads (and re-reads on SIGHUP).
    pub fn config_path(&self) -> &std::path::Path {
        &self.config
    }

    /// Replace the config file (the same `log:` default applies) and send
    /// SIGHUP; returns the `reloaded` or `reload_failed` event.
    pub async fn reload(&self, yaml: &str) -> Value {
        let before = self.events().len();
        std::fs::write(&self.config, with_log(yaml)).expect("write config");
        self.signal("HUP");
        let outcome = |e: &Value| e["message"] == "reloaded" || e["message"] == "reload_failed";
        self.events.wait(before, outcome, 1, START).await.remove(0)
    }

    /// As [`Proxy::reload`], blocking the thread (for plain `#[test]`s and
    /// `spawn_blocking`).
    pub fn reload_blocking(&self, yaml: &str) -> Value {
        let before = self.events().len();
        std::fs::write(&self.config, with_log(yaml)).expect("write config");
        self.signal("HUP");
        let outcome = |e: &Value| e["message"] == "reloaded" || e["message"] == "reload_failed";
        self.events
            .wait_blocking(before, outcome, 1, START)
            .remove(0)
    }

    /// Send a signal (`TERM`, `INT`, `HUP`, `USR2`) to the process that
    /// serves now.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.live_pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Wait for the process to exit, at most `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            // No exit notification for a child in std: look again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Bound on start-up and on a reload's outcome.
const START: Duration = Duration::from_secs(10);

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
        // Later generations are nobody's child here: kill them by pid.
        let live = self.live_pid();
        if live != self.child.id() {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(live.to_string())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
