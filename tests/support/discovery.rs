//! The discovery tests' harness: configs whose pool asks a [`Dnsmasq`]
//! for its members, member names, the `discovered` events, waits on
//! `/status` for members and connections, and the proxy's own count of
//! its lookups. Each test serves its members from its own block of
//! loopback addresses (`127.<block>.0.<host>`, see [`ip`]), so tests
//! running side by side never share an address.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::admin_http::{Kind, Metrics, metrics, request};
use super::admin_wait::wait_status;
use super::dnsmasq::Dnsmasq;
use super::proxy::Proxy;
use super::within;

/// Bound on every wait.
pub const T: Duration = Duration::from_secs(20);

/// `discovery.interval` in every test.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// The usual `discovery.hold`.
pub const HOLD: Duration = Duration::from_secs(1);

/// `127.<block>.0.<host>`.
pub fn ip(block: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, block, 0, host))
}

/// Every address of `ips` named `name`, as [`Dnsmasq`] takes hosts.
pub fn named(name: &str, ips: &[IpAddr]) -> Vec<(IpAddr, String)> {
    ips.iter().map(|ip| (*ip, name.to_owned())).collect()
}

/// A discover entry `name` for `target` (`host:port` or a SRV name), with
/// `extra` keys (`backup: true, probe_url: ...`) if not empty.
pub fn discover(name: &str, target: &str, extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(", {extra}")
    };
    format!("{{ name: {name}, discover: \"{target}\"{extra} }}")
}

/// The name of the member at `addr` of discover entry `entry`
/// (`ltc/127.0.0.2:9333`, `ltc/[::1]:9333`).
pub fn member(entry: &str, addr: SocketAddr) -> String {
    format!("{entry}/{addr}")
}

/// The member names of entry `entry` for addresses `ips` on `port`.
pub fn members_of(entry: &str, ips: &[IpAddr], port: u16) -> BTreeSet<String> {
    ips.iter()
        .map(|ip| member(entry, SocketAddr::new(*ip, port)))
        .collect()
}

/// One pool `p` (no rebalance, drains at once) whose discovery asks `dns`
/// every [`INTERVAL`] and holds missing members for `hold`, probing with
/// `health` (a flow map's inside), in front of `backends` (list items).
pub fn config_with(dns: &Dnsmasq, hold: Duration, health: &str, backends: &[String]) -> String {
    let list: String = backends.iter().map(|b| format!("      - {b}\n")).collect();
    format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         rebalance: {{ interval: 0s }}\n    \
         discovery: {{ interval: {}ms, hold: {}ms, resolver: \"{}\" }}\n    \
         health: {{ {health}, drain_spread: 0s }}\n    backends:\n{list}",
        INTERVAL.as_millis(),
        hold.as_millis(),
        dns.addr(),
    )
}

/// [`config_with`] probing by TCP connect every 100 ms.
pub fn config(dns: &Dnsmasq, hold: Duration, backends: &[String]) -> String {
    config_with(
        dns,
        hold,
        "probe: connect, interval: 100ms, timeout: 300ms",
        backends,
    )
}

/// Matches a `discovered` event of pool `p`.
pub fn discovered(e: &Value) -> bool {
    e["message"] == "discovered" && e["pool"] == "p"
}

/// The `discovered` events so far.
pub fn discoveries(proxy: &Proxy) -> Vec<Value> {
    proxy.events().into_iter().filter(discovered).collect()
}

/// Wait for the `n`th `discovered` event (1-based) and return it.
pub async fn nth_discovery(proxy: &Proxy, n: usize) -> Value {
    proxy.wait_count(discovered, n, T).await[n - 1].clone()
}

/// `(added, removed, members)` of a `discovered` event.
pub fn counts(e: &Value) -> (u64, u64, u64) {
    let n = |k: &str| {
        e[k].as_u64()
            .unwrap_or_else(|| panic!("{k} is not a count in {e}"))
    };
    (n("added"), n("removed"), n("members"))
}

/// Matches a `closed` event of backend `backend`.
pub fn closed_on(backend: &str) -> impl Fn(&Value) -> bool + '_ {
    move |e| e["message"] == "closed" && e["backend"] == backend
}

/// The backends of pool `p` in a `/status` document.
pub fn backends(status: &Value) -> Vec<Value> {
    status["pools"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "p"))
        .and_then(|p| p["backends"].as_array())
        .unwrap_or_else(|| panic!("no pool p in {status}"))
        .clone()
}

/// The backend `name` of pool `p`; panics when absent.
pub fn backend(status: &Value, name: &str) -> Value {
    backends(status)
        .into_iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("no backend {name} in {status}"))
}

/// Names of the discovered backends (`discovered_from` set) of pool `p`.
pub fn member_names(status: &Value) -> BTreeSet<String> {
    backends(status)
        .iter()
        .filter(|b| !b["discovered_from"].is_null())
        .filter_map(|b| b["name"].as_str().map(str::to_owned))
        .collect()
}

/// `/status` once the discovered members of pool `p` are exactly `want`.
pub async fn members_until(proxy: &Proxy, want: &BTreeSet<String>) -> Value {
    let what = format!("members {want:?}");
    wait_status(proxy.admin(), &what, T, |s| {
        (&member_names(s) == want).then(|| s.clone())
    })
    .await
}

/// Quarantine backend `name` of pool `p` by hand for 10 minutes.
pub async fn quarantine(proxy: &Proxy, name: &str) {
    let path = format!(
        "/pools/p/backends/{}/quarantine?for=10m",
        utf8_percent_encode(name, NON_ALPHANUMERIC)
    );
    let answer = request(proxy.admin(), "POST", &path).await;
    assert_eq!(answer.status, 200, "quarantine {name}: {}", answer.body);
}

/// Send a few bytes on `c` and insist they come back: its splice is up.
pub async fn still_echoes(c: &mut TcpStream) {
    c.write_all(b"still here").await.unwrap();
    let mut b = [0u8; 10];
    within("echo", T, c.read_exact(&mut b))
        .await
        .expect("the connection was closed");
    assert_eq!(&b, b"still here");
}

/// Wait until the proxy closed `c` (EOF or reset).
pub async fn closed_by_proxy(c: &mut TcpStream) {
    let mut b = [0u8; 64];
    within("the proxy to close the client", T, async {
        while matches!(c.read(&mut b).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// The index in `clients` of the one the proxy connected to `backend`
/// (by the `client` address of its `connected` event).
pub fn client_on(proxy: &Proxy, clients: &[TcpStream], backend: &str) -> usize {
    let on: Vec<String> = proxy
        .named("connected")
        .iter()
        .filter(|e| e["backend"] == backend)
        .filter_map(|e| e["client"].as_str().map(str::to_owned))
        .collect();
    clients
        .iter()
        .position(|c| {
            let local = c.local_addr().expect("client address").to_string();
            on.contains(&local)
        })
        .unwrap_or_else(|| panic!("no client on {backend}"))
}

/// `/status` once each `(backend, n)` has `n` client connections (probe
/// connections never count there, unlike a node's own count).
pub async fn connections_until(proxy: &Proxy, want: &[(&str, u64)]) -> Value {
    let what = format!("connections {want:?}");
    wait_status(proxy.admin(), &what, T, |s| {
        let has = |(name, n): &(&str, u64)| {
            backends(s)
                .iter()
                .find(|b| b["name"] == *name)
                .is_some_and(|b| b["connections"] == *n)
        };
        want.iter().all(has).then(|| s.clone())
    })
    .await
}

/// Lookups of the entry `ltc` of pool `p` with `outcome` (`ok`, `failed`)
/// so far, as the proxy's `/metrics` counts them.
pub async fn lookups(proxy: &Proxy, outcome: &str) -> u64 {
    lookups_in(&metrics(proxy.admin()).await, outcome)
}

/// Lookups of the entry `ltc` of pool `p` with `outcome` in `metrics`.
pub fn lookups_in(metrics: &Metrics, outcome: &str) -> u64 {
    let labels = [("pool", "p"), ("name", "ltc"), ("outcome", outcome)];
    let n = metrics.get("pin_proxy_discovery_lookups_total", Kind::Counter, &labels);
    n.map_or(0, |v| v as u64)
}

/// Every member of `names` has the same address, backup flag, state,
/// quarantine, entry and connection count in `after` as in `before`.
pub fn same_members(before: &Value, after: &Value, names: &BTreeSet<String>) {
    for name in names {
        let (was, is) = (backend(before, name), backend(after, name));
        for key in [
            "addr",
            "backup",
            "state",
            "quarantine",
            "discovered_from",
            "connections",
        ] {
            assert_eq!(is[key], was[key], "{name} {key}: {was} then {is}");
        }
    }
}
