//! Fuzz harness: the backends a DNS answer makes (`runtime::discover::dns`
//! and `DiscoverConfig::member`).
//!
//! Input: a DNS response as it comes off the wire, parsed by the
//! resolver's own parser (hickory-proto; what it refuses never reaches
//! pin-proxy). Its answer and additional sections are read as an SRV
//! lookup's (`srv_targets`); a target the additional section gives no
//! address for is looked up in the answer's own A and AAAA records
//! instead of a server (`srv_members`); each A or AAAA record is also
//! read as an address lookup's member (`addr_member`). Every member is
//! then named as a discover entry names it.
//!
//! Besides "no panic": targets are unique, each its record's name in lower
//! case with a printable key (distinct names, distinct keys); their
//! priority flag and glue match the records; members take an address of
//! their target, and keep it when the next answer still gives it, or gives
//! none; a member's name is `<entry>/<key>`, its key without whitespace or
//! control characters, its address the one found, its probe URL filled in
//! with it.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::OnceLock;

use hickory_resolver::proto::op::Message;
use hickory_resolver::proto::rr::{Name, RData};
use pin_proxy::config::{Config, DiscoverConfig, Found};
use pin_proxy::inspect::dns::{SrvTarget, addr_member, srv_members, srv_targets};

/// An SRV entry with a probe URL template, and an address entry of backups.
const CONFIG: &str = "pools:
  - name: p
    listen: 127.0.0.1:0
    health: { probe: blockbook }
    backends:
      - { name: srv, discover: \"_p2p._tcp.nodes.test\", probe_url: \"http://{ip}:9130/api/?port={port}\" }
      - { name: a, discover: \"nodes.test:9333\", backup: true, probe_url: \"https://u:p@{ip}/{port}\" }
";

/// A DNS name's longest text: 255 bytes on the wire, each shown as at
/// most 4 characters (`\ddd`).
const MAX_NAME: usize = 4 * 255;

/// The two discover entries of [`CONFIG`].
fn entries() -> &'static [DiscoverConfig] {
    static ENTRIES: OnceLock<Vec<DiscoverConfig>> = OnceLock::new();
    ENTRIES.get_or_init(|| {
        let config = Config::parse(CONFIG, Path::new("fuzz.yaml")).expect("the harness's config");
        config.pools[0].discover.clone()
    })
}

/// Read `data` as a DNS answer and check the members it makes.
pub fn run(data: &[u8]) {
    let Ok(message) = Message::from_vec(data) else {
        return;
    };
    let [srv, addrs] = entries() else {
        panic!("two discover entries");
    };
    // Each address record, as an address lookup's member.
    for ip in message.answers.iter().filter_map(|r| r.data.ip_addr()) {
        let found = addr_member(ip, 9333);
        assert_eq!(found.key.parse::<SocketAddr>(), Ok(found.addr));
        check_member(addrs, &found);
    }
    let records: Vec<_> = message
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(srv) if !srv.target.is_root() => Some(srv),
            _ => None,
        })
        .collect();
    let mut targets = match srv_targets(&message.answers, &message.additionals) {
        Ok(targets) => targets,
        Err(why) => {
            assert!(records.is_empty(), "{why} from {} records", records.len());
            return;
        }
    };
    let lowest = records.iter().map(|r| r.priority).min();
    for t in &targets {
        let matching: Vec<_> = records
            .iter()
            .filter(|r| r.target == t.name && r.port == t.port)
            .collect();
        // The first record of the target names it.
        let first = matching.first().expect("a target of no record");
        assert_eq!(t.lower_priority, Some(first.priority) > lowest);
        check_target(t, &message);
    }
    let keys: BTreeSet<String> = targets.iter().map(SrvTarget::key).collect();
    assert_eq!(keys.len(), targets.len(), "a target twice");
    // What the lookup of a target without glue finds: the answer's own
    // address records of that name.
    for t in targets.iter_mut().filter(|t| t.ips.is_empty()) {
        t.ips = address_records(&message, &t.name);
    }
    let Ok(members) = srv_members(&targets, &[]) else {
        assert!(targets.iter().all(|t| t.ips.is_empty()), "no member");
        return;
    };
    assert_eq!(
        members.len(),
        targets.iter().filter(|t| !t.ips.is_empty()).count()
    );
    for (found, t) in members
        .iter()
        .zip(targets.iter().filter(|t| !t.ips.is_empty()))
    {
        assert_eq!(found.key, t.key());
        assert_eq!(found.addr.port(), t.port);
        assert_eq!(found.lower_priority, t.lower_priority);
        assert!(t.ips.contains(&found.addr.ip()), "not one of its addresses");
        check_member(srv, found);
    }
    // The next answer the same: each stays on its address.
    assert_eq!(srv_members(&targets, &members).as_ref(), Ok(&members));
    // The next answer gives no address: each keeps its own.
    let mut unresolved = targets.clone();
    unresolved.iter_mut().for_each(|t| t.ips.clear());
    assert_eq!(srv_members(&unresolved, &members).as_ref(), Ok(&members));
}

/// A target is its record's name in lower case, shown as printable text
/// (its key); its glue is the additional section's addresses of that name.
fn check_target(t: &SrvTarget, message: &Message) {
    assert!(
        t.name.eq_case(&t.name.to_lowercase()),
        "{} not in lower case",
        t.name
    );
    let key = t.key();
    let text = key
        .strip_suffix(&format!(":{}", t.port))
        .expect("a key ends with its port");
    assert!(!text.is_empty() && text.len() <= MAX_NAME, "{text:?}");
    assert!(text.bytes().all(|b| b.is_ascii_graphic()), "{text:?}");
    assert_eq!(
        format!("{text}."),
        t.name.to_ascii(),
        "text of {:?}",
        t.name
    );
    let glue: BTreeSet<IpAddr> = message
        .additionals
        .iter()
        .filter(|r| r.name == t.name)
        .filter_map(|r| r.data.ip_addr())
        .collect();
    assert_eq!(t.ips, glue, "glue of {}", t.name);
}

/// The answer section's addresses of `name`.
fn address_records(message: &Message, name: &Name) -> BTreeSet<IpAddr> {
    message
        .answers
        .iter()
        .filter(|r| r.name == *name)
        .filter_map(|r| r.data.ip_addr())
        .collect()
}

/// The backend `entry` makes of `found`: named after both, at its address,
/// a backup when either says so, probed at its own address.
fn check_member(entry: &DiscoverConfig, found: &Found) {
    let b = entry.member(found);
    let key = b
        .name
        .strip_prefix(&format!("{}/", entry.name))
        .expect("named after its entry");
    assert_eq!(key, found.key);
    assert!(
        !key.is_empty() && !key.chars().any(|c| c.is_whitespace() || c.is_control()),
        "member name {:?}",
        b.name
    );
    assert_eq!(b.addr.parse::<SocketAddr>(), Ok(found.addr));
    assert_eq!(b.backup, entry.backup || found.lower_priority);
    assert_eq!(b.discovered_from.as_deref(), Some(entry.name.as_str()));
    let url = b.probe_url.expect("a probe URL filled in");
    let host = url.0.host_str().expect("a host").to_owned();
    let ip = host.trim_start_matches('[').trim_end_matches(']');
    assert_eq!(ip.parse::<IpAddr>(), Ok(found.addr.ip()), "probe URL {url}");
}
