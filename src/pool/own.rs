//! A backend that is this proxy itself: the process's own listen addresses,
//! and whether a backend address reaches one of them. State only: the
//! socket and name work (is an IP the host's own, what a name resolves
//! to) is `net::own`'s, which hands its answers in.
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

use crate::config::local::reaches;

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

    /// The listener of ours that a connect to `to` would reach, if any;
    /// `is_local` tells whether an address is one of the host's own.
    ///
    /// Cheap for the usual backend: one atomic load and a scan of a few
    /// ports; `is_local` runs only when the port is one a wildcard
    /// listener of ours holds, and its answers are cached per IP.
    pub fn reached_by(
        &self,
        to: SocketAddr,
        is_local: impl Fn(SocketAddr) -> bool,
    ) -> Option<SocketAddr> {
        if !self.holds_port(to.port()) {
            return None;
        }
        let addrs = self.addrs.load();
        addrs
            .iter()
            .copied()
            .find(|l| reaches(to, *l, |ip| self.is_local_cached(ip, &is_local)))
    }

    /// True when one of our listeners has `port`.
    pub fn holds_port(&self, port: u16) -> bool {
        self.addrs.load().iter().any(|l| l.port() == port)
    }

    fn is_local_cached(&self, ip: SocketAddr, is_local: impl Fn(SocketAddr) -> bool) -> bool {
        let now = Instant::now();
        let mut cache = self.local_ips.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((local, at)) = cache.get(&ip.ip())
            && now.saturating_duration_since(*at) < LOCAL_IP_TTL
        {
            return *local;
        }
        let local = is_local(ip);
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
        // The host's own addresses, as `net::own` would find them.
        let is_local = |a: SocketAddr| a.ip().is_loopback();
        assert_eq!(own.reached_by(sa("127.0.0.1:7"), is_local), None);
        own.set(vec![sa("0.0.0.0:7"), sa("[::1]:8")]);
        assert_eq!(
            own.reached_by(sa("127.0.0.1:7"), is_local),
            Some(sa("0.0.0.0:7"))
        );
        assert_eq!(own.reached_by(sa("[::1]:8"), is_local), Some(sa("[::1]:8")));
        assert_eq!(own.reached_by(sa("[::1]:7"), is_local), None);
        assert_eq!(own.reached_by(sa("203.0.113.7:7"), is_local), None);
    }
}
