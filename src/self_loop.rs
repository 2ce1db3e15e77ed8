//! A backend that is this proxy itself: the process's own listen addresses,
//! and whether a backend address reaches one of them.
//!
//! A client leg dialled to one of our own listeners is accepted as a new
//! client, whose leg dials us again: a chain that ends only at
//! `max_connections`. `check` and reload refuse the addresses they can see;
//! at run time every backend leg checks its resolved address against the
//! bound listeners before it dials, so a name that comes to resolve to us
//! (or a port-0 listener a backend happens to name) never starts a chain.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

/// How long a "this IP is (not) ours" answer is trusted: addresses come and
/// go with interfaces and DHCP.
const LOCAL_IP_TTL: Duration = Duration::from_secs(30);
/// Distinct IPs remembered at most; the cache starts over beyond that.
const LOCAL_IP_CACHE: usize = 256;

/// The bound listen addresses of every pool of the process, shared by
/// their backend legs.
#[derive(Debug, Default)]
pub struct OwnListeners {
    addrs: ArcSwap<Vec<SocketAddr>>,
    local_ips: Mutex<HashMap<IpAddr, (bool, Instant)>>,
}

impl OwnListeners {
    /// An empty set: nothing is ours yet.
    pub fn new() -> Arc<OwnListeners> {
        Arc::default()
    }

    /// Replace the set with the addresses now bound (after a start or a
    /// reload).
    pub fn set(&self, addrs: Vec<SocketAddr>) {
        self.addrs.store(Arc::new(addrs));
    }

    /// The listener of ours that a connect to `to` would reach, if any.
    ///
    /// Cheap for the usual backend: one atomic load and a scan of a few
    /// ports; the "is this IP one of the host's" lookup runs only when the
    /// port is one a wildcard listener of ours holds (cached per IP).
    pub fn reached_by(&self, to: SocketAddr) -> Option<SocketAddr> {
        let addrs = self.addrs.load();
        if !addrs.iter().any(|l| l.port() == to.port()) {
            return None;
        }
        addrs
            .iter()
            .copied()
            .find(|l| reaches(to, *l, |ip| self.is_local_cached(ip)))
    }

    /// The listener of ours that `addr` (`host:port`) resolves to, if any.
    /// Resolves only when the port is one of ours, so probes of remote
    /// nodes cost nothing more.
    pub async fn reached_by_name(&self, addr: &str) -> Option<SocketAddr> {
        let port: u16 = addr.rsplit_once(':')?.1.parse().ok()?;
        if !self.addrs.load().iter().any(|l| l.port() == port) {
            return None;
        }
        let resolved = tokio::net::lookup_host(addr).await.ok()?;
        resolved.into_iter().find_map(|sa| self.reached_by(sa))
    }

    fn is_local_cached(&self, ip: SocketAddr) -> bool {
        let now = Instant::now();
        let mut cache = self.local_ips.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((local, at)) = cache.get(&ip.ip())
            && now.saturating_duration_since(*at) < LOCAL_IP_TTL
        {
            return *local;
        }
        let local = is_local_ip(ip);
        if cache.len() >= LOCAL_IP_CACHE {
            cache.clear();
        }
        cache.insert(ip.ip(), (local, now));
        local
    }
}

/// True when a connect to `to` lands on a socket listening on `listen`:
/// the same port, and the same IP, or `listen` is a wildcard of the same
/// family and `to`'s IP is one of this host's (`is_local`). IPv4-mapped
/// IPv6 addresses count as the IPv4 address they carry; a connect to a
/// wildcard address reaches the host itself. Port 0 (not bound yet) never
/// matches.
pub fn reaches(
    to: SocketAddr,
    listen: SocketAddr,
    is_local: impl FnOnce(SocketAddr) -> bool,
) -> bool {
    if listen.port() == 0 || listen.port() != to.port() {
        return false;
    }
    let (to_ip, listen_ip) = (to.ip().to_canonical(), listen.ip().to_canonical());
    if to_ip.is_ipv4() != listen_ip.is_ipv4() {
        return false;
    }
    if to_ip == listen_ip {
        return true;
    }
    if to_ip.is_unspecified() {
        return listen_ip.is_unspecified() || listen_ip.is_loopback();
    }
    listen_ip.is_unspecified() && (to_ip.is_loopback() || is_local(to))
}

/// True when `addr`'s IP is one of this host's own addresses.
///
/// Asks the routing table rather than listing interfaces: a UDP socket
/// "connected" to the address (no packet is sent) takes the host's own
/// address as its source exactly when the destination is local. Unlike a
/// test bind, this does not say yes to every address under
/// `net.ipv4.ip_nonlocal_bind`. Any error (no route, no such scope) means
/// "not ours".
pub fn is_local_ip(addr: SocketAddr) -> bool {
    let ip = addr.ip().to_canonical();
    if ip.is_loopback() || ip.is_unspecified() {
        return true;
    }
    let (bind, to): (SocketAddr, SocketAddr) = match (ip, addr) {
        (IpAddr::V4(v4), _) => ((Ipv4Addr::UNSPECIFIED, 0).into(), (v4, 9).into()),
        (IpAddr::V6(v6), SocketAddr::V6(orig)) => (
            (Ipv6Addr::UNSPECIFIED, 0).into(),
            SocketAddrV6::new(v6, 9, 0, orig.scope_id()).into(),
        ),
        (IpAddr::V6(v6), SocketAddr::V4(_)) => ((Ipv6Addr::UNSPECIFIED, 0).into(), (v6, 9).into()),
    };
    let Ok(sock) = UdpSocket::bind(bind) else {
        return false;
    };
    if sock.connect(to).is_err() {
        return false;
    }
    sock.local_addr().is_ok_and(|l| l.ip() == ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn reaches_same_address_wildcards_and_mapped_forms() {
        let never = |_| panic!("no local lookup needed");
        let cases = [
            ("127.0.0.1:7", "127.0.0.1:7", true),
            ("127.0.0.1:7", "127.0.0.1:8", false),
            ("127.0.0.2:7", "127.0.0.1:7", false),
            ("127.0.0.1:7", "0.0.0.0:7", true),
            ("[::ffff:127.0.0.1]:7", "127.0.0.1:7", true),
            ("[::1]:7", "0.0.0.0:7", false),
            ("[::1]:7", "[::]:7", true),
            ("[::1]:7", "[::1]:7", true),
            ("0.0.0.0:7", "127.0.0.1:7", true),
            ("127.0.0.1:0", "127.0.0.1:0", false),
        ];
        for (to, listen, want) in cases {
            assert_eq!(reaches(sa(to), sa(listen), never), want, "{to} -> {listen}");
        }
        // A wildcard listener is reached through any of the host's IPs,
        // and only through those.
        assert!(reaches(sa("10.9.8.7:7"), sa("0.0.0.0:7"), |_| true));
        assert!(!reaches(sa("10.9.8.7:7"), sa("0.0.0.0:7"), |_| false));
        assert!(!reaches(sa("10.9.8.7:7"), sa("10.9.8.6:7"), |_| true));
    }

    #[test]
    fn local_ips_are_the_hosts_own() {
        assert!(is_local_ip(sa("127.0.0.1:1")));
        assert!(is_local_ip(sa("127.3.2.1:1")));
        assert!(is_local_ip(sa("0.0.0.0:1")));
        // TEST-NET-3 is never assigned to a host.
        assert!(!is_local_ip(sa("203.0.113.7:1")));
        // The address the host uses to reach outside (if it has a route) is its own.
        let probe = UdpSocket::bind("0.0.0.0:0").unwrap();
        if probe.connect("203.0.113.7:9").is_ok() {
            let own = probe.local_addr().unwrap();
            assert!(is_local_ip(own), "{own}");
        }
    }

    #[test]
    fn listeners_are_matched_after_set_and_not_before() {
        let own = OwnListeners::new();
        assert_eq!(own.reached_by(sa("127.0.0.1:7")), None);
        own.set(vec![sa("0.0.0.0:7"), sa("[::1]:8")]);
        assert_eq!(own.reached_by(sa("127.0.0.1:7")), Some(sa("0.0.0.0:7")));
        assert_eq!(own.reached_by(sa("[::1]:8")), Some(sa("[::1]:8")));
        assert_eq!(own.reached_by(sa("[::1]:7")), None);
        assert_eq!(own.reached_by(sa("203.0.113.7:7")), None);
    }
}
