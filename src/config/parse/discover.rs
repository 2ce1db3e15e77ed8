//! The values of a `discover:` entry and of `discovery:`, checked while
//! deserialized: the name looked up, the resolver's address, and a probe
//! URL template.

use std::net::{IpAddr, SocketAddr};

use super::values::FromScalar;
use crate::config::discover::SAMPLE;
use crate::config::{DiscoverQuery, ProbeTemplate};

/// The longest DNS name (RFC 1035: 255 octets on the wire, 253 as text).
const MAX_NAME: usize = 253;

/// `host:port` (A and AAAA) or `_service._proto.name` (SRV).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::config) struct DiscoverTarget(pub(in crate::config) DiscoverQuery);

impl FromScalar for DiscoverTarget {
    const EXPECTING: &'static str =
        "a DNS name to discover: `host:port` (A/AAAA) or `_service._proto.name` (SRV)";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.starts_with('_') {
            return srv(s).map(|()| DiscoverTarget(DiscoverQuery::Srv(s.to_owned())));
        }
        let bad = |why: &str| {
            format!(
                "`{s}` is not a name to discover: {why}; write `host:port` or `_service._proto.name`"
            )
        };
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(bad("no port"));
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(bad("the port must be a number from 1 to 65535")),
        };
        if host.parse::<IpAddr>().is_ok() || host.starts_with('[') {
            return Err(bad(
                "an IP address is not looked up; list it as a static backend",
            ));
        }
        dns_name(host).map_err(|why| bad(&why))?;
        Ok(DiscoverTarget(DiscoverQuery::Addrs {
            host: host.to_owned(),
            port,
        }))
    }
}

/// `_service._proto.name`: two underscore labels, then a DNS name.
fn srv(s: &str) -> Result<(), String> {
    let bad = |why: &str| format!("`{s}` is not an SRV name `_service._proto.name`: {why}");
    if s.contains(':') {
        return Err(bad("an SRV answer carries the port; leave it out"));
    }
    let mut labels = s.splitn(3, '.');
    let (service, proto, rest) = (labels.next(), labels.next(), labels.next());
    let under = |l: Option<&str>| l.is_some_and(|l| l.len() > 1 && l.starts_with('_'));
    if !under(service) || !under(proto) {
        return Err(bad("it must start with two labels like `_p2p._tcp`"));
    }
    let rest = rest.ok_or_else(|| bad("no domain after `_service._proto`"))?;
    dns_name(&s[..s.len() - rest.len() - 1].replace('_', "x"))
        .and_then(|()| dns_name(rest))
        .map_err(|why| bad(&why))
}

/// A host name: labels of letters, digits, `-` and `_`, at most 63 long,
/// 253 in all; a trailing dot is allowed.
fn dns_name(name: &str) -> Result<(), String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err("empty host".into());
    }
    if name.len() > MAX_NAME {
        return Err(format!("longer than {MAX_NAME} characters"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("an empty label (`..`)".into());
        }
        if label.len() > 63 {
            return Err(format!("the label `{label}` is longer than 63 characters"));
        }
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if !label.chars().all(ok) {
            return Err(format!(
                "the label `{label}` may hold only letters, digits, `-` and `_`"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("the label `{label}` starts or ends with `-`"));
        }
    }
    Ok(())
}

/// A DNS server: `ip:port` or `ip` (port 53).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::config) struct ResolverAddr(pub(in crate::config) SocketAddr);

impl FromScalar for ResolverAddr {
    const EXPECTING: &'static str = "a DNS server address like `127.0.0.1:53` or `[::1]:5353`";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(ResolverAddr(SocketAddr::new(ip, 53)));
        }
        match s.parse::<SocketAddr>() {
            Ok(a) if a.port() != 0 => Ok(ResolverAddr(a)),
            _ => Err(format!(
                "`{s}` is not a DNS server address; write an IP with an optional port, like `127.0.0.1:5353`"
            )),
        }
    }
}

/// Does `s` name a member's address (`{ip}` or `{port}`)?
pub(in crate::config) fn is_template(s: &str) -> bool {
    s.contains("{ip}") || s.contains("{port}")
}

/// A probe URL template, checked by filling in a sample address.
pub(in crate::config) fn template(s: &str) -> Result<ProbeTemplate, String> {
    let t = ProbeTemplate(s.trim().to_owned());
    if !is_template(&t.0) {
        return Err(format!(
            "probe_url `{t}` of a discover entry must name each member with `{{ip}}` or `{{port}}`, like `http://{{ip}}:9130/api/`"
        ));
    }
    let url = t.fill(SAMPLE).ok_or_else(|| {
        format!("probe_url `{t}` is not a URL once `{{ip}}` and `{{port}}` are filled in")
    })?;
    if !matches!(url.expose().scheme(), "http" | "https") {
        return Err(format!("probe_url `{t}` must be an http or https URL"));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_to_discover_are_checked() {
        let ok = |s: &str| DiscoverTarget::from_scalar(s).map(|t| t.0.to_string());
        assert_eq!(
            ok("nodes.example.net:9333").unwrap(),
            "nodes.example.net:9333"
        );
        assert_eq!(ok("litecoind:9333").unwrap(), "litecoind:9333");
        assert_eq!(
            ok("_p2p._tcp.example.net").unwrap(),
            "_p2p._tcp.example.net"
        );
        assert_eq!(
            ok("_p2p._tcp.example.net.").unwrap(),
            "_p2p._tcp.example.net."
        );
        for bad in [
            "nodes.example.net",
            "nodes.example.net:0",
            "nodes.example.net:port",
            "127.0.0.1:9333",
            "[::1]:9333",
            "no spaces.net:9333",
            "a..b:9333",
            "-a.b:9333",
            "_p2p.example.net",
            "_p2p._tcp",
            "_p2p._tcp.example.net:9333",
            "",
        ] {
            assert!(ok(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_resolver_is_an_ip_with_an_optional_port() {
        let r = |s: &str| ResolverAddr::from_scalar(s).map(|r| r.0);
        assert_eq!(r("127.0.0.1").unwrap(), "127.0.0.1:53".parse().unwrap());
        assert_eq!(r("[::1]:5353").unwrap(), "[::1]:5353".parse().unwrap());
        assert!(r("dns.example.net:53").is_err());
        assert!(r("127.0.0.1:0").is_err());
    }

    #[test]
    fn a_template_must_name_the_member() {
        assert!(template("http://{ip}:9130/api/").is_ok());
        assert!(template("http://twin.example:{port}/api/").is_ok());
        assert!(
            template("http://[{ip}]:9130/").is_err(),
            "double brackets are no URL"
        );
        assert!(template("http://node:9130/api/").is_err());
        assert!(template("ftp://{ip}/").is_err());
    }
}
