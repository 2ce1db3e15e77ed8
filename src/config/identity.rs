//! Client identity: which senders may tell pin-proxy who the client is
//! (`proxy_protocol`), and which address a backend connection is made
//! from (`source`).

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use super::{Config, PoolConfig};

/// `proxy_protocol:` settings: a connection from one of `from` must begin
/// with a PROXY protocol header (v1 or v2) within `timeout`; connections
/// from any other source are never parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyProtocol {
    /// The senders trusted to send a header (load balancers); never empty.
    pub from: Vec<IpNet>,
    /// How long a trusted sender has to deliver the whole header.
    pub timeout: Duration,
}

impl ProxyProtocol {
    /// True when a connection from `ip` must begin with a PROXY header.
    /// IPv4-mapped IPv6 peers are matched as the IPv4 address they are, as
    /// `allow` matches them.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.from.iter().any(|net| net.contains(&ip))
    }
}

/// `source:`: the local address backend connections are made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendSource {
    /// The kernel chooses (the default).
    Proxy,
    /// The client's own IP (from the PROXY header when there is one), the
    /// port left to the kernel: a transparent bind, which needs
    /// `CAP_NET_ADMIN` or `CAP_NET_RAW`.
    Client,
    /// This address of the host; the port left to the kernel.
    Address(IpAddr),
}

impl BackendSource {
    /// True when connections are bound to an address the host does not
    /// own (`IP_TRANSPARENT` / `IPV6_TRANSPARENT`).
    pub fn is_transparent(self) -> bool {
        self == BackendSource::Client
    }
}

/// As written in config.yaml: `proxy`, `client` or the address.
impl fmt::Display for BackendSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendSource::Proxy => f.write_str("proxy"),
            BackendSource::Client => f.write_str("client"),
            BackendSource::Address(ip) => write!(f, "{ip}"),
        }
    }
}

impl PoolConfig {
    /// True when the pool's backend connections need the transparent
    /// socket option (`source: client`), so the process needs
    /// `CAP_NET_ADMIN` or `CAP_NET_RAW`: checked before `run` starts and
    /// before a reload is applied.
    pub fn needs_transparent(&self) -> bool {
        self.source.is_transparent()
    }
}

impl Config {
    /// The pools that need the transparent socket option, in file order
    /// (see [`PoolConfig::needs_transparent`]).
    pub fn transparent_pools(&self) -> Vec<&str> {
        self.pools
            .iter()
            .filter(|p| p.needs_transparent())
            .map(|p| p.name.as_str())
            .collect()
    }
}

/// A pool whose `proxy_protocol.from` holds a `/0`: every sender is
/// trusted, so any client can claim any address.
pub(super) fn trust_warning(pool: &PoolConfig) -> Option<String> {
    let pp = pool.proxy_protocol.as_ref()?;
    let all = pp.from.iter().find(|net| net.prefix_len() == 0)?;
    Some(format!(
        "pool {}: proxy_protocol.from {all} trusts every sender: any client can claim any \
         address in its own PROXY header, and one that sends none is closed; list only the \
         load balancers' addresses",
        pool.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().expect("CIDR")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("IP")
    }

    #[test]
    fn trusts_the_listed_senders_only() {
        let pp = ProxyProtocol {
            from: vec![net("10.0.0.0/8"), net("fd00::/8")],
            timeout: Duration::from_secs(3),
        };
        for (peer, trusted) in [
            ("10.1.2.3", true),
            ("::ffff:10.1.2.3", true),
            ("fd12::1", true),
            ("11.0.0.1", false),
            ("::ffff:11.0.0.1", false),
            ("fe80::1", false),
        ] {
            assert_eq!(pp.trusts(ip(peer)), trusted, "{peer}");
        }
    }

    #[test]
    fn only_client_is_transparent() {
        assert!(BackendSource::Client.is_transparent());
        assert!(!BackendSource::Proxy.is_transparent());
        assert!(!BackendSource::Address(ip("10.0.0.1")).is_transparent());
        assert_eq!(BackendSource::Address(ip("::1")).to_string(), "::1");
    }
}
