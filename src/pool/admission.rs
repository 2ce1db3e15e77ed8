//! A client's place in its pool: counted against `max_connections` and,
//! when set, `max_connections_per_source` (one client address: IPv4 /32,
//! IPv6 /64, so one host cannot take every slot a node gives the proxy).
//! The place is freed when the [`Admission`] drops.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::pool::registry::Pool;

/// Why a client was refused at once, unread: by a pool's listener (the
/// `rejected` event's `reason`, `pin_proxy_rejected_total`) or by the admin
/// endpoint's own connection bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Outside the pool's `allow` CIDRs.
    AllowList,
    /// All the connections allowed are taken (`max_connections`).
    MaxConnections,
    /// Its address holds its share (`max_connections_per_source`).
    PerSource,
    /// No backend of the pool can serve it (`health.require_services`,
    /// `min_protocol_version`, chain): closed rather than handed to a node
    /// that would make it ban the proxy.
    NoSuitableBackend,
    /// A trusted source (`proxy_protocol.from`) sent no valid PROXY
    /// header in time.
    ProxyProtocol,
}

impl Refusal {
    /// Every reason.
    pub const ALL: [Refusal; 5] = [
        Refusal::AllowList,
        Refusal::MaxConnections,
        Refusal::PerSource,
        Refusal::NoSuitableBackend,
        Refusal::ProxyProtocol,
    ];

    /// The `reason` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::AllowList => "allow_list",
            Refusal::MaxConnections => "max_connections",
            Refusal::PerSource => "per_source",
            Refusal::NoSuitableBackend => "no_suitable_backend",
            Refusal::ProxyProtocol => "proxy_protocol",
        }
    }
}

/// A client's place in the pool's budgets; freed on drop.
#[derive(Debug)]
pub struct Admission {
    pool: Arc<Pool>,
    /// The source counted, when a per-source limit applied (boxed: most
    /// pools have none, and this lives as long as the connection).
    source: Option<Box<IpAddr>>,
}

/// The address a per-source limit counts: IPv4 (also IPv4-mapped IPv6) as
/// it is, IPv6 by its /64.
pub fn source_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

impl Admission {
    /// The admission of a client handed over by another process: it was
    /// admitted there, so it counts here even above the limits (its
    /// source too).
    pub(in crate::pool) fn handed_over(pool: &Arc<Pool>, peer: IpAddr) -> Admission {
        pool.clients.fetch_add(1, Ordering::AcqRel);
        let source = pool.config().max_connections_per_source.map(|_| {
            let key = source_of(peer);
            let mut sources = pool.sources.lock().unwrap_or_else(|e| e.into_inner());
            *sources.entry(key).or_insert(0) += 1;
            Box::new(key)
        });
        Admission {
            pool: pool.clone(),
            source,
        }
    }
}

/// A pool's gate: admits clients against its limits and counts the ones
/// it refuses.
#[derive(Clone, Copy)]
pub struct Gate<'a> {
    pool: &'a Arc<Pool>,
}

impl Pool {
    /// This pool's gate.
    pub fn gate(self: &Arc<Self>) -> Gate<'_> {
        Gate { pool: self }
    }
}

impl Gate<'_> {
    /// Admit a client from `peer`: below `max_connections`, below
    /// `max_connections_per_source` for its address when that is set, and
    /// while some backend can serve it.
    ///
    /// # Errors
    /// Which limit it is at.
    pub fn admit_from(&self, peer: IpAddr) -> Result<Admission, Refusal> {
        let pool = self.pool;
        if pool.unservable.load(Ordering::Acquire) {
            return Err(Refusal::NoSuitableBackend);
        }
        let per_source = pool.config().max_connections_per_source;
        if !self.take_place() {
            return Err(Refusal::MaxConnections);
        }
        let Some(limit) = per_source else {
            return Ok(Admission {
                pool: pool.clone(),
                source: None,
            });
        };
        let key = source_of(peer);
        let mut sources = pool.sources.lock().unwrap_or_else(|e| e.into_inner());
        let n = sources.entry(key).or_insert(0);
        if *n >= limit {
            if *n == 0 {
                sources.remove(&key);
            }
            drop(sources);
            pool.clients.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::PerSource);
        }
        *n += 1;
        Ok(Admission {
            pool: pool.clone(),
            source: Some(Box::new(key)),
        })
    }

    /// Live clients from `peer`'s source address (0 while no per-source
    /// limit is set).
    pub fn clients_from(&self, peer: IpAddr) -> usize {
        let sources = self.pool.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources.get(&source_of(peer)).copied().unwrap_or(0)
    }

    /// A client was refused at accept for `reason` (the `rejected` event's).
    pub fn count_rejected(&self, reason: Refusal) {
        self.pool.tally.count_rejected(reason);
    }

    /// A connection from a trusted sender starts reading its PROXY
    /// header: counted (as connecting) until the guard drops, so a live
    /// upgrade waits for it to be admitted instead of leaving it behind.
    pub fn reading_header(&self) -> ReadingHeader {
        self.pool.headers.fetch_add(1, Ordering::AcqRel);
        ReadingHeader {
            pool: self.pool.clone(),
        }
    }

    fn take_place(&self) -> bool {
        let max = self.pool.config().max_connections;
        self.pool
            .clients
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }
}

/// A PROXY header being read ([`Gate::reading_header`]).
#[derive(Debug)]
pub struct ReadingHeader {
    pool: Arc<Pool>,
}

impl Drop for ReadingHeader {
    fn drop(&mut self) {
        self.pool.headers.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.pool.clients.fetch_sub(1, Ordering::AcqRel);
        if let Some(key) = self.source.take() {
            let mut sources = self.pool.sources.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = sources.get_mut(&key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    sources.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use tokio_util::sync::CancellationToken;

    fn pool(extra: &str) -> Arc<Pool> {
        let yaml = format!(
            "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    max_connections: 5\n{extra}    backends: [h:1]\n"
        );
        let c = Config::parse(&yaml, "inline.yaml".as_ref()).unwrap();
        Arc::new(Pool::new(c.pools[0].clone(), CancellationToken::new()))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_source_is_held_to_its_limit_and_gets_its_places_back() {
        let pool = pool("    max_connections_per_source: 2\n");
        let a = pool.gate().admit_from(ip("10.0.0.1")).unwrap();
        let _b = pool.gate().admit_from(ip("10.0.0.1")).unwrap();
        assert_eq!(
            pool.gate().admit_from(ip("10.0.0.1")).unwrap_err(),
            Refusal::PerSource
        );
        // The mapped form is the same client.
        assert_eq!(
            pool.gate().admit_from(ip("::ffff:10.0.0.1")).unwrap_err(),
            Refusal::PerSource
        );
        let _c = pool.gate().admit_from(ip("10.0.0.2")).unwrap();
        assert_eq!(pool.view().clients(), 3, "a refusal takes no place");
        drop(a);
        assert_eq!(pool.gate().clients_from(ip("10.0.0.1")), 1);
        let _d = pool.gate().admit_from(ip("10.0.0.1")).unwrap();
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let pool = pool("    max_connections_per_source: 1\n");
        let _a = pool.gate().admit_from(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            pool.gate()
                .admit_from(ip("2001:db8:1:2:ffff::9"))
                .unwrap_err(),
            Refusal::PerSource
        );
        let _b = pool.gate().admit_from(ip("2001:db8:1:3::1")).unwrap();
    }

    #[test]
    fn the_pool_limit_comes_first_and_no_limit_counts_nothing() {
        let pool = pool("");
        let held: Vec<_> = (0..5)
            .map(|_| pool.gate().admit_from(ip("10.0.0.1")).unwrap())
            .collect();
        assert_eq!(
            pool.gate().admit_from(ip("10.0.0.9")).unwrap_err(),
            Refusal::MaxConnections
        );
        assert_eq!(pool.gate().clients_from(ip("10.0.0.1")), 0);
        drop(held);
        assert_eq!(pool.view().clients(), 0);
    }

    #[test]
    fn handed_over_clients_count_toward_their_source() {
        let pool = pool("    max_connections_per_source: 1\n");
        let _handed = pool.upgrade().admit(ip("10.0.0.1"));
        assert_eq!(
            pool.gate().admit_from(ip("10.0.0.1")).unwrap_err(),
            Refusal::PerSource
        );
    }
}
