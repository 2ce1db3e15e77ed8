//! Real Litecoin Core regtest nodes on loopback for end-to-end tests.
//!
//! Each [`Litecoind`] owns a `litecoind` child process and a temporary datadir;
//! both go away on drop, also when the test panics. RPC goes through
//! `litecoin-cli` with the node's cookie, so no credentials are configured.
//!
//! Things learned from Litecoin Core 0.21.2.1 that shape this file:
//! - A P2P `-bind` failure is logged but NOT fatal: the node keeps running and
//!   answers RPC. Readiness therefore also waits for `Bound to <p2p addr>` in
//!   `debug.log`, and any `Unable to bind` restarts the node on fresh ports.
//! - Even with `-listenonion=0` the node binds the Tor target `127.0.0.1:19444`
//!   unless an `=onion` bind is given, so every node gets its own onion port.
//! - MWEB activates at height 432 on regtest; after that `generatetoaddress`
//!   without an MWEB peg-in fails (`bad-txns-vin-empty`). [`Litecoind::mine`]
//!   refuses to go past [`MAX_HEIGHT`].
//! - No wallet is needed: blocks are mined to a fixed regtest address.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Highest block height that can be mined without an MWEB peg-in (MWEB
/// activates at 432 on regtest).
pub const MAX_HEIGHT: u64 = 431;

/// P2WPKH of the secp256k1 generator point's public key on Litecoin regtest:
/// a fixed, valid payout address, so mining needs no wallet.
const MINING_ADDRESS: &str = "rltc1qw508d6qejxtdg4y5r3zarvary0c5xw7k693xs3";

/// How long a node may take to answer RPC and bind its P2P port.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Attempts with fresh ports before giving up on a bind race.
const START_ATTEMPTS: u32 = 5;

/// Env variable that turns a missing `litecoind` into a test failure.
const REQUIRE_ENV: &str = "PIN_PROXY_REQUIRE_PEERS";

/// A regtest litecoind process with its own temp datadir; killed (and the
/// datadir removed) on drop.
pub struct Litecoind {
    child: Child,
    p2p: SocketAddr,
    rpc_port: u16,
    onion_port: u16,
    /// The `-connect=` value, for a restart.
    connect: String,
    /// The network namespace it runs in (`ip netns exec`), if not ours.
    netns: Option<String>,
    // Dropped after `child` is killed in `Drop::drop`.
    dir: tempfile::TempDir,
}

/// Whether `litecoind` and `litecoin-cli` are on `PATH`.
///
/// When they are not, prints "skipping: litecoind not installed" to stderr and
/// returns false, unless `PIN_PROXY_REQUIRE_PEERS=1`: then it panics.
pub fn available() -> bool {
    peers_available(&["litecoind", "litecoin-cli"])
}

/// Whether every program of `bins` is found by [`find_program`]; as
/// [`available`] when not.
pub fn peers_available(bins: &[&str]) -> bool {
    let missing: Vec<&str> = bins
        .iter()
        .copied()
        .filter(|bin| find_program(bin).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let where_ = format!("on PATH or in {}", SYSTEM_DIRS.join(" or "));
    not_installed(&missing.join(" and "), &where_)
}

/// `what` was not found `where_`: false after a skip notice, or a panic
/// under `PIN_PROXY_REQUIRE_PEERS=1`.
pub fn not_installed(what: &str, where_: &str) -> bool {
    if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
        panic!("{REQUIRE_ENV}=1 but {what} not found {where_} (run .ci/install-peers.sh)");
    }
    eprintln!("skipping: {what} not installed");
    false
}

/// Where system daemons are installed that a user's `PATH` often lacks
/// (Debian puts `dnsmasq` in `/usr/sbin`).
const SYSTEM_DIRS: [&str; 2] = ["/usr/sbin", "/sbin"];

/// The path of program `bin`: the first on `PATH`, else in [`SYSTEM_DIRS`].
pub fn find_program(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SYSTEM_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(bin))
        .find(|p| p.is_file())
}

impl Litecoind {
    /// Start a node; `connect` = `Some(addr)` adds `-connect=addr`, `None` adds
    /// `-connect=0`. Waits until RPC answers and the P2P port is bound.
    ///
    /// Returns `None` (after the notice of [`available`]) when the binaries are
    /// absent. Panics if the node cannot be started.
    pub fn start(connect: Option<SocketAddr>) -> Option<Litecoind> {
        Self::start_with(connect, &[])
    }

    /// As [`Litecoind::start`], with `extra` arguments after ours (they
    /// win: `-peerblockfilters=1`, `-prune=550`).
    pub fn start_with(connect: Option<SocketAddr>, extra: &[&str]) -> Option<Litecoind> {
        Self::start_at(None, IpAddr::from([127, 0, 0, 1]), connect, extra)
    }

    /// As [`Litecoind::start`] (`-connect=0`), inside the network namespace
    /// `netns` (`ip netns exec`, for the node and its `litecoin-cli`), P2P
    /// bound to `ip` (an address of that namespace); RPC stays on its
    /// loopback.
    pub fn start_in(netns: &str, ip: IpAddr) -> Option<Litecoind> {
        Self::start_at(Some(netns), ip, None, &[])
    }

    fn start_at(
        netns: Option<&str>,
        ip: IpAddr,
        connect: Option<SocketAddr>,
        extra: &[&str],
    ) -> Option<Litecoind> {
        if !available() {
            return None;
        }
        let mut last_err = String::new();
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(netns, ip, connect, extra) {
                Ok(node) => return Some(node),
                Err(StartError::PortTaken(msg)) => last_err = msg,
                Err(StartError::Fatal(msg)) => panic!("start litecoind: {msg}"),
            }
        }
        panic!("start litecoind: ports kept being taken ({START_ATTEMPTS} tries): {last_err}");
    }

    fn try_start(
        netns: Option<&str>,
        ip: IpAddr,
        connect: Option<SocketAddr>,
        extra: &[&str],
    ) -> Result<Litecoind, StartError> {
        let dir = tempfile::Builder::new()
            .prefix("pin-proxy-ltc-")
            .tempdir()
            .map_err(|e| StartError::Fatal(format!("create datadir: {e}")))?;
        let [p2p_port, rpc_port, onion_port] = free_ports();
        let connect = connect.map_or_else(|| "0".to_string(), |a| a.to_string());
        let p2p = SocketAddr::new(ip, p2p_port);
        let child = spawn(
            netns,
            dir.path(),
            (p2p, rpc_port, onion_port),
            &connect,
            extra,
        )?;
        // From here on, Drop kills the child whatever happens.
        let mut node = Litecoind {
            child,
            p2p,
            rpc_port,
            onion_port,
            connect,
            netns: netns.map(str::to_owned),
            dir,
        };
        node.wait_ready()?;
        Ok(node)
    }

    /// Polls until RPC answers and the P2P port is bound, or the node fails.
    fn wait_ready(&mut self) -> Result<(), StartError> {
        let bound = format!("Bound to {}", self.p2p);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let log = self.debug_log();
            if log.contains("Unable to bind") {
                return Err(StartError::PortTaken(self.diagnostics()));
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let diag = self.diagnostics();
                return Err(if diag.contains("Unable to bind") {
                    StartError::PortTaken(diag)
                } else {
                    StartError::Fatal(format!("litecoind exited with {status}: {diag}"))
                });
            }
            if log.contains(&bound) && self.rpc(&["getblockcount"]).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(StartError::Fatal(format!(
                    "not ready after {START_TIMEOUT:?}: {}",
                    self.diagnostics()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the node cleanly (RPC `stop`, so its chain is on disk for a
    /// restart) and wait for it to exit; killed if it has not within
    /// [`START_TIMEOUT`]. Its port then refuses connections.
    pub fn stop(&mut self) {
        // An error means it is stopping or gone already: the wait tells.
        let _ = self.rpc(&["stop"]);
        let deadline = Instant::now() + START_TIMEOUT;
        while matches!(self.child.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Start the node again (after [`Litecoind::stop`]) on the same
    /// ports and datadir, with `extra` arguments instead of the first
    /// start's (`-peerblockfilters=1`, say). Panics if it cannot start.
    pub fn start_again(&mut self, extra: &[&str]) {
        // Readiness reads this run's log only: the last one says "Bound".
        let log = self.debug_log_path();
        if log.exists() {
            let old = log.with_extension("log.before");
            fs::rename(&log, &old).unwrap_or_else(|e| panic!("rename {}: {e}", log.display()));
        }
        let ports = (self.p2p, self.rpc_port, self.onion_port);
        let netns = self.netns.as_deref();
        self.child = match spawn(netns, self.dir.path(), ports, &self.connect, extra) {
            Ok(child) => child,
            Err(StartError::PortTaken(e) | StartError::Fatal(e)) => panic!("restart: {e}"),
        };
        if let Err(StartError::PortTaken(e) | StartError::Fatal(e)) = self.wait_ready() {
            panic!("restart litecoind on {}: {e}", self.p2p);
        }
    }

    /// The `127.0.0.1:port` the node listens on for P2P (the address given
    /// to [`Litecoind::start_in`]).
    pub fn p2p_addr(&self) -> SocketAddr {
        self.p2p
    }

    /// The node's process id (to freeze it with SIGSTOP, say).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The loopback port of its RPC server.
    pub fn rpc_port(&self) -> u16 {
        self.rpc_port
    }

    /// RPC credentials, `user:password`, from the node's cookie file.
    pub fn rpc_auth(&self) -> String {
        let cookie = self.dir.path().join("regtest").join(".cookie");
        fs::read_to_string(&cookie)
            .unwrap_or_else(|e| panic!("read {}: {e}", cookie.display()))
            .trim()
            .to_owned()
    }

    /// Mines `blocks` blocks (`generatetoaddress`). Panics if that would pass
    /// [`MAX_HEIGHT`] (MWEB activation) or if the RPC fails.
    pub fn mine(&self, blocks: u64) {
        let target = self.height() + blocks;
        assert!(
            target <= MAX_HEIGHT,
            "mine to height {target}: regtest MWEB activates at {}, blocks past {MAX_HEIGHT} \
             need an MWEB peg-in this helper does not make",
            MAX_HEIGHT + 1
        );
        self.call(&["generatetoaddress", &blocks.to_string(), MINING_ADDRESS]);
    }

    /// Current block height (`getblockcount`).
    pub fn height(&self) -> u64 {
        let out = self.call(&["getblockcount"]);
        out.parse()
            .unwrap_or_else(|e| panic!("getblockcount answered {out:?}: {e}"))
    }

    /// Hash of the tip (`getbestblockhash`).
    pub fn best_hash(&self) -> String {
        self.call(&["getbestblockhash"])
    }

    /// Number of connected peers (`getconnectioncount`).
    pub fn peer_count(&self) -> u64 {
        let out = self.call(&["getconnectioncount"]);
        out.parse()
            .unwrap_or_else(|e| panic!("getconnectioncount answered {out:?}: {e}"))
    }

    /// Polls `getblockcount` until it reaches `h`; false if `timeout` passed.
    /// RPC errors while polling count as "not yet".
    pub fn wait_height(&self, h: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let height = self
                .rpc(&["getblockcount"])
                .ok()
                .and_then(|s| s.parse().ok());
            if height.is_some_and(|got: u64| got >= h) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs one RPC and panics with the node's answer if it fails.
    pub fn call(&self, args: &[&str]) -> String {
        self.rpc(args)
            .unwrap_or_else(|e| panic!("litecoin-cli {}: {e}", args.join(" ")))
    }

    /// Runs one RPC through `litecoin-cli`; the trimmed stdout, or stderr as
    /// the error.
    pub fn rpc(&self, args: &[&str]) -> Result<String, String> {
        let out = in_netns(self.netns.as_deref(), "litecoin-cli")
            .arg("-regtest")
            .arg(format!("-datadir={}", self.dir.path().display()))
            .arg("-rpcconnect=127.0.0.1")
            .arg(format!("-rpcport={}", self.rpc_port))
            .arg("-rpcclienttimeout=60")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("spawn litecoin-cli: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    /// The node's datadir (`<dir>/regtest/debug.log` is its log).
    pub fn datadir(&self) -> &Path {
        self.dir.path()
    }

    fn debug_log_path(&self) -> PathBuf {
        self.dir.path().join("regtest").join("debug.log")
    }

    fn debug_log(&self) -> String {
        // Absent until the node has started logging: treat as empty.
        fs::read_to_string(self.debug_log_path()).unwrap_or_default()
    }

    /// Stderr and the end of debug.log, for failure messages.
    fn diagnostics(&self) -> String {
        let stderr = fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default();
        let log = self.debug_log();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "stderr: {}\ndebug.log tail:\n{}",
            stderr.trim(),
            tail.join("\n")
        )
    }
}

impl Drop for Litecoind {
    fn drop(&mut self) {
        // SIGKILL: the datadir is thrown away, so a clean shutdown buys nothing.
        // Errors mean the process already exited, which is what we want.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Litecoin regtest message start.
pub const REGTEST: [u8; 4] = [0xfa, 0xbf, 0xb5, 0xda];

/// A peer's side of the P2P handshake at `addr`, as mwebd does it: the
/// stream and the `start_height` the node announced, or why the handshake
/// did not finish (closed, reset, timed out after `timeout`).
pub fn try_peer(addr: SocketAddr, timeout: Duration) -> Result<(TcpStream, u64), String> {
    let stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    handshake(stream, addr, timeout)
}

/// [`try_peer`] from the local address `from` (a loopback address such as
/// 127.0.0.2: another client address to the proxy).
pub fn try_peer_from(
    from: IpAddr,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<(TcpStream, u64), String> {
    let stream = connect_from(from, addr).map_err(|e| format!("connect from {from}: {e}"))?;
    handshake(stream, addr, timeout)
}

/// A TCP connection to `to` from the local address `from`.
pub fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(to), Type::STREAM, None)?;
    socket.bind(&SocketAddr::new(from, 0).into())?;
    socket.connect(&to.into())?;
    Ok(socket.into())
}

fn handshake(
    mut stream: TcpStream,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<(TcpStream, u64), String> {
    use pin_proxy::inspect::wire::{self, Decoder, Version, VersionParams};
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let params = VersionParams {
        services: 0,
        timestamp: wire::unix_now(),
        receiver: addr,
        sender: stream.local_addr().map_err(|e| e.to_string())?,
        nonce: wire::random_nonce(),
        user_agent: "/pin-proxy-test/".into(),
        start_height: 0,
    };
    let version = wire::encode(REGTEST, "version", &wire::version_payload(&params));
    stream
        .write_all(&version)
        .map_err(|e| format!("send version: {e}"))?;
    let mut decoder = Decoder::new(REGTEST);
    let mut height = None;
    let mut buf = [0u8; 4096];
    // The node's version, then its verack (other messages may come between).
    loop {
        while let Some(msg) = decoder.next_message().map_err(|e| e.to_string())? {
            match msg.command.as_str() {
                "version" => {
                    let v = Version::parse(&msg.payload).map_err(|e| e.to_string())?;
                    height = Some(u64::try_from(v.start_height).map_err(|e| e.to_string())?);
                }
                "verack" if height.is_some() => {
                    let verack = wire::encode(REGTEST, "verack", &[]);
                    stream
                        .write_all(&verack)
                        .map_err(|e| format!("send verack: {e}"))?;
                    return Ok((stream, height.unwrap_or_default()));
                }
                _ => {}
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err("closed during the handshake".into()),
            Ok(n) => decoder.feed(&buf[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// [`try_peer`] that must succeed.
pub fn peer(addr: SocketAddr, timeout: Duration) -> (TcpStream, u64) {
    try_peer(addr, timeout).unwrap_or_else(|e| panic!("handshake through {addr}: {e}"))
}

/// `program`, run inside the network namespace `netns` when given.
fn in_netns(netns: Option<&str>, program: &str) -> Command {
    match netns {
        Some(ns) => {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", ns, program]);
            cmd
        }
        None => Command::new(program),
    }
}

/// Start `litecoind` on regtest in `dir` (inside `netns` when given) with
/// P2P on `p2p`, the loopback ports `rpc` and `onion`, `-connect=<connect>`
/// and `extra` after our arguments.
fn spawn(
    netns: Option<&str>,
    dir: &Path,
    (p2p, rpc_port, onion_port): (SocketAddr, u16, u16),
    connect: &str,
    extra: &[&str],
) -> Result<Child, StartError> {
    let p2p_port = p2p.port();
    let stderr = File::create(dir.join("stderr.log"))
        .map_err(|e| StartError::Fatal(format!("create stderr.log: {e}")))?;
    // Debian's `litecoind` is a wrapper that makes `~/.litecoin` with a
    // plain `mkdir` when it is missing: two nodes started at once from a
    // fresh home race on it and one exits ("File exists"). Each node gets
    // its own home, inside its own data directory.
    // `ip netns exec` execs the program: the child is litecoind itself.
    in_netns(netns, "litecoind")
        .env("HOME", dir)
        .arg("-regtest")
        .arg(format!("-datadir={}", dir.display()))
        .args(["-server=1", "-daemon=0", "-printtoconsole=0"])
        .args(["-listen=1", "-discover=0", "-dnsseed=0", "-upnp=0"])
        .args(["-listenonion=0", "-disablewallet=1", "-txindex=0"])
        .arg(format!("-bind={p2p}"))
        .arg(format!("-bind=127.0.0.1:{onion_port}=onion"))
        .arg(format!("-port={p2p_port}"))
        .arg(format!("-rpcport={rpc_port}"))
        .args(["-rpcbind=127.0.0.1", "-rpcallowip=127.0.0.1"])
        .arg(format!("-connect={connect}"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| StartError::Fatal(format!("spawn litecoind: {e}")))
}

enum StartError {
    /// A port was taken between choosing and binding it: retry on new ports.
    PortTaken(String),
    Fatal(String),
}

/// Three distinct free loopback ports. They are released before litecoind
/// binds them; the small race is handled by retrying in [`Litecoind::start`].
fn free_ports() -> [u16; 3] {
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    let port = |i: usize| {
        listeners[i]
            .local_addr()
            .expect("local_addr of a bound listener")
            .port()
    };
    [port(0), port(1), port(2)]
}
