//! `proxy_protocol` and `source`: which senders may name the client, and
//! where backend connections are made from. Their single values check
//! themselves while deserialized; [`proxy_protocol`] finishes the merged
//! `proxy_protocol` of a pool.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::PROXY_PROTOCOL_TIMEOUT;
use super::error::{Invalid, invalid};
use super::raw::RawProxyProtocol;
use super::values::{Cidr, FromScalar};
use crate::config::{BackendSource, ProxyProtocol};

/// One `proxy_protocol.from` entry: a CIDR or a bare IP, as in `allow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TrustedCidr(pub(super) IpNet);

impl FromScalar for TrustedCidr {
    const EXPECTING: &'static str = Cidr::EXPECTING;
    const EMPTY_LIST: &'static str =
        "an empty `from` trusts no sender; remove `proxy_protocol` to read no PROXY header";

    fn from_scalar(s: &str) -> Result<Self, String> {
        Cidr::from_scalar(s).map(|c| TrustedCidr(c.0))
    }
}

/// `source`: `proxy`, `client`, or an IP address a connection can be
/// made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SourceValue(pub(super) BackendSource);

impl FromScalar for SourceValue {
    const EXPECTING: &'static str = "`proxy`, `client` or an IP address";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let t = s.trim();
        match t {
            "proxy" => return Ok(SourceValue(BackendSource::Proxy)),
            "client" => return Ok(SourceValue(BackendSource::Client)),
            _ => {}
        }
        let ip = match t.parse::<IpAddr>() {
            Ok(ip) => ip.to_canonical(),
            Err(_) if t.parse::<SocketAddr>().is_ok() => {
                return Err(format!(
                    "`{s}` has a port; write the address alone (the kernel chooses the port)"
                ));
            }
            Err(_) => {
                return Err(format!(
                    "`{s}` is not `proxy`, `client` or an IP address (host names are not looked up)"
                ));
            }
        };
        if ip.is_unspecified() {
            return Err(format!(
                "`{s}` is the unspecified address, not usable as a source; \
                 write `proxy` to let the kernel choose"
            ));
        }
        match unusable(ip) {
            Some(why) => Err(format!("`{s}` is {why}, not usable as a source")),
            None => Ok(SourceValue(BackendSource::Address(ip))),
        }
    }
}

/// Why a connection cannot be made from `ip` (not the unspecified
/// address), if it cannot.
fn unusable(ip: IpAddr) -> Option<&'static str> {
    if ip.is_multicast() {
        return Some("a multicast address");
    }
    match ip {
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address"),
        // A link-local address is bound with its interface, which `source`
        // cannot name.
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => {
            Some("an IPv6 link-local address (it needs an interface)")
        }
        _ => None,
    }
}

/// A pool's `proxy_protocol` once `defaults` are merged in (`merged`);
/// `own` is what the pool itself wrote, at YAML path `at`. A `from` is
/// needed where a pool enables it; a `defaults` entry without one only
/// sets the timeout for the pools that name their senders.
pub(super) fn proxy_protocol(
    at: &str,
    own: Option<&RawProxyProtocol>,
    merged: Option<RawProxyProtocol>,
) -> Result<Option<ProxyProtocol>, Invalid> {
    let Some(merged) = merged else {
        return Ok(None);
    };
    match merged.from {
        Some(from) => Ok(Some(ProxyProtocol {
            from: from.items.iter().map(|c| c.0).collect(),
            timeout: merged.timeout.map_or(PROXY_PROTOCOL_TIMEOUT, |d| d.0),
        })),
        None if own.is_some() => invalid(
            format!("{at}.proxy_protocol"),
            "needs `from`: the load balancers (CIDRs) trusted to send a PROXY header; \
             remove `proxy_protocol` to read none",
        ),
        None => Ok(None),
    }
}

#[cfg(test)]
#[path = "identity_tests.rs"]
mod tests;
