//! The `Host` rule, for every admin route: DNS rebinding lets a page on
//! another site point its own name at this endpoint's address (an `ssh -L`
//! tunnel puts a loopback port in every operator's browser) and send
//! requests that look same-origin; the browser still names that site in
//! `Host`. So only a `Host` the endpoint answers to is served: the listen
//! address (or, on a wildcard one, the address the client connected to),
//! `localhost`, a loopback address, or an entry of `admin.hosts`, with any
//! port. Other requests are misdirected (421).
//! A request without `Host` (HTTP/1.0 health checks and scripts) comes
//! from no browser and is served.

use std::net::IpAddr;

use hyper::header::HOST;
use hyper::{HeaderMap, Uri};

/// A `Host` (or request-target authority) the endpoint does not answer to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Host {0} is not a name of this admin endpoint; add it to admin.hosts to use that name")]
pub struct Misdirected(pub String);

/// The names and addresses the endpoint answers to.
#[derive(Debug, Clone)]
pub struct Hosts {
    /// The IP of `admin.listen` (`0.0.0.0` and `::` too: the CLI sends the
    /// address as configured).
    pub listen: IpAddr,
    /// The entries of `admin.hosts`, normalised by the config.
    pub names: Vec<String>,
}

impl Hosts {
    /// Refuse a request whose `Host` header, or the authority of an
    /// absolute request target, is not one the endpoint answers to (see
    /// the module doc). `local` is the address the client connected to.
    ///
    /// # Errors
    /// The first [`Misdirected`] value.
    pub fn check(&self, headers: &HeaderMap, uri: &Uri, local: IpAddr) -> Result<(), Misdirected> {
        let given = headers
            .get_all(HOST)
            .iter()
            .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
            .chain(uri.authority().map(|a| a.as_str().to_owned()));
        for host in given {
            if !self.answers_to(&host, local) {
                return Err(Misdirected(host));
            }
        }
        Ok(())
    }

    /// Whether `host` (`name[:port]`, `a.b.c.d[:port]` or `[v6][:port]`)
    /// is one the endpoint answers to.
    fn answers_to(&self, host: &str, local: IpAddr) -> bool {
        let Some(name) = without_port(host.trim()) else {
            return false;
        };
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        match name.parse::<IpAddr>() {
            Ok(ip) => {
                let ip = ip.to_canonical();
                ip.is_loopback()
                    || ip == local.to_canonical()
                    || ip == self.listen.to_canonical()
                    || self.names.contains(&ip.to_string())
            }
            Err(_) => name == "localhost" || self.names.contains(&name),
        }
    }
}

/// The host part of `host[:port]`, brackets taken off an IPv6 address;
/// `None` when it is not of that form.
fn without_port(host: &str) -> Option<&str> {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => {
            let (v6, after) = rest.split_once(']')?;
            let port = match after {
                "" => "",
                after => after.strip_prefix(':')?,
            };
            (v6, port)
        }
        None => host.split_once(':').unwrap_or((host, "")),
    };
    let port_ok = port.is_empty() || port.parse::<u16>().is_ok();
    (port_ok && !name.is_empty()).then_some(name)
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
