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
use hickory_resolver::proto::rr::rdata::SRV;
use hickory_resolver::proto::rr::{IntoName, Name, RData, Record};

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
                Ok(ips.into_iter().map(|ip| addr_member(ip, *port)).collect())
            }
            DiscoverQuery::Srv(name) => self.srv(name, known).await,
        }
    }

    /// The addresses of `host`, sorted and without duplicates.
    async fn addresses(&self, host: impl IntoName) -> Result<BTreeSet<IpAddr>, String> {
        let answer = self.resolver.lookup_ip(host).await.map_err(|e| why(&e))?;
        let ips: BTreeSet<IpAddr> = answer.iter().collect();
        if ips.is_empty() {
            return Err("no records".to_owned());
        }
        Ok(ips)
    }

    async fn srv(&self, name: &str, known: &[Found]) -> Result<Vec<Found>, String> {
        let answer = self.resolver.srv_lookup(name).await.map_err(|e| why(&e))?;
        let mut targets = srv_targets(answer.answers(), answer.additionals())?;
        for t in targets.iter_mut().filter(|t| t.ips.is_empty()) {
            // The name itself, not its text: text escapes some bytes in a
            // way that does not parse back to the same name.
            t.ips = self.addresses(t.name.clone()).await.unwrap_or_default();
        }
        srv_members(&targets, known)
    }
}

/// The member an A or AAAA answer's address `ip` makes, on `port`.
pub fn addr_member(ip: IpAddr, port: u16) -> Found {
    let addr = SocketAddr::new(ip, port);
    Found {
        key: addr.to_string(),
        addr,
        lower_priority: false,
    }
}

/// One target of an SRV answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvTarget {
    /// Its name, as the record gives it (lower case).
    pub name: Name,
    /// The port it serves on.
    pub port: u16,
    /// Its record's priority is above the answer's lowest.
    pub lower_priority: bool,
    /// Its addresses: what the answer's additional section gives, until
    /// they are looked up.
    pub ips: BTreeSet<IpAddr>,
}

impl SrvTarget {
    /// The member's key: `target:port`, the target as text.
    pub fn key(&self) -> String {
        format!("{}:{}", text(&self.name), self.port)
    }
}

/// The targets an SRV answer (its `answers` and `additionals` sections)
/// names, in record order, each `target:port` once.
///
/// # Errors
/// No record names a target.
pub fn srv_targets(answers: &[Record], additionals: &[Record]) -> Result<Vec<SrvTarget>, String> {
    // `.` means "no service here" (RFC 2782).
    let records: Vec<&SRV> = answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(srv) => Some(srv),
            _ => None,
        })
        .filter(|srv| !srv.target.is_root())
        .collect();
    let Some(lowest) = records.iter().map(|r| r.priority).min() else {
        return Err("no records".to_owned());
    };
    let mut out: Vec<SrvTarget> = Vec::with_capacity(records.len());
    for srv in records {
        // Names compare without regard to case.
        if out
            .iter()
            .any(|t| t.name == srv.target && t.port == srv.port)
        {
            continue;
        }
        // Addresses the answer's additional section already gives.
        let ips = additionals
            .iter()
            .filter(|r| r.name == srv.target)
            .filter_map(|r| r.data.ip_addr())
            .collect();
        out.push(SrvTarget {
            name: srv.target.to_lowercase(),
            port: srv.port,
            lower_priority: srv.priority > lowest,
            ips,
        });
    }
    Ok(out)
}

/// The members SRV `targets` make, their addresses looked up: a member
/// in `known` (the entry's members so far) stays on its address while it
/// is still one of its target's, and keeps it when none was found this
/// time (the answer still names it); a new one takes the first address.
/// A target with no address is left out.
///
/// # Errors
/// No target has an address.
pub fn srv_members(targets: &[SrvTarget], known: &[Found]) -> Result<Vec<Found>, String> {
    let mut out: Vec<Found> = Vec::with_capacity(targets.len());
    for t in targets {
        let key = t.key();
        let before = known.iter().find(|f| f.key == key).map(|f| f.addr.ip());
        let ip = match before {
            // Still one of its addresses: stay on it.
            Some(ip) if t.ips.contains(&ip) => Some(ip),
            // Not looked up this time: the answer still names it.
            Some(ip) if t.ips.is_empty() => Some(ip),
            _ => t.ips.first().copied(),
        };
        if let Some(ip) = ip {
            out.push(Found {
                key,
                addr: SocketAddr::new(ip, t.port),
                lower_priority: t.lower_priority,
            });
        }
    }
    if out.is_empty() {
        return Err("no target could be resolved".to_owned());
    }
    Ok(out)
}

/// A name as text: bytes other than letters, digits, `-` and `_` escaped,
/// without the root's dot.
fn text(name: &Name) -> String {
    let text = name.to_ascii();
    match text.strip_suffix('.') {
        Some(relative) => relative.to_owned(),
        None => text,
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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::{Arc, Mutex};

    use hickory_resolver::proto::op::{Message, OpCode, ResponseCode};
    use hickory_resolver::proto::rr::RecordType;
    use hickory_resolver::proto::rr::rdata::A;
    use tokio::net::UdpSocket;

    use super::*;

    /// A DNS server on loopback: an SRV answer for `_p2p._tcp.nodes.test`
    /// naming `target` (no addresses with it), and `ip` as the A record of
    /// exactly `target`; NXDOMAIN for any other name. Each name asked goes
    /// to `asked`.
    async fn server(target: Name, ip: Ipv4Addr, asked: Arc<Mutex<Vec<Name>>>) -> SocketAddr {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let srv_name = Name::from_ascii("_p2p._tcp.nodes.test.").unwrap();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let (n, from) = socket.recv_from(&mut buf).await.unwrap();
                let query = Message::from_vec(&buf[..n]).unwrap();
                let q = query.queries[0].clone();
                asked.lock().unwrap().push(q.name().clone());
                let mut reply = Message::response(query.metadata.id, OpCode::Query);
                reply.metadata.recursion_desired = query.metadata.recursion_desired;
                reply.queries = query.queries.clone();
                let record = match (q.query_type(), q.name()) {
                    (RecordType::SRV, name) if *name == srv_name => Some(Record::from_rdata(
                        name.clone(),
                        0,
                        RData::SRV(SRV::new(0, 0, 9333, target.clone())),
                    )),
                    (RecordType::A, name) if name.eq_case(&target) => {
                        Some(Record::from_rdata(name.clone(), 0, RData::A(A(ip))))
                    }
                    (_, name) if name.eq_case(&target) => None,
                    _ => {
                        reply.metadata.response_code = ResponseCode::NXDomain;
                        None
                    }
                };
                reply.answers.extend(record);
                let bytes = reply.to_vec().unwrap();
                socket.send_to(&bytes, from).await.unwrap();
            }
        });
        addr
    }

    /// A target whose name has a byte its text escapes (here a space;
    /// `\040`, which parses back as `(`) is looked up by the name the
    /// answer gives, and found.
    #[tokio::test]
    async fn an_srv_target_is_looked_up_by_its_own_name() {
        let labels: [&[u8]; 3] = [b"sp ace", b"nodes", b"test"];
        let target = Name::from_labels(labels).unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let ip = Ipv4Addr::new(127, 0, 0, 9);
        let addr = server(target.clone(), ip, asked.clone()).await;
        let dns = Dns::new(Some(addr), Duration::from_secs(1)).unwrap();
        let query = DiscoverQuery::Srv("_p2p._tcp.nodes.test".into());
        let found = dns.lookup(&query, &[]).await;
        let asked = asked.lock().unwrap().clone();
        assert_eq!(
            found,
            Ok(vec![Found {
                key: "sp\\040ace.nodes.test:9333".into(),
                addr: SocketAddr::new(ip.into(), 9333),
                lower_priority: false,
            }]),
            "names asked: {asked:?}"
        );
    }
}
