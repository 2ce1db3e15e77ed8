//! DNS lookups of discover entries, through hickory-resolver: A and AAAA
//! records of `host:port` entries, SRV records (targets resolved) of
//! `_service._proto.name` entries. UDP with TCP for truncated answers;
//! no answer cache, so each lookup asks the server.
//!
//! Every failure (NXDOMAIN, SERVFAIL, REFUSED, a timeout, an answer with no
//! records) is an error here: the caller keeps the last good set.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::RData;

use crate::config::{DiscoverQuery, Found};

/// The longest one query waits for its server.
const MAX_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest: a loaded host still answers on loopback in this.
const MIN_TIMEOUT: Duration = Duration::from_millis(250);

/// A resolver for one pool's discovery settings.
pub struct Dns {
    resolver: TokioResolver,
}

impl Dns {
    /// Ask `server`, or the system's resolvers (`/etc/resolv.conf`, with
    /// its search domains, and `/etc/hosts`) when `None`. One query waits
    /// at most `interval` (within 250 ms..5 s).
    ///
    /// # Errors
    /// The system's resolver configuration cannot be read.
    pub fn new(server: Option<SocketAddr>, interval: Duration) -> Result<Dns, String> {
        let builder = match server {
            Some(addr) => {
                let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
                for c in &mut ns.connections {
                    c.port = addr.port();
                }
                let config = ResolverConfig::from_parts(None, Vec::new(), vec![ns]);
                TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            }
            None => TokioResolver::builder_tokio()
                .map_err(|e| format!("cannot read the system's resolver configuration: {e}"))?,
        };
        let mut builder = builder;
        let opts: &mut ResolverOpts = builder.options_mut();
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.cache_size = 0;
        opts.timeout = interval.clamp(MIN_TIMEOUT, MAX_TIMEOUT);
        opts.attempts = 1;
        if server.is_some() {
            opts.use_hosts_file = ResolveHosts::Never;
        }
        let resolver = builder.build().map_err(|e| e.to_string())?;
        Ok(Dns { resolver })
    }

    /// Every member `query` names now. `known` are the entry's members so
    /// far: an SRV target whose addresses cannot be looked up this time
    /// keeps the address it had (the SRV answer still names it).
    ///
    /// # Errors
    /// The lookup failed or found nothing, in a few words.
    pub async fn lookup(
        &self,
        query: &DiscoverQuery,
        known: &[Found],
    ) -> Result<Vec<Found>, String> {
        match query {
            DiscoverQuery::Addrs { host, port } => {
                let ips = self.addresses(host).await?;
                Ok(ips
                    .into_iter()
                    .map(|ip| {
                        let addr = SocketAddr::new(ip, *port);
                        Found {
                            key: addr.to_string(),
                            addr,
                            lower_priority: false,
                        }
                    })
                    .collect())
            }
            DiscoverQuery::Srv(name) => self.srv(name, known).await,
        }
    }

    /// The addresses of `host`, sorted and without duplicates.
    async fn addresses(&self, host: &str) -> Result<BTreeSet<IpAddr>, String> {
        let answer = self.resolver.lookup_ip(host).await.map_err(|e| why(&e))?;
        let ips: BTreeSet<IpAddr> = answer.iter().collect();
        if ips.is_empty() {
            return Err("no records".to_owned());
        }
        Ok(ips)
    }

    async fn srv(&self, name: &str, known: &[Found]) -> Result<Vec<Found>, String> {
        let answer = self.resolver.srv_lookup(name).await.map_err(|e| why(&e))?;
        // (target, port, priority); `.` means "no service here" (RFC 2782).
        let records: Vec<(String, u16, u16)> = answer
            .answers()
            .iter()
            .filter_map(|r| match &r.data {
                RData::SRV(srv) => Some(srv),
                _ => None,
            })
            .filter(|srv| !srv.target.is_root())
            .map(|srv| {
                let target = srv
                    .target
                    .to_ascii()
                    .trim_end_matches('.')
                    .to_ascii_lowercase();
                (target, srv.port, srv.priority)
            })
            .collect();
        let Some(lowest) = records.iter().map(|r| r.2).min() else {
            return Err("no records".to_owned());
        };
        // Addresses the answer's additional section already gives.
        let glue: Vec<(String, IpAddr)> = answer
            .additionals()
            .iter()
            .filter_map(|r| {
                let name = r.name.to_ascii().trim_end_matches('.').to_ascii_lowercase();
                Some((name, r.data.ip_addr()?))
            })
            .collect();
        let mut out: Vec<Found> = Vec::with_capacity(records.len());
        for (target, port, priority) in records {
            let key = format!("{target}:{port}");
            if out.iter().any(|f| f.key == key) {
                continue;
            }
            let mut ips: BTreeSet<IpAddr> = glue
                .iter()
                .filter(|(n, _)| *n == target)
                .map(|(_, ip)| *ip)
                .collect();
            if ips.is_empty() {
                ips = self
                    .addresses(&format!("{target}."))
                    .await
                    .unwrap_or_default();
            }
            let before = known.iter().find(|f| f.key == key).map(|f| f.addr.ip());
            let ip = match before {
                // Still one of its addresses: stay on it.
                Some(ip) if ips.contains(&ip) => Some(ip),
                // Not looked up this time: the answer still names it.
                Some(ip) if ips.is_empty() => Some(ip),
                _ => ips.first().copied(),
            };
            if let Some(ip) = ip {
                out.push(Found {
                    key,
                    addr: SocketAddr::new(ip, port),
                    lower_priority: priority > lowest,
                });
            }
        }
        if out.is_empty() {
            return Err("no target could be resolved".to_owned());
        }
        Ok(out)
    }
}

/// A lookup error in a few words.
fn why(e: &NetError) -> String {
    match e {
        NetError::Dns(DnsError::NoRecordsFound(none)) => match none.response_code {
            ResponseCode::NXDomain => "NXDOMAIN".to_owned(),
            _ => "no records".to_owned(),
        },
        // SERVFAIL, REFUSED, ... as dig shows them.
        NetError::Dns(DnsError::ResponseCode(code)) => format!("{code:?}").to_uppercase(),
        NetError::Timeout => "timeout".to_owned(),
        other => other.to_string(),
    }
}
