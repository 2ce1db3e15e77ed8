//! Every key config.yaml accepts, one line on each with its built-in
//! default: the CONFIGURATION section of `pin-proxy man`. The defaults are
//! the parser's own constants, the value lists are read from its serde
//! enums, and the tests hold the key list to its serde structs, so the page
//! cannot name a key the parser refuses or miss one it accepts.

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::raw::{RawLogFormat, RawProbe, RawStallRule};
use super::{
    CONNECT_TIMEOUT, DISCOVERY_HOLD, DISCOVERY_INTERVAL, DRAIN, DRAIN_SPREAD, FALL,
    HEALTH_INTERVAL, HEALTH_TIMEOUT, KEEPALIVE_COUNT, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL,
    LOG_LEVEL, MAX_CONNECTIONS, MAX_LAG_BLOCKS, MIN_IMBALANCE, NETWORK, PROXY_PROTOCOL_TIMEOUT,
    QUARANTINE_BASE, QUARANTINE_FAILURES, QUARANTINE_MAX, REBALANCE_INTERVAL, REFUSED_CLIENTS,
    RISE, SOURCE, UPGRADE_TIMEOUT,
};
use crate::config::span;
use crate::config::{Network, Services};

/// The keys found at one place of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGroup {
    /// Where they sit: `top level`, `defaults and each pool`...
    pub place: &'static str,
    /// Each key's path within that place (`health.probe`), and one line
    /// on what it does, its values and its default.
    pub keys: Vec<(&'static str, String)>,
}

/// Every key config.yaml accepts, by the place it sits in.
pub fn keys() -> Vec<KeyGroup> {
    vec![
        KeyGroup {
            place: "top level",
            keys: top(),
        },
        KeyGroup {
            place: "defaults and each pool (a pool's own value wins, key by key)",
            keys: settings(),
        },
        KeyGroup {
            place: "each pool only",
            keys: pool(),
        },
        KeyGroup {
            place: "each backend in long form ({ name: ..., addr: ... })",
            keys: backend(),
        },
    ]
}

fn top() -> Vec<(&'static str, String)> {
    let formats = names::<RawLogFormat>();
    vec![
        ("admin.listen", "address of the admin endpoint (/, /status, /metrics, /healthz and the POST commands); none when absent".into()),
        ("admin.allow", "client CIDRs allowed to use the admin endpoint (default: loopback only)".into()),
        ("admin.hosts", "names the admin endpoint answers to in Host, besides its own address, localhost and loopback addresses (default: none)".into()),
        ("log.level", format!("tracing EnvFilter directive; RUST_LOG overrides it (default {LOG_LEVEL})")),
        ("log.format", format!("{formats} (default json)")),
        ("log.file", "file to log to, rotated daily (UTC); stdout when absent".into()),
        ("upgrade_timeout", format!("how long a live upgrade waits for the new process to report ready (default {})", span(UPGRADE_TIMEOUT))),
        ("state_file", "where quarantine windows and strikes are kept across restarts; nothing kept when absent".into()),
        ("pid_file", "where the serving process writes its pid (rewritten by the new process of a live upgrade); none when absent".into()),
        ("defaults", "settings for every pool: the keys of the next list".into()),
        ("pools", "the pools (required): a list of mappings with the keys below".into()),
    ]
}

fn settings() -> Vec<(&'static str, String)> {
    let s = |d| span(d).to_string();
    vec![
        ("allow", "client CIDR allow-list; anyone may connect when absent".into()),
        ("proxy_protocol.from", "CIDRs of the load balancers whose connections must begin with a PROXY protocol header (v1 or v2), whose address is then the client's; none when absent: no header is read".into()),
        ("proxy_protocol.timeout", format!("how long such a sender has to send the whole header, else the connection is closed (default {})", s(PROXY_PROTOCOL_TIMEOUT))),
        ("source", format!("the address backend connections are made from: proxy (the kernel chooses), client (the client's own IP; needs CAP_NET_ADMIN or CAP_NET_RAW) or an IP address of this host (default {SOURCE})")),
        ("connect_timeout", format!("budget of one connect to a backend, name resolution included (default {})", s(CONNECT_TIMEOUT))),
        ("keepalive.idle", format!("TCP keepalive idle time, both legs (default {})", s(KEEPALIVE_IDLE))),
        ("keepalive.interval", format!("time between keepalive probes (default {})", s(KEEPALIVE_INTERVAL))),
        ("keepalive.count", format!("unanswered keepalive probes before a connection is dropped; idle + interval x count is also TCP_USER_TIMEOUT (default {KEEPALIVE_COUNT})")),
        ("idle_timeout", "close a splice with no byte either way for this long; 0s = never (default 0s)".into()),
        ("max_connections", format!("client connections of the pool at once; more are closed at once, rejected (default {MAX_CONNECTIONS})")),
        ("max_connections_per_source", "client connections at once from one address (IPv4 /32, IPv6 /64); 0 = no limit (default 0)".into()),
        ("rebalance.interval", format!("how often one connection may move to a less used backend; 0s = never (default {})", s(REBALANCE_INTERVAL))),
        ("rebalance.min_imbalance", format!("connections a backend must trail the busiest one by before a move (default {MIN_IMBALANCE})")),
        ("quarantine.base", format!("first quarantine window, doubled per quarantine since the last success (default {})", s(QUARANTINE_BASE))),
        ("quarantine.max", format!("longest quarantine window (default {})", s(QUARANTINE_MAX))),
        ("quarantine.failures", format!("consecutive failed connects that quarantine a backend (default {QUARANTINE_FAILURES})")),
        ("quarantine.refused_clients", format!("client addresses remembered as refused by a node, and steered to the other backends (default {REFUSED_CLIENTS})")),
        ("health.probe", format!("{} (default connect)", names::<RawProbe>())),
        ("health.interval", format!("time between probes of a backend (default {})", s(HEALTH_INTERVAL))),
        ("health.timeout", format!("budget of one probe (default {})", s(HEALTH_TIMEOUT))),
        ("health.max_lag_blocks", format!("blocks a backend may trail the pool's reference height before it is lagging (default {MAX_LAG_BLOCKS})")),
        ("health.network", format!("the chain a bitcoin-p2p or electrum probe checks: {} (default {})", names::<Network>(), NETWORK.name())),
        ("health.magic", "a custom network's 4 message-start bytes in wire order, as 8 hex digits".into()),
        ("health.fall", format!("consecutive bad probe verdicts before a backend is acted on (default {FALL})")),
        ("health.rise", format!("consecutive passed probes before a quarantined backend returns (default {RISE})")),
        ("health.drain", format!("close a taken-out backend's connections, never the last usable one's (default {DRAIN})")),
        ("health.drain_spread", format!("those closes spread over this window, oldest first; 0s = at once (default {})", s(DRAIN_SPREAD))),
        ("health.stall_timeout", "a backend whose connections all received nothing this long, while another backend's did, is stalled; 0s = off (default 0s)".into()),
        ("health.stall_rule", format!("{}: any silence counts, or only silence that owes the client an answer (default push)", names::<RawStallRule>())),
        ("health.require_services", format!("service bits a bitcoin-p2p backend must announce to be given clients: names ({}), the preset {} ({}), or a 0x hex mask; a list means all of them (default: none)", Services::known_names().collect::<Vec<_>>().join(", "), Services::MWEBD_PRESET, Services::MWEBD)),
        ("health.min_protocol_version", "lowest protocol version a bitcoin-p2p backend may announce to be given clients (default: any)".into()),
        ("discovery.interval", format!("time between DNS lookups of discover entries (default {})", s(DISCOVERY_INTERVAL))),
        ("discovery.hold", format!("how long a member missing from the answers is kept (default {})", s(DISCOVERY_HOLD))),
        ("discovery.resolver", "DNS server (ip:port) to ask; the system's resolvers when absent".into()),
    ]
}

fn pool() -> Vec<(&'static str, String)> {
    vec![
        ("name", "[a-z0-9_-]+, unique (required)".into()),
        (
            "listen",
            "address, or list of addresses, clients connect to (required)".into(),
        ),
        (
            "backends",
            "the backends (required): host:port each, or a mapping with the keys below".into(),
        ),
    ]
}

fn backend() -> Vec<(&'static str, String)> {
    vec![
        ("name", "the name in logs, /status and the admin commands (default: its addr or discover)".into()),
        ("addr", "host:port; a host name is resolved again at each connect".into()),
        ("discover", "instead of addr: host:port (one backend per A or AAAA record) or an SRV name (one per target)".into()),
        ("backup", "a candidate only while no primary backend is usable (default false)".into()),
        ("probe_url", "URL the blockbook and http probes ask instead of the backend's own address; userinfo is sent as basic auth".into()),
    ]
}

/// The values a serde enum of config.yaml accepts: `json | text`.
fn names<'de, T: Deserialize<'de>>() -> String {
    Shape::of::<T>().join(" | ")
}

/// What a derived `Deserialize` asks its deserializer for: a struct's field
/// names or an enum's variant names, as written in config.yaml.
pub(super) struct Shape;

impl Shape {
    /// The field or variant names of `T` (empty for any other shape).
    pub(super) fn of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
        let mut names = None;
        // Always an error: `Ask` only records what it was asked for.
        let _ = T::deserialize(Ask(&mut names));
        names.unwrap_or(&[])
    }
}

struct Ask<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> Deserializer<'de> for Ask<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("only a shape is read"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        self.deserialize_any(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(variants);
        self.deserialize_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::raw::{
        RawAdmin, RawDiscovery, RawFile, RawHealth, RawKeepalive, RawLog, RawPool,
        RawProxyProtocol, RawQuarantine, RawRebalance, RawSettings,
    };
    use super::super::values::LongBackend;
    use super::*;

    /// The keys of a struct's fields, the nested mappings named in
    /// `nested` spelled out as `outer.inner`.
    fn paths(fields: &[&str], nested: &[(&str, &[&'static str])]) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for field in fields {
            match nested.iter().find(|(name, _)| name == field) {
                Some((name, inner)) => out.extend(inner.iter().map(|i| format!("{name}.{i}"))),
                None => {
                    out.insert((*field).to_owned());
                }
            }
        }
        out
    }

    fn documented(place: &str) -> BTreeSet<String> {
        let group = keys().into_iter().find(|g| g.place.starts_with(place));
        let group = group.unwrap_or_else(|| panic!("no group {place}"));
        group.keys.iter().map(|(k, _)| (*k).to_owned()).collect()
    }

    /// The mappings inside the settings; a new one must be added here,
    /// else its whole name stands as one key and misses the documented
    /// `outer.inner` ones.
    fn settings_nested() -> Vec<(&'static str, &'static [&'static str])> {
        vec![
            ("proxy_protocol", Shape::of::<RawProxyProtocol>()),
            ("keepalive", Shape::of::<RawKeepalive>()),
            ("rebalance", Shape::of::<RawRebalance>()),
            ("quarantine", Shape::of::<RawQuarantine>()),
            ("health", Shape::of::<RawHealth>()),
            ("discovery", Shape::of::<RawDiscovery>()),
        ]
    }

    #[test]
    fn the_top_level_keys_are_the_parsers() {
        let nested = [
            ("admin", Shape::of::<RawAdmin>()),
            ("log", Shape::of::<RawLog>()),
        ];
        let parsed = paths(Shape::of::<RawFile>(), &nested);
        assert!(parsed.contains("admin.listen") && parsed.contains("pools"));
        assert_eq!(documented("top level"), parsed);
    }

    #[test]
    fn the_settings_keys_are_the_parsers_for_defaults_and_pools() {
        let parsed = paths(Shape::of::<RawSettings>(), &settings_nested());
        assert!(parsed.contains("health.probe") && parsed.len() > 20);
        assert_eq!(documented("defaults and each pool"), parsed);
        // A pool takes every settings key, and its own three.
        let pool = paths(Shape::of::<RawPool>(), &settings_nested());
        let own: BTreeSet<String> = pool.difference(&parsed).cloned().collect();
        assert_eq!(pool.intersection(&parsed).count(), parsed.len());
        assert_eq!(documented("each pool only"), own);
    }

    #[test]
    fn the_backend_keys_are_the_parsers() {
        let parsed = paths(Shape::of::<LongBackend>(), &[]);
        assert!(parsed.contains("addr"));
        assert_eq!(documented("each backend"), parsed);
    }

    #[test]
    fn value_lists_come_from_the_parsers_enums() {
        assert_eq!(names::<RawLogFormat>(), "json | text");
        let probes = names::<RawProbe>();
        assert!(probes.starts_with("connect | bitcoin-p2p"), "{probes}");
        assert!(names::<Network>().contains("litecoin-regtest"));
        let line = |key| {
            keys()
                .into_iter()
                .flat_map(|g| g.keys)
                .find(|(k, _)| *k == key)
                .map(|(_, about)| about)
                .unwrap()
        };
        assert!(line("health.probe").contains("electrum-tls"));
        assert!(line("health.interval").ends_with("(default 30s)"));
        assert!(line("quarantine.base").ends_with("(default 5m)"));
        assert!(line("proxy_protocol.timeout").ends_with("(default 3s)"));
        assert!(line("source").ends_with("(default proxy)"));
    }
}
