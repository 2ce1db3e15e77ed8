//! Real ElectrumX servers on loopback, each indexing a Litecoin Core regtest
//! node ([`Litecoind`]), and a line-by-line Electrum client to talk to them.
//!
//! Each [`ElectrumX`] owns an `electrumx_server` child process and a
//! temporary directory (its database, log and TLS certificate); both go
//! away on drop, also when the test panics. `electrumx_server` is looked
//! for in `/opt/electrumx/bin` (the venv `.ci/install-peers.sh` makes),
//! then on `PATH`.
//!
//! Things learned from ElectrumX 2.0.0 that shape this file:
//! - It listens only once it has caught up with the node, and stops
//!   listening at `MAX_SESSIONS`: until then a connect is refused.
//!   Readiness is "answers `blockchain.headers.subscribe` at the node's
//!   height", polled, never a fixed sleep.
//! - It polls the node for blocks every `DAEMON_POLL_INTERVAL_BLOCKS` ms
//!   (5000 by default; 100 here, so a mined block shows within a test).
//! - Its TCP and TLS answers are padded with spaces before the closing
//!   brace to at least 1 KiB, and after a session's first 1 KiB of answers,
//!   a short one may wait up to a second for company.
//! - Sessions from private addresses (loopback included) are exempt from
//!   its per-subnet cost groups.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::litecoind::{Litecoind, not_installed};

/// How long ElectrumX may take to index a fresh regtest chain and listen.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Attempts with fresh ports before giving up on a bind race.
const START_ATTEMPTS: u32 = 5;

/// Where `.ci/install-peers.sh` puts it.
const VENV_BIN: &str = "/opt/electrumx/bin";

const SERVER: &str = "electrumx_server";

/// An ElectrumX process indexing one node; killed (and its directory
/// removed) on drop.
pub struct ElectrumX {
    child: Option<Child>,
    tcp: SocketAddr,
    ssl: SocketAddr,
    /// Its TLS certificate (DER), self-signed for `localhost`.
    cert: Vec<u8>,
    started_in: Duration,
    // Dropped after the child is killed in `Drop::drop`.
    dir: tempfile::TempDir,
}

/// The `electrumx_server` script, if installed; else the skip notice (or
/// the panic under `PIN_PROXY_REQUIRE_PEERS=1`) and `None`.
pub fn server_path() -> Option<PathBuf> {
    let venv = Path::new(VENV_BIN).join(SERVER);
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(SERVER))
            .find(|p| p.is_file())
    });
    match (venv.is_file(), on_path) {
        (true, _) => Some(venv),
        (false, Some(found)) => Some(found),
        (false, None) => {
            not_installed(SERVER, &format!("in {VENV_BIN} or on PATH"));
            None
        }
    }
}

impl ElectrumX {
    /// Start ElectrumX on `node`, serving TCP and TLS (a fresh self-signed
    /// certificate) on loopback, and wait until it serves the node's tip.
    ///
    /// Returns `None` (after the notice of [`server_path`]) when it is not
    /// installed. Panics if it cannot be started.
    pub fn start(node: &Litecoind) -> Option<ElectrumX> {
        let server = server_path()?;
        let mut last_err = String::new();
        for _ in 0..START_ATTEMPTS {
            match ElectrumX::try_start(&server, node) {
                Ok(ex) => return Some(ex),
                Err(StartError::PortTaken(msg)) => last_err = msg,
                Err(StartError::Fatal(msg)) => panic!("start electrumx: {msg}"),
            }
        }
        panic!("start electrumx: ports kept being taken ({START_ATTEMPTS} tries): {last_err}");
    }

    fn try_start(server: &Path, node: &Litecoind) -> Result<ElectrumX, StartError> {
        let fatal =
            |what: &str, e: &dyn std::fmt::Display| StartError::Fatal(format!("{what}: {e}"));
        let dir = tempfile::Builder::new()
            .prefix("pin-proxy-electrumx-")
            .tempdir()
            .map_err(|e| fatal("create dir", &e))?;
        let db = dir.path().join("db");
        fs::create_dir(&db).map_err(|e| fatal("create db dir", &e))?;
        let (der, cert, key) =
            write_certificate(dir.path()).map_err(|e| fatal("write cert", &e))?;
        let [tcp_port, ssl_port] = free_ports();
        let tcp = SocketAddr::from(([127, 0, 0, 1], tcp_port));
        let ssl = SocketAddr::from(([127, 0, 0, 1], ssl_port));
        let log = File::create(dir.path().join("electrumx.log")).map_err(|e| fatal("log", &e))?;
        let log2 = log.try_clone().map_err(|e| fatal("log", &e))?;
        let started = Instant::now();
        let child = Command::new(server)
            // Only what is set here: a stray COIN or SERVICES in the
            // test's environment must not change the server.
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("DB_ENGINE", "leveldb")
            .env("COIN", "Litecoin")
            .env("NET", "regtest")
            .env("DB_DIRECTORY", &db)
            .env(
                "DAEMON_URL",
                format!("http://{}@127.0.0.1:{}/", node.rpc_auth(), node.rpc_port()),
            )
            .env("SERVICES", format!("tcp://{tcp},ssl://{ssl}"))
            .env("SSL_CERTFILE", &cert)
            .env("SSL_KEYFILE", &key)
            .env("PEER_DISCOVERY", "off")
            .env("DAEMON_POLL_INTERVAL_BLOCKS", "100")
            .env("CACHE_MB", "64")
            .env("LOG_SESSIONS", "0")
            // Tests run as root in containers; ElectrumX refuses that unless told.
            .env("ALLOW_ROOT", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| fatal("spawn electrumx_server", &e))?;
        // From here on, Drop kills the child whatever happens.
        let mut ex = ElectrumX {
            child: Some(child),
            tcp,
            ssl,
            cert: der,
            started_in: Duration::ZERO,
            dir,
        };
        ex.wait_ready(node.height())?;
        ex.started_in = started.elapsed();
        Ok(ex)
    }

    /// Polls until it answers at `height`, or it exits, or time runs out.
    fn wait_ready(&mut self, height: u64) -> Result<(), StartError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                let log = self.log();
                return Err(if log.contains("Address already in use") {
                    StartError::PortTaken(log)
                } else {
                    StartError::Fatal(format!("electrumx exited with {status}:\n{log}"))
                });
            }
            if self.tip_height().is_some_and(|h| h >= height) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(StartError::Fatal(format!(
                    "not serving height {height} after {START_TIMEOUT:?}:\n{}",
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its TCP service.
    pub fn tcp_addr(&self) -> SocketAddr {
        self.tcp
    }

    /// Its TLS service (self-signed certificate for `localhost`).
    pub fn ssl_addr(&self) -> SocketAddr {
        self.ssl
    }

    /// Its TLS certificate (DER), self-signed for `localhost`.
    pub fn certificate(&self) -> &[u8] {
        &self.cert
    }

    /// From spawning to serving the node's tip.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The height it serves now, or `None` if it does not answer.
    pub fn tip_height(&self) -> Option<u64> {
        let mut client = Wallet::connect(self.tcp).ok()?;
        client
            .call("server.version", json!(["pin-proxy-test", "1.4"]))
            .ok()?;
        let tip = client
            .call("blockchain.headers.subscribe", json!([]))
            .ok()?;
        let tip: Value = serde_json::from_str(&tip).ok()?;
        tip["result"]["height"].as_u64()
    }

    /// Polls until it serves `height`; false if `timeout` passed.
    pub fn wait_height(&self, height: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.tip_height().is_none_or(|h| h < height) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    }

    /// Kill the process now: its ports refuse connects from here on.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Errors mean it already exited, which is what we want.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("electrumx.log")).unwrap_or_default()
    }
}

impl Drop for ElectrumX {
    fn drop(&mut self) {
        self.stop();
    }
}

enum StartError {
    /// A port was taken between choosing and binding it: retry on new ports.
    PortTaken(String),
    Fatal(String),
}

/// A self-signed certificate for `localhost` and its key, as PEM files;
/// the certificate's DER and the two paths.
fn write_certificate(dir: &Path) -> std::io::Result<(Vec<u8>, PathBuf, PathBuf)> {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
            .map_err(std::io::Error::other)?;
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    fs::write(&cert_path, pem("CERTIFICATE", cert.der()))?;
    fs::write(&key_path, pem("PRIVATE KEY", &signing_key.serialize_der()))?;
    Ok((cert.der().to_vec(), cert_path, key_path))
}

/// `der` as a PEM block labelled `label` (what Python's `ssl` reads).
fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in text.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Two distinct free loopback ports, released before ElectrumX binds them;
/// the small race is handled by retrying in [`ElectrumX::start`].
fn free_ports() -> [u16; 2] {
    let a = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let b = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = |l: &TcpListener| l.local_addr().expect("local_addr").port();
    [port(&a), port(&b)]
}

/// A wallet's side of an Electrum TCP session, one request at a time:
/// answers come back as the raw lines the server sent.
pub struct Wallet {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    next_id: u64,
}

/// Bound on one answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

impl Wallet {
    /// Connect to `addr`.
    ///
    /// # Errors
    /// The connect failed.
    pub fn connect(addr: SocketAddr) -> std::io::Result<Wallet> {
        let writer = TcpStream::connect(addr)?;
        writer.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        Ok(Wallet {
            reader: BufReader::new(writer.try_clone()?),
            writer,
            next_id: 0,
        })
    }

    /// Send a request and return the next line, newline included.
    ///
    /// # Errors
    /// The write or the read failed, or the server closed first.
    pub fn call(&mut self, method: &str, params: Value) -> std::io::Result<String> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.writer, "{request}")?;
        self.line()
    }

    /// The next line the server sends (a notification, say).
    ///
    /// # Errors
    /// The read failed or timed out, or the server closed.
    pub fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line)
    }
}
