//! IPv6 addresses with a zone, `[fe80::1%eth0]:9333` or `[fe80::1%2]:9333`:
//! link-local addresses mean nothing without the interface they are on, so
//! the interface, by name or by index, must exist on this host.

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};

/// `[ip%zone]:port` as a socket address, the zone turned into its
/// interface index; `None` when `s` has no zone. The interface (a name
/// or an index) must exist on this host.
pub(super) fn scoped(s: &str) -> Option<Result<SocketAddr, String>> {
    let rest = s.trim().strip_prefix('[')?;
    let (inside, port) = rest.rsplit_once("]:")?;
    let (ip, zone) = inside.split_once('%')?;
    Some(parse(ip, zone, port))
}

fn parse(ip: &str, zone: &str, port: &str) -> Result<SocketAddr, String> {
    let ip: Ipv6Addr = ip
        .parse()
        .map_err(|_| format!("`{ip}` is not an IPv6 address"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}` is not a port number"))?;
    let scope = match zone.parse::<u32>() {
        Ok(index) => known_index(index)?,
        Err(_) => index_of(zone)?,
    };
    Ok(SocketAddrV6::new(ip, port, 0, scope).into())
}

/// `index`, when a network interface has it on this host.
fn known_index(index: u32) -> Result<u32, String> {
    let sock = lookup_socket(&index.to_string())?;
    match rustix::net::netdevice::index_to_name(&sock, index) {
        Ok(_) => Ok(index),
        Err(_) => Err(format!(
            "no network interface with index {index} on this host (the zone after `%`)"
        )),
    }
}

/// A socket to ask the kernel about interfaces (the lookups are ioctls on
/// any socket).
fn lookup_socket(what: &str) -> Result<UdpSocket, String> {
    UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("look up interface `{what}`: {e}"))
}

/// The index of the network interface `name`.
fn index_of(name: &str) -> Result<u32, String> {
    let unknown = || format!("no network interface `{name}` on this host (the zone after `%`)");
    let valid = !name.is_empty()
        && name.len() < 16
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@:".contains(c));
    if !valid {
        return Err(unknown());
    }
    let sock = lookup_socket(name)?;
    rustix::net::netdevice::name_to_index(&sock, name).map_err(|_| unknown())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_by_number_and_by_name() {
        let lo = index_of("lo").unwrap();
        let want = |scope| {
            SocketAddr::from(SocketAddrV6::new(
                "fe80::1".parse().unwrap(),
                9333,
                0,
                scope,
            ))
        };
        assert_eq!(scoped(&format!("[fe80::1%{lo}]:9333")), Some(Ok(want(lo))));
        assert_eq!(scoped("[fe80::1%lo]:9333"), Some(Ok(want(lo))));
        assert_eq!(scoped("[fe80::1]:9333"), None);
        assert_eq!(scoped("127.0.0.1:9333"), None);
        let err = scoped("[fe80::1%nosuch0]:9333").unwrap().unwrap_err();
        assert!(err.contains("no network interface `nosuch0`"), "{err}");
        let err = scoped("[fe80::1%999]:9333").unwrap().unwrap_err();
        assert!(err.contains("no network interface with index 999"), "{err}");
        assert!(scoped("[fe80::1%0]:9333").unwrap().is_err());
        assert!(scoped("[fe80::1%../x]:9333").unwrap().is_err());
        assert!(scoped("[fe80::zz%lo]:9333").unwrap().is_err());
        assert!(scoped("[fe80::1%lo]:99999").unwrap().is_err());
    }
}
