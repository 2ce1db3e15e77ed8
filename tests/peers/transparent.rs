//! `source: client` with a real Litecoin Core node, in network namespaces
//! (two clients, pin-proxy, the node: see `support::netns`), the node's
//! replies routed to pin-proxy by `deploy/transparent-routing.sh`: the
//! node sees each client's own address, a ban on one client refuses that
//! client alone and takes no node out, and a live upgrade keeps the
//! transparent connections. `source: proxy` is the control: there the node
//! sees pin-proxy's address only. Skips when namespaces cannot be made (not
//! root, no `ip`) or litecoind is missing, unless
//! `PIN_PROXY_REQUIRE_PEERS=1`.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::litecoind::{self, Litecoind};
use crate::support::netns::{
    self, CLIENTS, NODE, NODE_IFACE, Netns, PROXY_TO_CLIENTS, PROXY_TO_NODE, Topology,
};
use crate::support::p2p_client::{self, Client};
use crate::support::proxy::{Proxy, binary};

/// Bound on every wait.
const T: Duration = Duration::from_secs(20);

/// The user agent client `i` announces, so the node's peer list says
/// which client each connection is.
fn agent(i: usize) -> String {
    format!("/transparent-test:client{i}/")
}

/// The node, pin-proxy in front of it, and the namespaces they run in.
/// Fields drop in order: pin-proxy and the node are gone before their
/// namespaces are deleted.
struct Setup {
    proxy: Proxy,
    node: Litecoind,
    net: Topology,
}

impl Setup {
    /// The namespaces, the node (3 blocks) with its replies routed to
    /// pin-proxy, and pin-proxy with `source: <source>` in front of it,
    /// once its first probe found the node healthy. `None` after a skip
    /// notice.
    fn start(source: &str) -> Option<Setup> {
        Setup::start_with(source, "")
    }

    /// As [`Setup::start`], with `extra` (pool keys, each line ending in
    /// a newline and the pool's indent) in pin-proxy's config.
    fn start_with(source: &str, extra: &str) -> Option<Setup> {
        if !litecoind::available() || !netns::available() {
            return None;
        }
        let net = Topology::new()?;
        let node = Litecoind::start_in(net.node.name(), IpAddr::V4(NODE))?;
        node.mine(3);
        net.route_replies(node.p2p_addr().port());
        let [c0, c1] = PROXY_TO_CLIENTS;
        let proxy = Proxy::start_in_netns_blocking(
            net.proxy.name(),
            &format!(
                "admin: {{ listen: 127.0.0.1:0 }}\n\
                 pools:\n  - name: ltc\n    listen: [\"{c0}:0\", \"{c1}:0\"]\n    \
                 source: {source}\n    {extra}rebalance: {{ interval: 0s }}\n    \
                 quarantine: {{ base: 5m, failures: 2 }}\n    \
                 health: {{ probe: bitcoin-p2p, network: litecoin-regtest, interval: 500ms, timeout: 2s }}\n    \
                 backends: [{{ name: node, addr: \"{}\" }}]\n",
                node.p2p_addr()
            ),
        );
        let probe = proxy.wait_event_blocking(|e| e["message"] == "probe", T);
        assert_eq!(probe["outcome"], "healthy", "{probe}");
        Some(Setup { proxy, node, net })
    }

    /// Where client `i` reaches pin-proxy.
    fn front(&self, i: usize) -> SocketAddr {
        let ip = IpAddr::V4(PROXY_TO_CLIENTS[i]);
        self.proxy
            .addrs_of("ltc")
            .into_iter()
            .find(|a| a.ip() == ip)
            .unwrap_or_else(|| panic!("pin-proxy listens on no {ip}"))
    }

    /// A new connection of client `i` through pin-proxy, past the P2P
    /// handshake with the node.
    fn client(&self, i: usize) -> Client {
        let front = self.front(i);
        let stream = self.net.clients[i]
            .connect(front)
            .unwrap_or_else(|e| panic!("client {i}: connect to {front}: {e}"));
        p2p_client::handshake(stream, front, &agent(i), T)
            .unwrap_or_else(|e| panic!("client {i}: handshake through {front}: {e}"))
    }

    /// The address each of our clients has in the node's peer list, by
    /// client index, once `done` holds for that map (polled, at most [`T`]).
    fn peers_when(
        &self,
        what: &str,
        done: impl Fn(&BTreeMap<usize, Vec<SocketAddr>>) -> bool,
    ) -> BTreeMap<usize, Vec<SocketAddr>> {
        let deadline = Instant::now() + T;
        loop {
            let peers = peers(&self.node);
            if done(&peers) {
                return peers;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for the node's peers to be {what}; getpeerinfo:\n{}",
                self.node.call(&["getpeerinfo"])
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Both clients connected through pin-proxy, the node lists each
    /// once, from the address `seen(i)` gives for client `i`.
    fn both_clients_seen_as(&self, seen: impl Fn(usize) -> std::net::Ipv4Addr) {
        let _clients = [self.client(0), self.client(1)];
        let peers = self.peers_when("both clients", |p| p.len() == 2);
        for (i, addrs) in &peers {
            assert_eq!(addrs.len(), 1, "client {i}: {peers:?}");
            assert_eq!(
                addrs[0].ip(),
                IpAddr::V4(seen(*i)),
                "client {i} seen as {}: {peers:?}",
                addrs[0]
            );
        }
    }

    /// The admin endpoint's `/status`, read from pin-proxy's namespace.
    fn status(&self) -> Value {
        self.net.proxy.status(self.proxy.admin())
    }
}

/// Our clients among the node's peers: client index to the peer addresses
/// (`addr` of `getpeerinfo`) announcing its agent.
fn peers(node: &Litecoind) -> BTreeMap<usize, Vec<SocketAddr>> {
    let info: Value =
        serde_json::from_str(&node.call(&["getpeerinfo"])).expect("getpeerinfo is JSON");
    let mut by_client: BTreeMap<usize, Vec<SocketAddr>> = BTreeMap::new();
    for peer in info.as_array().expect("getpeerinfo is a list") {
        let Some(i) = (0..2).find(|&i| peer["subver"] == agent(i)) else {
            continue;
        };
        let addr = peer["addr"].as_str().expect("a peer has an addr");
        let addr = addr
            .parse()
            .unwrap_or_else(|e| panic!("peer addr {addr}: {e}"));
        by_client.entry(i).or_default().push(addr);
    }
    by_client
}

/// A client connection from `ns` to `front` that sends its `version` and
/// is closed (EOF or reset) without a byte; why not otherwise.
fn turned_away(ns: &Netns, front: SocketAddr) -> Result<(), String> {
    let mut stream = ns.connect(front).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(T))
        .map_err(|e| e.to_string())?;
    let local = stream.local_addr().map_err(|e| e.to_string())?;
    // A send that fails met the close already; the read says how.
    let _ = stream.write_all(&p2p_client::version(
        front,
        local,
        "/transparent-test:banned/",
    ));
    let mut buf = [0u8; 4096];
    match stream.read(&mut buf) {
        Ok(0) => Ok(()),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(()),
        Ok(n) => Err(format!("received {n} bytes: {:02x?}", &buf[..n.min(24)])),
        Err(e) => Err(format!("read: {e}")),
    }
}

/// An event about a client connection from `ip` (`client` is `ip:port`).
fn from(e: &Value, ip: &str) -> bool {
    e["client"]
        .as_str()
        .is_some_and(|c| c.starts_with(&format!("{ip}:")))
}

/// The control, and the scaffolding's own check: with `source: proxy` both
/// clients are served through the namespaces, and the node sees them both
/// from pin-proxy's address.
#[test]
fn source_proxy_node_sees_only_the_proxy() {
    let Some(s) = Setup::start("proxy") else {
        return;
    };
    s.both_clients_seen_as(|_| PROXY_TO_NODE);
}

/// (a) With `source: client` the node's peer list shows each client's own
/// address, not pin-proxy's.
#[test]
fn source_client_node_sees_each_client() {
    let Some(s) = Setup::start("client") else {
        return;
    };
    s.both_clients_seen_as(|i| CLIENTS[i]);
}

/// (b) The node bans client 0: client 0's connections are closed at once,
/// however many (more than `quarantine.failures`); client 1 keeps its
/// connection and gets new ones; the node is never quarantined, and
/// pin-proxy logs `refused_by_node` for client 0's address.
#[test]
fn a_ban_on_one_client_leaves_the_other_and_the_node() {
    let Some(s) = Setup::start("client") else {
        return;
    };
    let banned = CLIENTS[0].to_string();
    let mut first = s.client(0);
    let mut other = s.client(1);
    s.peers_when("both clients", |p| p.len() == 2);

    s.node.call(&["setban", &banned, "add"]);
    // The ban ends the banned client's connection too: the node's close
    // reaches the client (an EOF, or a reset: either ends the read), whose
    // own direction stays open (half-close) until it closes as well.
    let mut rest = Vec::new();
    first.stream.set_read_timeout(Some(T)).unwrap();
    let _ = first.stream.read_to_end(&mut rest);
    drop(first);
    let mut closes = 1;
    s.proxy.wait_closed_blocking(closes, T, |e| {
        from(e, &banned) || e.get("suppressed").is_some()
    });

    // Five tries, each a new incident: more than `failures: 2`, so they
    // would take the node out if closes from one address counted.
    for attempt in 1..=5 {
        turned_away(&s.net.clients[0], s.front(0))
            .unwrap_or_else(|e| panic!("banned client, try {attempt}: {e}"));
        closes += 1;
        s.proxy.wait_closed_blocking(closes, T, |e| {
            from(e, &banned) || e.get("suppressed").is_some()
        });
    }

    let refused = s.proxy.wait_event_blocking(
        |e| e["message"] == "refused_by_node" && e["client"] == banned.as_str(),
        T,
    );
    assert_eq!(
        (&refused["pool"], &refused["backend"]),
        (&Value::from("ltc"), &Value::from("node")),
        "{refused}"
    );
    assert!(
        s.proxy.named("quarantined").is_empty(),
        "one banned client took the node out: {:?}",
        s.proxy.named("quarantined")
    );
    let status = s.status();
    let backend = crate::support::admin_http::backend(&status, "ltc", "node");
    assert!(
        backend["state"] == "healthy" || backend["state"] == "unknown",
        "the node is not usable: {backend}"
    );
    assert!(backend["quarantine"].is_null(), "{backend}");

    // Client 1 keeps its connection, and a new one is served.
    assert!(
        p2p_client::answers_ping(&mut other.stream, 1),
        "client 1 lost its node"
    );
    let mut again = s.client(1);
    assert!(
        p2p_client::answers_ping(&mut again.stream, 2),
        "client 1's new connection"
    );
    let peers = s.peers_when("client 1 twice, client 0 gone", |p| {
        p.get(&1).map(Vec::len) == Some(2) && !p.contains_key(&0)
    });
    for addr in &peers[&1] {
        assert_eq!(addr.ip(), IpAddr::V4(CLIENTS[1]), "{peers:?}");
    }
    assert!(
        s.proxy.named("quarantined").is_empty(),
        "{:?}",
        s.proxy.named("quarantined")
    );
}

/// (b2) The node's host drops one client's packets (an `unreachable`
/// route to that address, as a firewall's drop would): that client's
/// connects from its own address time out, every one, and are judged per
/// client as a ban is: `refused_by_node`, the node never quarantined
/// (`failures: 2`, four tries), the other client served.
#[test]
fn one_clients_unanswered_connects_take_no_node_out() {
    let Some(s) = Setup::start_with("client", "connect_timeout: 300ms\n    ") else {
        return;
    };
    let cut = CLIENTS[0].to_string();
    s.net
        .node
        .ip(&["route", "add", "unreachable", &format!("{cut}/32")]);
    for attempt in 1..=4 {
        turned_away(&s.net.clients[0], s.front(0))
            .unwrap_or_else(|e| panic!("cut-off client, try {attempt}: {e}"));
        s.proxy.wait_closed_blocking(attempt, T, |e| {
            from(e, &cut) || e.get("suppressed").is_some()
        });
    }
    let failed = s.proxy.named("connect_failed");
    assert!(
        failed
            .iter()
            .all(|e| e["reason"] == "timeout" && from(e, &cut)),
        "{failed:?}"
    );
    assert_eq!(failed.len(), 4, "{failed:?}");
    let refused = s.proxy.wait_event_blocking(
        |e| e["message"] == "refused_by_node" && e["client"] == cut.as_str(),
        T,
    );
    assert_eq!(refused["backend"], "node", "{refused}");
    assert!(
        s.proxy.named("quarantined").is_empty(),
        "one client's timeouts took the node out: {:?}",
        s.proxy.named("quarantined")
    );
    let mut other = s.client(1);
    assert!(
        p2p_client::answers_ping(&mut other.stream, 3),
        "client 1 not served"
    );
    let status = s.status();
    let backend = crate::support::admin_http::backend(&status, "ltc", "node");
    assert!(backend["quarantine"].is_null(), "{backend}");
    assert_eq!(backend["refused_by_node"], 4, "{backend}");
}

/// (c) A live upgrade keeps both transparent connections: the same peers
/// (address and port) on the node after it, and bytes flow on both.
#[test]
fn a_live_upgrade_keeps_transparent_connections() {
    let Some(s) = Setup::start("client") else {
        return;
    };
    let mut clients = [s.client(0), s.client(1)];
    let before = s.peers_when("both clients", |p| p.len() == 2);
    for (i, addrs) in &before {
        assert_eq!(addrs.len(), 1, "client {i}: {before:?}");
        assert_eq!(addrs[0].ip(), IpAddr::V4(CLIENTS[*i]), "{before:?}");
    }

    let old = s.proxy.pid();
    let out = s
        .net
        .proxy
        .command(binary())
        .args(["upgrade", "--admin", &s.proxy.admin().to_string()])
        .env_remove("PIN_PROXY_CONFIG")
        .output()
        .expect("run pin-proxy upgrade");
    assert!(
        out.status.success(),
        "upgrade failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let upgraded = s
        .proxy
        .wait_event_blocking(|e| e["message"] == "upgraded", T);
    assert_eq!(upgraded["connections"], 2, "{upgraded}");
    assert_ne!(s.proxy.live_pid(), old);

    for (i, client) in clients.iter_mut().enumerate() {
        assert!(
            p2p_client::answers_ping(&mut client.stream, 10 + i as u64),
            "client {i} lost its node in the upgrade"
        );
    }
    let after = peers(&s.node);
    assert_eq!(after, before, "the node's peers changed in the upgrade");
    let status = s.status();
    assert_eq!(status["generation"], 1, "{status}");
}

/// The routing script is idempotent: `add` twice leaves what `add` once
/// did, `remove` twice leaves what was there before, in both families.
#[test]
fn routing_script_add_and_remove_are_idempotent() {
    if !netns::available() {
        return;
    }
    let ns = match Netns::add("script") {
        Ok(ns) => ns,
        Err(why) => {
            assert!(
                std::env::var("PIN_PROXY_REQUIRE_PEERS").as_deref() != Ok("1"),
                "{why}"
            );
            eprintln!("skipping: {why}");
            return;
        }
    };
    let routing = || {
        let show = |args: &[&str]| {
            let out = Command::new("ip")
                .args(["-n", ns.name()])
                .args(args)
                .output()
                .expect("run ip");
            assert!(out.status.success(), "ip {args:?}: {out:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        [
            show(&["-4", "rule", "show"]),
            show(&["-6", "rule", "show"]),
            show(&["-4", "route", "show", "table", "all"]),
            show(&["-6", "route", "show", "table", "all"]),
        ]
    };
    ns.ip(&[
        "link", "add", NODE_IFACE, "type", "veth", "peer", "name", "peer0",
    ]);
    let args = ["--iif", NODE_IFACE, "--sport", "9333", "--same-host"];
    let pristine = routing();
    ns.routing_script(&[&["add"][..], &args].concat());
    let added = routing();
    assert_ne!(added, pristine, "add changed nothing");
    for expected in [
        format!("iif {NODE_IFACE} ipproto tcp sport 9333 lookup 100"),
        "from 127.0.0.0/8 iif lo ipproto tcp sport 9333 lookup 100".into(),
    ] {
        assert!(
            added[0].contains(&expected),
            "no `{expected}` in:\n{}",
            added[0]
        );
    }
    assert!(added[1].contains("from ::1 iif lo"), "{}", added[1]);
    assert!(
        added[2].contains("local default dev lo table 100"),
        "{}",
        added[2]
    );
    assert!(
        added[3].contains("local default dev lo table 100"),
        "{}",
        added[3]
    );
    ns.routing_script(&[&["add"][..], &args].concat());
    assert_eq!(routing(), added, "a second add changed something");
    ns.routing_script(&[&["remove"][..], &args].concat());
    assert_eq!(routing(), pristine, "remove left something");
    ns.routing_script(&[&["remove"][..], &args].concat());
    assert_eq!(routing(), pristine, "a second remove changed something");
}
