//! Turns config.yaml into a [`Config`]: deserialize into the raw shapes
//! ([`raw`], whose single values check themselves in [`values`]), merge
//! `defaults` into each pool, fill the built-in defaults, and check the rules
//! that span several values (duplicates, shared listeners, max >= base).

mod backends;
mod compat;
mod discover;
mod error;
mod hosts;
mod identity;
mod keys;
mod locate;
mod own;
mod raw;
mod require;
#[cfg(test)]
mod tests;
mod values;
mod writable;
mod zone;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::Path;
use std::time::Duration;

use ipnet::IpNet;

use backends::build_backends;
pub(crate) use backends::default_probe_url;
pub use error::ConfigError;
use error::{Invalid, invalid};
pub use keys::{KeyGroup, keys};
use raw::{
    Merge, RawDiscovery, RawFile, RawHealth, RawLog, RawLogFormat, RawPool, RawProbe,
    RawQuarantine, RawSettings, RawStallRule,
};
pub(super) use writable::open_to_others;

use super::{
    AdminConfig, BackendSource, Config, DiscoveryConfig, HealthConfig, KeepaliveConfig, LogConfig,
    LogFormat, Network, PoolConfig, ProbeKind, QuarantineConfig, RebalanceConfig, Services,
    StallRule,
};

// Built-in defaults: the values of the contract's example config.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_COUNT: u32 = 6;
const MAX_CONNECTIONS: usize = 1024;
const REBALANCE_INTERVAL: Duration = Duration::from_secs(60);
const MIN_IMBALANCE: usize = 2;
const QUARANTINE_BASE: Duration = Duration::from_secs(5 * 60);
const QUARANTINE_MAX: Duration = Duration::from_secs(30 * 60);
const QUARANTINE_FAILURES: u32 = 3;
const REFUSED_CLIENTS: usize = 1024;
const PROXY_PROTOCOL_TIMEOUT: Duration = Duration::from_secs(3);
const SOURCE: BackendSource = BackendSource::Proxy;
const HEALTH_INTERVAL: Duration = Duration::from_secs(30);
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_LAG_BLOCKS: u64 = 3;
const NETWORK: Network = Network::Litecoin;
const FALL: u32 = 2;
const RISE: u32 = 1;
const DRAIN: bool = true;
const DRAIN_SPREAD: Duration = Duration::from_secs(10);
const DISCOVERY_INTERVAL: Duration = Duration::from_secs(30);
const DISCOVERY_HOLD: Duration = Duration::from_secs(5 * 60);
const LOG_LEVEL: &str = "info";
/// A live upgrade's default wait for the new process.
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(30);

/// Parse and validate config text; `file` only names the file in errors.
pub(super) fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
    // The YAML scanner's cost grows much faster than the depth of nested
    // flow collections (seconds at 30,000 levels, days at the size limit).
    if let Some(at) = too_deep(text, MAX_FLOW_DEPTH) {
        return Err(ConfigError::too_deep(file, MAX_FLOW_DEPTH, at));
    }
    let read = |text: &str| -> Result<Config, ConfigError> {
        let de = serde_yaml::Deserializer::from_str(text);
        let raw: RawFile = serde_path_to_error::deserialize(de)
            .map_err(|e| ConfigError::from_serde(file, text, &e))?;
        build(raw).map_err(|inv| ConfigError::from_invalid(file, text, inv))
    };
    match read(text) {
        // Columns of a later error on a repaired line may be off by the added quotes.
        Err(first) => compat::quote_flow_ipv6(text).map_or(Err(first), |repaired| read(&repaired)),
        ok => ok,
    }
}

/// The longest keepalive budget (`TCP_USER_TIMEOUT`, milliseconds in an
/// `int`).
const MAX_USER_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// Deepest nesting of `[` and `{` accepted: a config needs three or four.
const MAX_FLOW_DEPTH: usize = 256;

/// Where (line, column, from 1) `[` and `{` first nest deeper than `limit`,
/// counting every bracket, quoted or not: no real file comes near, and an
/// over-count cannot be hidden from it.
fn too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let mut depth = 0usize;
    for (row, line) in text.lines().enumerate() {
        for (col, c) in line.chars().enumerate() {
            match c {
                '[' | '{' => {
                    depth += 1;
                    if depth > limit {
                        return Some((row + 1, col + 1));
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    None
}

/// The rules that need the host rather than the text alone: a backend that
/// is one of the instance's own listeners (names resolved now), and a
/// `log.file` that can be written.
pub(super) fn check_host(config: &Config, text: &str, file: &Path) -> Result<(), ConfigError> {
    config
        .log
        .file
        .as_deref()
        .map_or(Ok(()), writable::check_log)
        .and_then(|()| own::check_host(config, text))
        .map_err(|inv| ConfigError::from_invalid(file, text, inv))
}

/// Why `state_file` could not be written here, if it could not: a warning,
/// not an error, since a state file never stops the start (the proxy runs
/// and keeps no state until it can write there).
pub(super) fn state_file_warning(config: &Config) -> Option<String> {
    let file = config.state_file.as_deref()?;
    let problem = if file.is_dir() {
        format!("{} is a directory; name a file in it", file.display())
    } else {
        writable::check(file, "state_file", "state").err()?.message
    };
    Some(format!(
        "state_file: {problem}; quarantine windows and strikes will not survive a restart"
    ))
}

fn build(raw: RawFile) -> Result<Config, Invalid> {
    let upgrade_timeout = raw.upgrade_timeout;
    let log = raw.log.unwrap_or(RawLog {
        level: None,
        format: None,
        file: None,
    });
    let level = log.level.unwrap_or_else(|| LOG_LEVEL.to_owned());
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&level) {
        return invalid(
            "log.level",
            format!("`{level}` is not a tracing filter: {e}"),
        );
    }
    if log.file.as_ref().is_some_and(|f| f.as_os_str().is_empty()) {
        return invalid(
            "log.file",
            "must not be empty; leave it out to log to stdout",
        );
    }
    let format = match log.format {
        Some(RawLogFormat::Text) => LogFormat::Text,
        Some(RawLogFormat::Json) | None => LogFormat::Json,
    };
    let log = LogConfig {
        level,
        format,
        file: log.file,
    };

    let state_file = raw.state_file;
    if let Some(f) = &state_file {
        if f.as_os_str().is_empty() {
            return invalid(
                "state_file",
                "must not be empty; leave it out to keep no state",
            );
        }
        // The atomic save renames a new file over it: it names a file.
        if f.file_name().is_none() {
            return invalid(
                "state_file",
                format!("{} names no file; name a file in a directory", f.display()),
            );
        }
    }
    let pid_file = raw.pid_file;
    if let Some(f) = &pid_file {
        // Written as the state file is: a new file renamed over it.
        if f.as_os_str().is_empty() || f.file_name().is_none() {
            return invalid(
                "pid_file",
                format!(
                    "{:?} names no file; name a file in a directory",
                    f.display().to_string()
                ),
            );
        }
    }

    let admin = raw.admin.and_then(|a| {
        let allow = a
            .allow
            .map_or_else(loopback, |l| l.items.iter().map(|c| c.0).collect());
        let hosts = a
            .hosts
            .map_or_else(Vec::new, |l| l.items.into_iter().map(|h| h.0).collect());
        a.listen.map(|l| AdminConfig {
            listen: l.0,
            allow,
            hosts,
        })
    });

    if raw.pools.is_empty() {
        return invalid("pools", "at least one pool is required");
    }
    let defaults = raw.defaults.unwrap_or_default();
    let mut pools: Vec<PoolConfig> = Vec::with_capacity(raw.pools.len());
    let mut listeners: Vec<(SocketAddr, String)> = Vec::new();
    if let Some(a) = &admin {
        listeners.push((a.listen, "admin.listen".to_owned()));
    }
    for (i, raw_pool) in raw.pools.into_iter().enumerate() {
        let at = format!("pools[{i}]");
        if let Some(j) = pools.iter().position(|p| p.name == raw_pool.name.0) {
            return invalid(
                format!("{at}.name"),
                format!(
                    "duplicate pool name `{}` (also pools[{j}])",
                    raw_pool.name.0
                ),
            );
        }
        for (k, addr) in raw_pool.listen.items.iter().enumerate() {
            let path = raw_pool.listen.item_path(&format!("{at}.listen"), k);
            if let Some((other, other_path)) =
                listeners.iter().find(|(other, _)| overlaps(addr.0, *other))
            {
                return invalid(
                    path,
                    format!(
                        "listen address {} is already used by {other_path} ({other})",
                        addr.0
                    ),
                );
            }
            listeners.push((addr.0, path));
        }
        pools.push(build_pool(&at, raw_pool, &defaults)?);
    }
    Ok(Config {
        admin,
        log,
        upgrade_timeout: upgrade_timeout.map_or(UPGRADE_TIMEOUT, |d| d.0),
        state_file,
        pid_file,
        pools,
    })
}

/// Two listeners cannot both bind: same port (not 0, the "any free port"
/// request tests use) and the same IP, or a wildcard of the same family.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip()
            || (a.is_ipv4() == b.is_ipv4() && (a.ip().is_unspecified() || b.ip().is_unspecified())))
}

fn loopback() -> Vec<IpNet> {
    vec![
        IpNet::from(IpAddr::from([127, 0, 0, 1])),
        IpNet::from(IpAddr::from(Ipv6Addr::LOCALHOST)),
    ]
}

fn build_pool(at: &str, raw: RawPool, defaults: &RawSettings) -> Result<PoolConfig, Invalid> {
    // What the pool itself says about its health, before defaults fill in.
    let own_health = raw.health.clone();
    let own_proxy_protocol = raw.proxy_protocol.clone();
    let own = RawSettings {
        allow: raw.allow,
        proxy_protocol: raw.proxy_protocol,
        source: raw.source,
        connect_timeout: raw.connect_timeout,
        keepalive: raw.keepalive,
        idle_timeout: raw.idle_timeout,
        max_connections: raw.max_connections,
        max_connections_per_source: raw.max_connections_per_source,
        rebalance: raw.rebalance,
        quarantine: raw.quarantine,
        health: raw.health,
        discovery: raw.discovery,
    };
    // Where the quarantine window values come from, to blame the right line.
    let quarantine_path = |key: &str, has: fn(&RawQuarantine) -> bool| {
        if own.quarantine.as_ref().is_some_and(has) {
            Some(format!("{at}.quarantine.{key}"))
        } else {
            defaults
                .quarantine
                .as_ref()
                .is_some_and(has)
                .then(|| format!("defaults.quarantine.{key}"))
        }
    };
    let max_path = quarantine_path("max", |q| q.max.is_some());
    let base_path = quarantine_path("base", |q| q.base.is_some());
    let keepalive_path = if own.keepalive.is_some() {
        format!("{at}.keepalive")
    } else {
        "defaults.keepalive".to_owned()
    };
    let s = own.or(defaults.clone());

    let keepalive = s.keepalive.unwrap_or_default();
    let keepalive = KeepaliveConfig {
        idle: keepalive.idle.map_or(KEEPALIVE_IDLE, |d| d.0),
        interval: keepalive.interval.map_or(KEEPALIVE_INTERVAL, |d| d.0),
        count: keepalive.count.map_or(KEEPALIVE_COUNT, |c| c.0),
    };
    // TCP_USER_TIMEOUT is a millisecond count in a C int.
    if keepalive.user_timeout() > MAX_USER_TIMEOUT {
        return invalid(
            keepalive_path,
            format!(
                "idle + interval x count is {}, over the kernel's limit of {} (24 days)",
                super::span(keepalive.user_timeout()),
                super::span(MAX_USER_TIMEOUT)
            ),
        );
    }
    let rebalance = s.rebalance.unwrap_or_default();
    let q = s.quarantine.unwrap_or_default();
    let quarantine = QuarantineConfig {
        base: q.base.map_or(QUARANTINE_BASE, |d| d.0),
        max: q.max.map_or(QUARANTINE_MAX, |d| d.0),
        failures: q.failures.map_or(QUARANTINE_FAILURES, NonZeroU32::get),
        refused_clients: q.refused_clients.map_or(REFUSED_CLIENTS, NonZeroUsize::get),
    };
    if quarantine.max < quarantine.base {
        let path = max_path
            .or(base_path)
            .unwrap_or_else(|| format!("{at}.quarantine"));
        return invalid(
            path,
            format!(
                "quarantine.max ({}) is shorter than quarantine.base ({})",
                super::span(quarantine.max),
                super::span(quarantine.base)
            ),
        );
    }
    let health = build_health(s.health.unwrap_or_default());
    require::check(
        at,
        &raw.name.0,
        own_health.as_ref(),
        defaults.health.as_ref(),
        &health,
    )?;
    let (backends, discover) = build_backends(at, raw.backends, health.probe)?;
    let discovery = s.discovery.unwrap_or_default();
    let proxy_protocol =
        identity::proxy_protocol(at, own_proxy_protocol.as_ref(), s.proxy_protocol)?;
    Ok(PoolConfig {
        name: raw.name.0,
        listen: raw.listen.items.iter().map(|l| l.0).collect(),
        allow: s
            .allow
            .map_or_else(Vec::new, |l| l.items.iter().map(|c| c.0).collect()),
        proxy_protocol,
        source: s.source.map_or(SOURCE, |v| v.0),
        connect_timeout: s.connect_timeout.map_or(CONNECT_TIMEOUT, |d| d.0),
        keepalive,
        idle_timeout: s.idle_timeout.map(|d| d.0).filter(|d| !d.is_zero()),
        max_connections: s.max_connections.map_or(MAX_CONNECTIONS, NonZeroUsize::get),
        max_connections_per_source: s.max_connections_per_source.filter(|&n| n > 0),
        rebalance: RebalanceConfig {
            interval: rebalance.interval.map_or(Some(REBALANCE_INTERVAL), |d| {
                Some(d.0).filter(|d| !d.is_zero())
            }),
            min_imbalance: rebalance
                .min_imbalance
                .map_or(MIN_IMBALANCE, NonZeroUsize::get),
        },
        quarantine,
        health,
        backends,
        discover,
        discovery: build_discovery(discovery),
    })
}

fn build_discovery(d: RawDiscovery) -> DiscoveryConfig {
    DiscoveryConfig {
        interval: d.interval.map_or(DISCOVERY_INTERVAL, |d| d.0),
        hold: d.hold.map_or(DISCOVERY_HOLD, |d| d.0),
        resolver: d.resolver.map(|r| r.0),
    }
}

fn build_health(h: RawHealth) -> HealthConfig {
    let (network, magic) = match (h.network, h.magic) {
        (Some(n), Some(m)) => (n, m.0),
        (None, Some(m)) => (Network::Custom, m.0),
        (n, None) => {
            let n = n.unwrap_or(NETWORK);
            (n, n.magic().unwrap_or_default())
        }
    };
    HealthConfig {
        probe: match h.probe {
            Some(RawProbe::Connect) | None => ProbeKind::Connect,
            Some(RawProbe::BitcoinP2p) => ProbeKind::BitcoinP2p,
            Some(RawProbe::Blockbook) => ProbeKind::Blockbook,
            Some(RawProbe::Http) => ProbeKind::Http,
            Some(RawProbe::Electrum) => ProbeKind::Electrum,
            Some(RawProbe::ElectrumTls) => ProbeKind::ElectrumTls,
        },
        interval: h.interval.map_or(HEALTH_INTERVAL, |d| d.0),
        timeout: h.timeout.map_or(HEALTH_TIMEOUT, |d| d.0),
        max_lag_blocks: h.max_lag_blocks.unwrap_or(MAX_LAG_BLOCKS),
        network,
        magic,
        fall: h.fall.map_or(FALL, NonZeroU32::get),
        rise: h.rise.map_or(RISE, NonZeroU32::get),
        drain: h.drain.unwrap_or(DRAIN),
        drain_spread: h.drain_spread.map_or(DRAIN_SPREAD, |d| d.0),
        stall_timeout: h.stall_timeout.map(|d| d.0).filter(|d| !d.is_zero()),
        stall_rule: match h.stall_rule {
            Some(RawStallRule::Push) | None => StallRule::Push,
            Some(RawStallRule::Request) => StallRule::Request,
        },
        require_services: h.require_services.map_or(Services::NONE, |r| r.0),
        min_protocol_version: h.min_protocol_version,
    }
}
