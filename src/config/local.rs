//! Which addresses are this host's own, and whether a connect to one
//! address lands on a socket listening on another. Used by `check` and
//! reload to refuse a backend that is one of our listen addresses, and at
//! run time by the pool's set of bound listeners.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};

/// True when a connect to `to` lands on a socket listening on `listen`:
/// the same port, and the same IP, or `listen` is a wildcard of the same
/// family and `to`'s IP is one of this host's (`is_local`). IPv4-mapped
/// IPv6 addresses count as the IPv4 address they carry; a connect to a
/// wildcard address reaches the host itself. Port 0 (not bound yet) never
/// matches.
pub(crate) fn reaches(
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
pub(crate) fn is_local_ip(addr: SocketAddr) -> bool {
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
}
