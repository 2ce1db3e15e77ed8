//! The serde shapes of config.yaml (every key optional where a default
//! exists) and the key-by-key merge of `defaults` into each pool.

use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;

use serde::Deserialize;

use super::discover::ResolverAddr;
use super::hosts::AdminHost;
use super::identity::{SourceValue, TrustedCidr};
use super::require::RequiredServices;
use super::values::{
    Cidr, Dur, KeepaliveCount, KeepaliveSecs, ListenAddr, MagicHex, OneOrMany, PoolName, RawBackend,
};

pub(super) type AnyDur = Dur<false>;
pub(super) type PosDur = Dur<true>;

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping of `admin`, `log`, `upgrade_timeout`, `state_file`, `pid_file`, `defaults` and `pools`"
)]
pub(super) struct RawFile {
    pub(super) admin: Option<RawAdmin>,
    pub(super) upgrade_timeout: Option<PosDur>,
    pub(super) log: Option<RawLog>,
    pub(super) state_file: Option<PathBuf>,
    pub(super) pid_file: Option<PathBuf>,
    pub(super) defaults: Option<RawSettings>,
    pub(super) pools: Vec<RawPool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "an `admin` mapping")]
pub(super) struct RawAdmin {
    pub(super) listen: Option<ListenAddr>,
    pub(super) allow: Option<OneOrMany<Cidr>>,
    pub(super) hosts: Option<OneOrMany<AdminHost>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a `log` mapping")]
pub(super) struct RawLog {
    pub(super) level: Option<String>,
    pub(super) format: Option<RawLogFormat>,
    pub(super) file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawLogFormat {
    Json,
    Text,
}

/// Everything `defaults` may set; a pool may set each key too (see [`RawPool`]).
/// `allow` is accepted here as well, so one allow-list can cover every pool.
#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, expecting = "a `defaults` mapping")]
pub(super) struct RawSettings {
    pub(super) allow: Option<OneOrMany<Cidr>>,
    pub(super) proxy_protocol: Option<RawProxyProtocol>,
    pub(super) source: Option<SourceValue>,
    pub(super) connect_timeout: Option<PosDur>,
    pub(super) keepalive: Option<RawKeepalive>,
    pub(super) idle_timeout: Option<AnyDur>,
    pub(super) max_connections: Option<NonZeroUsize>,
    pub(super) max_connections_per_source: Option<usize>,
    pub(super) rebalance: Option<RawRebalance>,
    pub(super) quarantine: Option<RawQuarantine>,
    pub(super) health: Option<RawHealth>,
    pub(super) discovery: Option<RawDiscovery>,
}

// The settings keys are repeated rather than `#[serde(flatten)]`ed:
// flatten does not work with `deny_unknown_fields` and loses line numbers.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a pool mapping with `name`, `listen` and `backends`"
)]
pub(super) struct RawPool {
    pub(super) name: PoolName,
    pub(super) listen: OneOrMany<ListenAddr>,
    pub(super) backends: Vec<RawBackend>,
    pub(super) allow: Option<OneOrMany<Cidr>>,
    pub(super) proxy_protocol: Option<RawProxyProtocol>,
    pub(super) source: Option<SourceValue>,
    pub(super) connect_timeout: Option<PosDur>,
    pub(super) keepalive: Option<RawKeepalive>,
    pub(super) idle_timeout: Option<AnyDur>,
    pub(super) max_connections: Option<NonZeroUsize>,
    pub(super) max_connections_per_source: Option<usize>,
    pub(super) rebalance: Option<RawRebalance>,
    pub(super) quarantine: Option<RawQuarantine>,
    pub(super) health: Option<RawHealth>,
    pub(super) discovery: Option<RawDiscovery>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, expecting = "a `proxy_protocol` mapping")]
pub(super) struct RawProxyProtocol {
    pub(super) from: Option<OneOrMany<TrustedCidr>>,
    pub(super) timeout: Option<PosDur>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, expecting = "a `discovery` mapping")]
pub(super) struct RawDiscovery {
    pub(super) interval: Option<PosDur>,
    pub(super) hold: Option<AnyDur>,
    pub(super) resolver: Option<ResolverAddr>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, expecting = "a `keepalive` mapping")]
pub(super) struct RawKeepalive {
    pub(super) idle: Option<KeepaliveSecs>,
    pub(super) interval: Option<KeepaliveSecs>,
    pub(super) count: Option<KeepaliveCount>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, expecting = "a `rebalance` mapping")]
pub(super) struct RawRebalance {
    pub(super) interval: Option<AnyDur>,
    pub(super) min_imbalance: Option<NonZeroUsize>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, expecting = "a `quarantine` mapping")]
pub(super) struct RawQuarantine {
    pub(super) base: Option<PosDur>,
    pub(super) max: Option<PosDur>,
    pub(super) failures: Option<NonZeroU32>,
    pub(super) refused_clients: Option<NonZeroUsize>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, expecting = "a `health` mapping")]
pub(super) struct RawHealth {
    pub(super) probe: Option<RawProbe>,
    pub(super) interval: Option<PosDur>,
    pub(super) timeout: Option<PosDur>,
    pub(super) max_lag_blocks: Option<u64>,
    pub(super) network: Option<crate::config::Network>,
    pub(super) magic: Option<MagicHex>,
    pub(super) fall: Option<NonZeroU32>,
    pub(super) rise: Option<NonZeroU32>,
    pub(super) drain: Option<bool>,
    pub(super) drain_spread: Option<AnyDur>,
    pub(super) stall_timeout: Option<AnyDur>,
    pub(super) stall_rule: Option<RawStallRule>,
    pub(super) require_services: Option<RequiredServices>,
    pub(super) min_protocol_version: Option<u32>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
pub(super) enum RawStallRule {
    Push,
    Request,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
pub(super) enum RawProbe {
    Connect,
    BitcoinP2p,
    Blockbook,
    Http,
    Electrum,
    ElectrumTls,
}

/// Key-by-key merge: `self` (the pool) wins, `fallback` (defaults) fills gaps.
pub(super) trait Merge: Sized {
    fn or(self, fallback: Self) -> Self;
}

pub(super) fn merge<T: Merge>(own: Option<T>, fallback: Option<T>) -> Option<T> {
    match (own, fallback) {
        (Some(own), Some(fallback)) => Some(own.or(fallback)),
        (own, fallback) => own.or(fallback),
    }
}

impl Merge for RawSettings {
    fn or(self, d: Self) -> Self {
        RawSettings {
            allow: self.allow.or(d.allow),
            proxy_protocol: merge(self.proxy_protocol, d.proxy_protocol),
            source: self.source.or(d.source),
            connect_timeout: self.connect_timeout.or(d.connect_timeout),
            keepalive: merge(self.keepalive, d.keepalive),
            idle_timeout: self.idle_timeout.or(d.idle_timeout),
            max_connections: self.max_connections.or(d.max_connections),
            max_connections_per_source: self
                .max_connections_per_source
                .or(d.max_connections_per_source),
            rebalance: merge(self.rebalance, d.rebalance),
            quarantine: merge(self.quarantine, d.quarantine),
            health: merge(self.health, d.health),
            discovery: merge(self.discovery, d.discovery),
        }
    }
}

impl Merge for RawProxyProtocol {
    fn or(self, d: Self) -> Self {
        RawProxyProtocol {
            from: self.from.or(d.from),
            timeout: self.timeout.or(d.timeout),
        }
    }
}

impl Merge for RawDiscovery {
    fn or(self, d: Self) -> Self {
        RawDiscovery {
            interval: self.interval.or(d.interval),
            hold: self.hold.or(d.hold),
            resolver: self.resolver.or(d.resolver),
        }
    }
}

impl Merge for RawKeepalive {
    fn or(self, d: Self) -> Self {
        RawKeepalive {
            idle: self.idle.or(d.idle),
            interval: self.interval.or(d.interval),
            count: self.count.or(d.count),
        }
    }
}

impl Merge for RawRebalance {
    fn or(self, d: Self) -> Self {
        RawRebalance {
            interval: self.interval.or(d.interval),
            min_imbalance: self.min_imbalance.or(d.min_imbalance),
        }
    }
}

impl Merge for RawQuarantine {
    fn or(self, d: Self) -> Self {
        RawQuarantine {
            base: self.base.or(d.base),
            max: self.max.or(d.max),
            failures: self.failures.or(d.failures),
            refused_clients: self.refused_clients.or(d.refused_clients),
        }
    }
}

impl Merge for RawHealth {
    fn or(self, d: Self) -> Self {
        // `network` and `magic` name one thing: the layer that sets either
        // decides both, so a pool's `network: bitcoin` is not paired with a
        // `magic` override written for the defaults' network.
        let (network, magic) = if self.network.is_some() || self.magic.is_some() {
            (self.network, self.magic)
        } else {
            (d.network, d.magic)
        };
        RawHealth {
            probe: self.probe.or(d.probe),
            interval: self.interval.or(d.interval),
            timeout: self.timeout.or(d.timeout),
            max_lag_blocks: self.max_lag_blocks.or(d.max_lag_blocks),
            network,
            magic,
            fall: self.fall.or(d.fall),
            rise: self.rise.or(d.rise),
            drain: self.drain.or(d.drain),
            drain_spread: self.drain_spread.or(d.drain_spread),
            stall_timeout: self.stall_timeout.or(d.stall_timeout),
            stall_rule: self.stall_rule.or(d.stall_rule),
            require_services: self.require_services.or(d.require_services),
            min_protocol_version: self.min_protocol_version.or(d.min_protocol_version),
        }
    }
}
