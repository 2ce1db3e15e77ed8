//! A real HAProxy (Debian `haproxy`) on loopback in front of the proxy, for
//! the PROXY protocol tests: one TCP frontend per [`Front`], each sending a
//! PROXY header (`send-proxy` for v1, `send-proxy-v2` for v2) to its
//! server.
//!
//! Each [`HaProxy`] owns an `haproxy -db` child (foreground, no daemon)
//! and a temp directory with its config; both go away on drop, also when
//! the test panics. Started as root it keeps running as root: the config
//! names no `user`.

use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::litecoind::{find_program, peers_available};

/// How long HAProxy may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Fresh ports tried before giving up on a bind race.
const START_ATTEMPTS: u32 = 5;

/// Which PROXY header a frontend's server gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// `send-proxy`: the text header.
    V1,
    /// `send-proxy-v2`: the binary header.
    V2,
}

impl Header {
    fn keyword(self) -> &'static str {
        match self {
            Header::V1 => "send-proxy",
            Header::V2 => "send-proxy-v2",
        }
    }
}

/// A running HAProxy.
pub struct HaProxy {
    child: Child,
    fronts: Vec<SocketAddr>,
    // Dropped after `child` is killed in `Drop::drop`.
    _dir: tempfile::TempDir,
}

impl HaProxy {
    /// One frontend per `(server, header)`: clients of frontend `i`
    /// ([`HaProxy::front`]) reach `server` behind a PROXY header.
    ///
    /// `None` (after a skip notice, or a panic under
    /// `PIN_PROXY_REQUIRE_PEERS=1`) when `haproxy` is not installed.
    pub fn start(servers: &[(SocketAddr, Header)]) -> Option<HaProxy> {
        if !peers_available(&["haproxy"]) {
            return None;
        }
        let bin = find_program("haproxy")?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match HaProxy::try_start(&bin, servers) {
                Ok(h) => return Some(h),
                Err(err) => last = err,
            }
        }
        panic!("haproxy did not start: {last}");
    }

    fn try_start(bin: &PathBuf, servers: &[(SocketAddr, Header)]) -> Result<HaProxy, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let fronts: Vec<SocketAddr> = servers.iter().map(|_| free_port()).collect();
        let mut cfg = String::from(
            "global\n  maxconn 512\n\
             defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 60s\n  \
             timeout server 60s\n",
        );
        for (i, ((server, header), front)) in servers.iter().zip(&fronts).enumerate() {
            cfg.push_str(&format!(
                "frontend f{i}\n  bind {front}\n  default_backend b{i}\n\
                 backend b{i}\n  server s{i} {server} {}\n",
                header.keyword()
            ));
        }
        let path = dir.path().join("haproxy.cfg");
        fs::write(&path, cfg).map_err(|e| e.to_string())?;
        let mut child = Command::new(bin)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn haproxy: {e}"))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // Listening, told without a connect (which HAProxy would pass
            // on to the server behind a header): the port can no longer be
            // bound.
            if fronts.iter().all(|f| TcpListener::bind(f).is_err()) {
                return Ok(HaProxy {
                    child,
                    fronts,
                    _dir: dir,
                });
            }
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(format!("haproxy exited ({status}): {err}"));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err("haproxy did not listen in time".to_owned());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The address of frontend `i`.
    pub fn front(&self, i: usize) -> SocketAddr {
        self.fronts[i]
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on now (bound and let go).
fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("its address")
}
