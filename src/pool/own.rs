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
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use crate::config::local::{is_local_ip, reaches};

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

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
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
