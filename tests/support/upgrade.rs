//! Live upgrade tests' harness: a copy of the binary a test can replace,
//! the config they start from, `pin-proxy upgrade` and its outcome, and
//! what the kernel says about the processes (exited, open descriptors).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::admin_http;
use super::proxy::{Proxy, binary};
use super::{wait_until, within};

/// Bound on one upgrade and on the waits around it.
pub const T: Duration = Duration::from_secs(30);

/// A copy of the binary in a directory of the test's own, so the test can
/// put another "build" at the path the instance was started from.
pub struct Bin {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Bin {
    /// A fresh copy of the real binary.
    pub fn new() -> Bin {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pin-proxy");
        std::fs::copy(binary(), &path).expect("copy the binary");
        Bin { _dir: dir, path }
    }

    /// Where the copy is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Install `script` (a shell script) at the path, as a package upgrade
    /// installs a file: written beside it, then renamed over it.
    pub fn install_script(&self, script: &str) {
        use std::os::unix::fs::PermissionsExt;
        let new = self.path.with_extension("new");
        std::fs::write(&new, script).expect("write script");
        std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&new, &self.path).expect("install script");
    }

    /// Install the real binary again.
    pub fn install_binary(&self) {
        let new = self.path.with_extension("new");
        std::fs::copy(binary(), &new).expect("copy the binary");
        std::fs::rename(&new, &self.path).expect("install binary");
    }
}

/// A config with one pool `p` on a free port in front of `backends`, the
/// admin endpoint on a free port, and `extra` top-level keys.
pub fn config(backends: &[SocketAddr], extra: &str) -> String {
    let list: Vec<String> = backends
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{{ name: n{i}, addr: \"{a}\" }}"))
        .collect();
    format!(
        "admin: {{ listen: 127.0.0.1:0 }}\n{extra}\
         pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         rebalance: {{ interval: 0s }}\n    \
         health: {{ probe: connect, interval: 1s }}\n    \
         backends: [{}]\n",
        list.join(", ")
    )
}

/// `pin-proxy upgrade` against `proxy`: (exit code, stdout, stderr).
/// Once it succeeded, `upgraded` is in `proxy`'s events too (so the
/// harness knows which process to stop at the end).
pub async fn upgrade(proxy: &Proxy) -> (Option<i32>, String, String) {
    let before = proxy.named("upgraded").len();
    let out = tokio::process::Command::new(binary())
        .args(["upgrade", "--admin", &proxy.admin().to_string()])
        .env_remove("PIN_PROXY_CONFIG")
        .output();
    let out = within("pin-proxy upgrade", T, out)
        .await
        .expect("run pin-proxy upgrade");
    if out.status.success() {
        proxy
            .wait_count(|e| e["message"] == "upgraded", before + 1, T)
            .await;
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// Upgrade and insist it worked; returns the `upgraded` event.
pub async fn upgrade_ok(proxy: &Proxy) -> Value {
    let before = proxy.named("upgraded").len();
    let (code, out, err) = upgrade(proxy).await;
    assert_eq!(code, Some(0), "upgrade failed: {out} {err}");
    let events = proxy
        .wait_count(|e| e["message"] == "upgraded", before + 1, T)
        .await;
    events[before].clone()
}

/// `/status` of the process that serves now.
pub async fn status(proxy: &Proxy) -> Value {
    admin_http::status(proxy.admin()).await
}

/// True once `pid` has exited (gone, or a zombie nobody here reaps).
pub fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) S ..." : the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// Wait until process `pid` has exited.
pub async fn wait_exited(pid: u32) {
    wait_until(&format!("process {pid} to exit"), T, || exited(pid)).await;
}

/// Open descriptors of process `pid`, leaving out the pipes a bulk
/// direction borrows for `splice(2)` (they come and go with the traffic;
/// [`lent_pipes`] counts them).
pub fn fds(pid: u32) -> usize {
    descriptors(pid).filter(|(_, pipe)| !pipe).count()
}

/// Pipes process `pid` holds beyond its standard streams: the ones lent
/// to bulk transfers (none once they are over), and any it inherited.
pub fn lent_pipes(pid: u32) -> usize {
    descriptors(pid)
        .filter(|(fd, pipe)| *pipe && *fd > 2)
        .count()
}

/// Each descriptor of `pid`: its number, and whether it is a pipe.
fn descriptors(pid: u32) -> impl Iterator<Item = (u32, bool)> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten();
    dir.flatten().map(|entry| {
        let fd = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse().ok())
            .unwrap_or(u32::MAX);
        let pipe = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("pipe:"));
        (fd, pipe)
    })
}

/// One echo round on `s`: `what` comes back, whole.
pub async fn echoes(s: &mut TcpStream, what: &[u8]) {
    s.write_all(what).await.unwrap();
    let mut got = vec![0u8; what.len()];
    within("echo", T, s.read_exact(&mut got)).await.unwrap();
    assert_eq!(got, what);
}
