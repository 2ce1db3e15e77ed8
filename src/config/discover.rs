//! Backends found through DNS: a `discover:` entry of a pool's `backends`
//! list and the pool's `discovery:` settings, and the rule that turns one
//! answer of a lookup into a backend's settings.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use super::{BackendConfig, SecretUrl};

/// `discovery:` settings of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// Time between two lookups of each entry.
    pub interval: Duration,
    /// A member missing from successful answers this long is removed.
    pub hold: Duration,
    /// The DNS server asked; the system's resolvers when `None`.
    pub resolver: Option<SocketAddr>,
}

/// One `{ name, discover }` entry of a pool's `backends` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoverConfig {
    /// The entry's name: its members are named `<name>/<ip>:<port>` or
    /// `<name>/<target>:<port>`.
    pub name: String,
    /// What is looked up.
    pub query: DiscoverQuery,
    /// Every member is a backup.
    pub backup: bool,
    /// Each member's probe URL, `{ip}` and `{port}` filled in.
    pub probe_url: Option<ProbeTemplate>,
}

/// What a discover entry looks up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DiscoverQuery {
    /// A and AAAA records of `host`; every address with `port`.
    Addrs {
        /// The name looked up.
        host: String,
        /// The port every member listens on.
        port: u16,
    },
    /// SRV records of `_service._proto.name`: target and port per record.
    Srv(String),
}

impl fmt::Display for DiscoverQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiscoverQuery::Addrs { host, port } => write!(f, "{host}:{port}"),
            DiscoverQuery::Srv(name) => f.write_str(name),
        }
    }
}

/// The address a template is checked and shown with (TEST-NET-1).
pub(crate) const SAMPLE: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)),
    65535,
);

/// A probe URL with `{ip}` (IPv6 in brackets) and `{port}` standing for a
/// member's address; checked at load time with a sample address.
#[derive(Clone, PartialEq, Eq)]
pub struct ProbeTemplate(pub(crate) String);

impl ProbeTemplate {
    /// The URL for the member at `addr`, or `None` when the filled-in text
    /// is not a URL (it was one for the sample address at load time).
    pub fn fill(&self, addr: SocketAddr) -> Option<SecretUrl> {
        let ip = match addr {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        };
        let text = self
            .0
            .replace("{ip}", &ip)
            .replace("{port}", &addr.port().to_string());
        url::Url::parse(&text).ok().map(SecretUrl)
    }
}

impl fmt::Display for ProbeTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Filled in with a sample address, shown with its secrets masked,
        // and the placeholders put back.
        match self.fill(SAMPLE) {
            Some(url) => f.write_str(
                &url.to_string()
                    .replace("192.0.2.1", "{ip}")
                    .replace(":65535", ":{port}"),
            ),
            None => f.write_str("(invalid template)"),
        }
    }
}

impl fmt::Debug for ProbeTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProbeTemplate({self})")
    }
}

/// One member a lookup found: what a backend is made of.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Found {
    /// The part of the member's name after `<entry>/`: `ip:port`, or
    /// `target:port` for SRV.
    pub key: String,
    /// Where it is dialled.
    pub addr: SocketAddr,
    /// An SRV record above the lowest priority of its answer.
    pub lower_priority: bool,
}

impl DiscoverConfig {
    /// The backend settings of the member `found`.
    pub fn member(&self, found: &Found) -> BackendConfig {
        BackendConfig {
            name: format!("{}/{}", self.name, found.key),
            addr: found.addr.to_string(),
            backup: self.backup || found.lower_priority,
            probe_url: self.probe_url.as_ref().and_then(|t| t.fill(found.addr)),
            discovered_from: Some(self.name.clone()),
        }
    }

    /// True when `other` looks up the same thing: a reload that keeps it
    /// keeps its members.
    pub fn same_source(&self, other: &DiscoverConfig) -> bool {
        self.name == other.name && self.query == other.query
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_fills_in_each_members_address() {
        let t = ProbeTemplate("http://{ip}:9130/api/?port={port}".into());
        let v4 = t.fill("10.0.0.7:9333".parse().unwrap()).unwrap();
        assert_eq!(v4.expose().as_str(), "http://10.0.0.7:9130/api/?port=9333");
        let v6 = t.fill("[2001:db8::1]:9333".parse().unwrap()).unwrap();
        assert_eq!(v6.expose().host_str(), Some("[2001:db8::1]"));
    }

    #[test]
    fn a_member_is_named_after_its_entry_and_key() {
        let entry = DiscoverConfig {
            name: "ltc".into(),
            query: DiscoverQuery::Srv("_p2p._tcp.nodes.test".into()),
            backup: false,
            probe_url: None,
        };
        let found = Found {
            key: "n1.nodes.test:9333".into(),
            addr: "127.0.0.2:9333".parse().unwrap(),
            lower_priority: true,
        };
        let b = entry.member(&found);
        assert_eq!(b.name, "ltc/n1.nodes.test:9333");
        assert_eq!(b.addr, "127.0.0.2:9333");
        assert!(b.backup, "a lower-priority SRV record is a backup");
        assert_eq!(b.discovered_from.as_deref(), Some("ltc"));
    }
}
