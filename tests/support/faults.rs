//! Helpers for the fault-injection suites: what the kernel says about the
//! proxy process (open fds, RSS, its TCP sockets' timers), a position-
//! addressable byte stream for transfers too big to hold, backends as real
//! child processes, the proxy under a command prefix (`prlimit`, `unshare`,
//! `nsenter`), and a bare `/status` reader.
//!
//! Included by the fault suites with `#[path = "support/faults.rs"]`, so
//! `support/mod.rs` needs no entry for it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Seconds for the soak tests: `PIN_PROXY_SOAK_SECS`, else `default`.
pub fn soak_secs(default: u64) -> u64 {
    std::env::var("PIN_PROXY_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// True when `PIN_PROXY_SOAK_SECS` is set (a long run was asked for).
pub fn long_run() -> bool {
    std::env::var_os("PIN_PROXY_SOAK_SECS").is_some()
}

/// True when environment-dependent tests must not skip themselves.
pub fn require_peers() -> bool {
    std::env::var("PIN_PROXY_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

/// Open file descriptors of process `pid`.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/PID/fd")
        .count()
}

/// Resident set size of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line")
}

/// True while process `pid` exists and has not exited (zombies count as gone).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim().to_owned()))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// One TCP socket owned by a process, as `/proc/net/tcp{,6}` shows it.
#[derive(Debug, Clone)]
pub struct TcpSock {
    /// Local address.
    pub local: SocketAddr,
    /// Remote address.
    pub remote: SocketAddr,
    /// Kernel state number (1 = ESTABLISHED, 10 = LISTEN).
    pub state: u8,
    /// Active timer: 0 none, 1 retransmit, 2 keepalive, 3 TIME_WAIT, 4 zero-window probe.
    pub timer: u8,
    /// Time until the timer fires.
    pub timer_in: Duration,
    /// Bytes received and not yet read by the application.
    pub rx_queue: u32,
}

/// The TCP sockets process `pid` holds open (in its network namespace).
pub fn tcp_sockets(pid: u32) -> Vec<TcpSock> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || !inodes.iter().any(|i| i == f[9]) {
                continue;
            }
            let (timer, when) = f[5].split_once(':').expect("tr:tm->when");
            let (_, rx) = f[4].split_once(':').expect("tx_queue:rx_queue");
            out.push(TcpSock {
                local: proc_addr(f[1]),
                remote: proc_addr(f[2]),
                state: u8::from_str_radix(f[3], 16).expect("state"),
                timer: u8::from_str_radix(timer, 16).expect("timer"),
                // Clock ticks at USER_HZ, which is 100 on Linux.
                timer_in: Duration::from_millis(u64::from_str_radix(when, 16).expect("when") * 10),
                rx_queue: u32::from_str_radix(rx, 16).expect("rx_queue"),
            });
        }
    }
    out
}

/// Parse `0100007F:1F90` (IPv4) or the 32-hex-digit IPv6 form.
fn proc_addr(s: &str) -> SocketAddr {
    let (ip, port) = s.split_once(':').expect("addr:port");
    let port = u16::from_str_radix(port, 16).expect("port");
    // The kernel prints each 32-bit word in host (little-endian) order.
    let words: Vec<[u8; 4]> = (0..ip.len() / 8)
        .map(|i| {
            u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16)
                .expect("hex word")
                .to_le_bytes()
        })
        .collect();
    let ip: std::net::IpAddr = match words.len() {
        1 => std::net::Ipv4Addr::from(words[0]).into(),
        _ => {
            let bytes: Vec<u8> = words.concat();
            let arr: [u8; 16] = bytes.try_into().expect("16 bytes");
            std::net::Ipv6Addr::from(arr).into()
        }
    };
    SocketAddr::new(ip, port)
}

/// Byte `i` of stream `seed`: computed from its position alone, so any
/// chunk of a multi-GiB stream can be produced or checked without the rest.
fn word(seed: u64, w: u64) -> u64 {
    // splitmix64 of (seed, word index)
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(w.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(0x94D0_49BB_1331_11EB);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fill `buf` with bytes `offset..offset + buf.len()` of stream `seed`.
pub fn fill_at(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut i = offset;
    let mut rest = buf;
    // Head: up to the next word boundary.
    while !i.is_multiple_of(8) && !rest.is_empty() {
        rest[0] = word(seed, i / 8).to_le_bytes()[(i % 8) as usize];
        rest = &mut rest[1..];
        i += 1;
    }
    let mut chunks = rest.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, i / 8).to_le_bytes());
        i += 8;
    }
    for (k, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b = word(seed, i / 8).to_le_bytes()[k];
    }
}

/// Checks received bytes against stream `seed`, chunk by chunk.
pub struct Verifier {
    seed: u64,
    /// Bytes checked so far.
    pub offset: u64,
    /// Offset of the first wrong byte, if any.
    pub first_bad: Option<u64>,
    scratch: Vec<u8>,
}

impl Verifier {
    /// A verifier at offset 0 of stream `seed`.
    pub fn new(seed: u64) -> Verifier {
        Verifier {
            seed,
            offset: 0,
            first_bad: None,
            scratch: Vec::new(),
        }
    }

    /// Check the next received `data`.
    pub fn check(&mut self, data: &[u8]) {
        self.scratch.resize(data.len(), 0);
        fill_at(self.seed, self.offset, &mut self.scratch);
        if self.first_bad.is_none() && self.scratch[..] != *data {
            let k = data
                .iter()
                .zip(&self.scratch)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            self.first_bad = Some(self.offset + k as u64);
        }
        self.offset += data.len() as u64;
    }
}

/// xorshift64*: the tests' own small random source (seeded, repeatable).
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }

    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

/// A python3 child process; killed (SIGKILL) on drop.
pub struct Py {
    /// The process.
    pub child: Child,
    out: BufReader<ChildStdout>,
}

impl Py {
    /// Run `script` under `prefix` (e.g. `nsenter --net=...`) with `args`.
    pub fn spawn(prefix: &[&str], script: &str, args: &[&str]) -> Py {
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg("python3");
                c
            }
            None => Command::new("python3"),
        };
        let mut child = cmd
            .arg("-u")
            .arg("-c")
            .arg(script)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn python3");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        Py { child, out }
    }

    /// The next line the script prints (blocking).
    pub fn line(&mut self) -> String {
        let mut s = String::new();
        self.out.read_line(&mut s).expect("read python stdout");
        s.trim().to_owned()
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL it and reap it.
    pub fn kill(&mut self) {
        // Already gone is fine: the point is that it is gone.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Py {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A python backend that accepts any number of connections and, for each,
/// streams bytes forever without reading what it is sent. Prints its port.
pub const PY_STREAMER: &str = r#"
import socket, threading
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(64)
print(l.getsockname()[1], flush=True)
def serve(c):
    chunk = b"z" * 65536
    try:
        while True:
            c.sendall(chunk)
    except OSError:
        pass
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// A pin-proxy run under a command prefix (`prlimit`, `unshare`, `nsenter`
/// that exec the binary, so the pid is the proxy's), reading its JSON log.
pub struct Wrapped {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    _dir: tempfile::TempDir,
}

impl Wrapped {
    /// Write `yaml` (JSON logs at debug level prepended), run
    /// `prefix... BINARY run -c FILE`, wait for `ready` at most 10 s.
    /// `None` if the process exits before that (the prefix is unusable here).
    pub async fn start(prefix: &[&str], binary: &str, yaml: &str) -> Option<Wrapped> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            format!("log: {{ level: debug, format: json }}\n{yaml}"),
        )
        .expect("write config");
        let mut cmd = Command::new(prefix[0]);
        let mut child = cmd
            .args(&prefix[1..])
            .arg(binary)
            .arg("run")
            .arg("-c")
            .arg(&path)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn wrapped pin-proxy");
        let stdout = child.stdout.take().expect("stdout");
        let lines: Arc<Mutex<Vec<Value>>> = Arc::default();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        let mut w = Wrapped {
            child,
            lines,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !w.named("ready").is_empty() {
                return Some(w);
            }
            if w.child.try_wait().expect("try_wait").is_some() {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("wrapped pin-proxy did not get ready; log: {:?}", w.events());
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    /// Events whose `message` is `name`.
    pub fn named(&self, name: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["message"] == name)
            .collect()
    }

    /// The first bound address of `pool`.
    pub fn addr(&self, pool: &str) -> SocketAddr {
        self.named("listening")
            .iter()
            .find(|e| e["pool"] == pool)
            .and_then(|e| e["listen"].as_str()?.parse().ok())
            .expect("pool listening")
    }

    /// Wait (async) for `n` events named `name` matching `pred`.
    pub async fn wait_named(
        &self,
        name: &str,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        wait_events(|| self.named(name), n, timeout, pred, name).await
    }
}

impl Drop for Wrapped {
    fn drop(&mut self) {
        // Already exited is fine.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `events` every 20 ms until `n` of them match `pred`; panics naming
/// `what` after `timeout`. Async, so a busy test runtime keeps running.
pub async fn wait_events(
    events: impl Fn() -> Vec<Value>,
    n: usize,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
    what: &str,
) -> Vec<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let found: Vec<Value> = events().into_iter().filter(|e| pred(e)).collect();
        if found.len() >= n {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {n} `{what}` events (found {}): {found:?}",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `GET path` from the admin endpoint, body parsed as JSON (blocking, short).
pub fn admin_get(admin: SocketAddr, path: &str) -> Value {
    let mut s = std::net::TcpStream::connect(admin).expect("connect admin");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read admin answer");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

/// Live client connections of `pool` according to `/status`.
pub fn live_connections(admin: SocketAddr, pool: &str) -> u64 {
    let status = admin_get(admin, "/status");
    status["pools"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == pool))
        .and_then(|p| p["connections"].as_u64())
        .expect("pool in /status")
}

/// The admin address from an `admin_listening` event.
pub fn admin_addr(events: &[Value]) -> SocketAddr {
    events
        .iter()
        .find(|e| e["message"] == "admin_listening")
        .and_then(|e| e["listen"].as_str()?.parse().ok())
        .expect("admin_listening event")
}

/// Milliseconds, for reports.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Wait (async) for `n` events named `name` matching `pred`.
pub async fn wait_named(
    proxy: &crate::support::proxy::Proxy,
    name: &str,
    n: usize,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    wait_events(|| proxy.named(name), n, timeout, pred, name).await
}
