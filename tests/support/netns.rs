//! Network namespaces for tests that need hosts of their own: two clients,
//! pin-proxy and a node, each in its own namespace, joined by veth pairs,
//! with addresses only in 198.18.0.0/15 (RFC 2544, benchmarking) and no
//! link to anything else. Every namespace is deleted on drop, also when
//! the test panics.
//!
//! A socket belongs to the namespace of the thread that created it, for
//! life: [`Netns::connect`] creates it in a thread that entered the
//! namespace (setns(2)), and the stream then works from any thread.
//! Programs run inside with `ip netns exec`, which execs them (the child's
//! pid is the program's).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;

use super::litecoind::find_program;

/// Where `ip netns add` mounts a namespace.
const RUN_DIR: &str = "/var/run/netns";

/// Env variable that turns a missing prerequisite into a test failure.
const REQUIRE_ENV: &str = "PIN_PROXY_REQUIRE_PEERS";

/// The node, on its link to pin-proxy's namespace.
pub const NODE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// pin-proxy's address on the node's link (its probes come from it).
pub const PROXY_TO_NODE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The two clients, each on its own link to pin-proxy's namespace.
pub const CLIENTS: [Ipv4Addr; 2] = [Ipv4Addr::new(198, 18, 1, 2), Ipv4Addr::new(198, 18, 2, 2)];
/// pin-proxy's address on each client's link (where that client connects).
pub const PROXY_TO_CLIENTS: [Ipv4Addr; 2] =
    [Ipv4Addr::new(198, 18, 1, 1), Ipv4Addr::new(198, 18, 2, 1)];
/// pin-proxy's interface towards the node (the routing script's `--iif`).
pub const NODE_IFACE: &str = "to-node";

/// The routing script under test.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/transparent-routing.sh");

/// `why` the namespaces cannot be had: `None` after a skip notice, or a
/// panic under `PIN_PROXY_REQUIRE_PEERS=1`.
fn unavailable<T>(why: &str) -> Option<T> {
    if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
        panic!("{REQUIRE_ENV}=1 but {why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// Whether network namespaces can be made here (root and `ip`); as
/// [`unavailable`] when not.
pub fn available() -> bool {
    if !rustix::process::geteuid().is_root() {
        return unavailable::<()>("network namespaces need root").is_some();
    }
    if find_program("ip").is_none() {
        return unavailable::<()>("ip (iproute2) not installed").is_some();
    }
    true
}

/// Run `cmd`, panicking with its stderr unless it succeeds; its output.
fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// One network namespace; deleted on drop.
pub struct Netns {
    name: String,
}

impl Netns {
    /// `ip netns add` a namespace unique to this process and call, named
    /// after `role`, with its loopback up.
    ///
    /// # Errors
    /// `ip netns add`'s complaint.
    pub fn add(role: &str) -> Result<Netns, String> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("pinproxy-{}-{seq}-{role}", std::process::id());
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .map_err(|e| format!("run ip netns add: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "ip netns add failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        Ok(ns)
    }

    /// Its name, for `ip netns exec`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n <name> args`; panics when it fails.
    pub fn ip(&self, args: &[&str]) {
        run(Command::new("ip").args(["-n", &self.name]).args(args));
    }

    /// `program` to run inside (`ip netns exec <name> program`).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// `f`, called in a thread that entered this namespace; what it gives.
    /// Sockets it creates stay in the namespace.
    pub fn within<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = Path::new(RUN_DIR).join(&self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                let fd = std::fs::File::open(&path)
                    .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
                rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&fd),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .unwrap_or_else(|e| panic!("setns {}: {e}", path.display()));
                f()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// A TCP connection to `to`, made from inside this namespace.
    ///
    /// # Errors
    /// The connect's.
    pub fn connect(&self, to: SocketAddr) -> std::io::Result<TcpStream> {
        self.within(|| TcpStream::connect_timeout(&to, Duration::from_secs(10)))
    }

    /// Write `value` to `/proc/sys/<key>` of this namespace (`net/...`
    /// settings are per namespace, resolved for the writing thread).
    pub fn sysctl(&self, key: &str, value: &str) {
        let path = Path::new("/proc/sys").join(key);
        self.within(|| std::fs::write(&path, value))
            .unwrap_or_else(|e| panic!("write {} in {}: {e}", path.display(), self.name));
    }

    /// `GET path` from the HTTP server at `addr` (the admin endpoint),
    /// from inside: the status code and the body.
    pub fn http_get(&self, addr: SocketAddr, path: &str) -> (u16, String) {
        let mut stream = self
            .connect(addr)
            .unwrap_or_else(|e| panic!("connect to {addr} in {}: {e}", self.name));
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("set a read timeout");
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .expect("send the request");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read the answer");
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no end of head in {answer:?}"));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line in {head:?}"));
        (status, body.to_owned())
    }

    /// `/status` of the admin endpoint at `admin`, from inside.
    pub fn status(&self, admin: SocketAddr) -> Value {
        let (code, body) = self.http_get(admin, "/status");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/status is not JSON ({e}): {body}"))
    }

    /// Run `deploy/transparent-routing.sh args` inside; panics when it fails.
    pub fn routing_script(&self, args: &[&str]) -> String {
        let out = run(self.command("sh").arg(SCRIPT).args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Its veths go with it, once the last process and socket in it are
        // gone; a failure here only leaves a name behind, said on stderr.
        match Command::new("ip")
            .args(["netns", "del", &self.name])
            .output()
        {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "ip netns del {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => eprintln!("ip netns del {}: {e}", self.name),
        }
    }
}

/// Two clients, pin-proxy and a node, one namespace each:
///
/// ```text
///  client 0  198.18.1.2 ─ 198.18.1.1 ┐
///                                    pin-proxy  198.18.0.1 ─ 198.18.0.2  node
///  client 1  198.18.2.2 ─ 198.18.2.1 ┘          (to-node)
/// ```
///
/// The node's default route goes via pin-proxy's namespace; pin-proxy's
/// namespace forwards nothing (no `ip_forward`), so a client reaches the
/// node only through pin-proxy, and has strict `rp_filter`, as many hosts
/// do. Without [`Topology::route_replies`] the node's answers to a client
/// address go nowhere.
pub struct Topology {
    /// The clients' namespaces, `CLIENTS[i]` in `clients[i]`.
    pub clients: [Netns; 2],
    /// pin-proxy's namespace.
    pub proxy: Netns,
    /// The node's namespace.
    pub node: Netns,
}

impl Topology {
    /// Build it; `None` after a skip notice when namespaces cannot be made
    /// here (a panic instead under `PIN_PROXY_REQUIRE_PEERS=1`).
    pub fn new() -> Option<Topology> {
        if !available() {
            return None;
        }
        let proxy = match Netns::add("proxy") {
            Ok(ns) => ns,
            Err(why) => return unavailable(&why),
        };
        let add = |role: &str| Netns::add(role).unwrap_or_else(|e| panic!("{e}"));
        let topology = Topology {
            clients: [add("client0"), add("client1")],
            proxy,
            node: add("node"),
        };
        for ns in topology.all() {
            // No IPv6 link-local addresses: only 198.18.0.0/15 here.
            ns.sysctl("net/ipv6/conf/all/disable_ipv6", "1");
            ns.sysctl("net/ipv6/conf/default/disable_ipv6", "1");
        }
        topology.proxy.sysctl("net/ipv4/conf/all/rp_filter", "1");
        topology
            .proxy
            .sysctl("net/ipv4/conf/default/rp_filter", "1");
        topology.link(NODE_IFACE, PROXY_TO_NODE, &topology.node, NODE);
        for (i, ns) in topology.clients.iter().enumerate() {
            topology.link(
                &format!("to-client{i}"),
                PROXY_TO_CLIENTS[i],
                ns,
                CLIENTS[i],
            );
        }
        let via = PROXY_TO_NODE.to_string();
        topology.node.ip(&["route", "add", "default", "via", &via]);
        Some(topology)
    }

    /// Every namespace.
    fn all(&self) -> [&Netns; 4] {
        [&self.clients[0], &self.clients[1], &self.proxy, &self.node]
    }

    /// A veth pair from pin-proxy's namespace (`iface`, address `ours`) to
    /// `peer`'s (`eth0`, address `theirs`), both /24 and up.
    fn link(&self, iface: &str, ours: Ipv4Addr, peer: &Netns, theirs: Ipv4Addr) {
        self.proxy.ip(&[
            "link",
            "add",
            iface,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            peer.name(),
        ]);
        self.proxy
            .ip(&["addr", "add", &format!("{ours}/24"), "dev", iface]);
        self.proxy.ip(&["link", "set", iface, "up"]);
        peer.ip(&["addr", "add", &format!("{theirs}/24"), "dev", "eth0"]);
        peer.ip(&["link", "set", "eth0", "up"]);
    }

    /// Install the policy routing of `source: client` in pin-proxy's
    /// namespace with `deploy/transparent-routing.sh`: TCP from the node's
    /// `port` arriving on [`NODE_IFACE`] is delivered locally.
    pub fn route_replies(&self, port: u16) {
        let port = port.to_string();
        self.proxy
            .routing_script(&["add", "--iif", NODE_IFACE, "--sport", &port, "-4"]);
    }
}
