//! The summary `pin-proxy check` prints: the effective settings of every pool
//! after defaults are merged, with probe URL secrets masked.

use std::fmt::Write;
use std::time::Duration;

use super::span;

use super::parse::{default_probe_url, open_to_others, state_file_warning};
use super::{
    BackendSource, Config, DiscoverQuery, HealthConfig, IpNet, LogFormat, Network, PoolConfig,
    ProbeKind,
};

/// A readable, multi-line summary of the effective configuration.
///
/// Every value is shown as it will be used (defaults applied); `probe_url`s go
/// through [`SecretUrl`](super::SecretUrl)'s masking `Display`.
pub fn describe(config: &Config) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_config(&mut out, config);
    out
}

fn write_config(out: &mut String, config: &Config) -> std::fmt::Result {
    match &config.admin {
        Some(admin) => writeln!(
            out,
            "admin: listen {}, allow {}, hosts {}",
            admin.listen,
            nets(&admin.allow),
            admin_hosts(&admin.hosts)
        )?,
        None => writeln!(out, "admin: off")?,
    }
    let format = match config.log.format {
        LogFormat::Json => "json",
        LogFormat::Text => "text",
    };
    let file = config
        .log
        .file
        .as_ref()
        .map_or_else(|| "stdout".to_owned(), |f| f.display().to_string());
    writeln!(
        out,
        "log: level {}, format {format}, to {file}",
        config.log.level
    )?;
    writeln!(out, "upgrade: timeout {}", span(config.upgrade_timeout))?;
    match &config.state_file {
        Some(f) => writeln!(out, "state_file: {}", f.display())?,
        None => writeln!(out, "state_file: none (nothing kept across restarts)")?,
    }
    if let Some(f) = &config.pid_file {
        writeln!(out, "pid_file: {}", f.display())?;
    }
    for pool in &config.pools {
        writeln!(out)?;
        write_pool(out, pool)?;
    }
    Ok(())
}

fn write_pool(out: &mut String, pool: &PoolConfig) -> std::fmt::Result {
    let listen: Vec<String> = pool.listen.iter().map(ToString::to_string).collect();
    writeln!(out, "pool {}", pool.name)?;
    writeln!(out, "  listen: {}", listen.join(", "))?;
    let allow = if pool.allow.is_empty() {
        "any client".to_owned()
    } else {
        nets(&pool.allow)
    };
    writeln!(out, "  allow: {allow}")?;
    match &pool.proxy_protocol {
        Some(pp) => writeln!(
            out,
            "  proxy_protocol: from {} (header within {})",
            nets(&pp.from),
            dur(pp.timeout)
        )?,
        None => writeln!(out, "  proxy_protocol: none (no PROXY header is read)")?,
    }
    writeln!(out, "  source: {}", source(pool.source))?;
    writeln!(
        out,
        "  connect_timeout: {}, idle_timeout: {}, max_connections: {}, per source: {}",
        dur(pool.connect_timeout),
        pool.idle_timeout.map_or_else(|| "never".to_owned(), dur),
        pool.max_connections,
        pool.max_connections_per_source
            .map_or_else(|| "no limit".to_owned(), |n| n.to_string())
    )?;
    let k = &pool.keepalive;
    writeln!(
        out,
        "  keepalive: idle {}, interval {}, count {} (user timeout {})",
        dur(k.idle),
        dur(k.interval),
        k.count,
        dur(k.user_timeout())
    )?;
    match pool.rebalance.interval {
        Some(every) => writeln!(
            out,
            "  rebalance: every {}, min_imbalance {}",
            dur(every),
            pool.rebalance.min_imbalance
        )?,
        None => writeln!(out, "  rebalance: off")?,
    }
    let q = &pool.quarantine;
    writeln!(
        out,
        "  quarantine: base {}, max {}, after {} failures, refused_clients {}",
        dur(q.base),
        dur(q.max),
        q.failures,
        q.refused_clients
    )?;
    let h = &pool.health;
    write!(
        out,
        "  health: probe {} every {}, timeout {}",
        h.probe.as_str(),
        dur(h.interval),
        dur(h.timeout)
    )?;
    match h.probe {
        ProbeKind::BitcoinP2p => write!(out, ", network {} (magic {})", h.network, hex(h.magic))?,
        p if p.uses_network() => write!(out, ", network {}", h.network)?,
        _ => {}
    }
    if h.probe.reads_height() {
        write!(out, ", max_lag_blocks {}", h.max_lag_blocks)?;
    }
    if let Some(t) = h.stall_timeout {
        write!(
            out,
            ", stall_timeout {} ({})",
            dur(t),
            h.stall_rule.as_str()
        )?;
    }
    write!(out, ", fall {}, rise {}, ", h.fall, h.rise)?;
    match (h.drain, h.drain_spread.is_zero()) {
        (false, _) => writeln!(out, "drain off")?,
        (true, true) => writeln!(out, "drain on (at once)")?,
        (true, false) => writeln!(out, "drain on (spread over {})", dur(h.drain_spread))?,
    }
    writeln!(out, "  requires: {}", requirement(h))?;
    writeln!(out, "  backends:")?;
    for b in &pool.backends {
        write!(out, "    - {}", b.name)?;
        if b.name != b.addr {
            write!(out, " at {}", b.addr)?;
        }
        if b.backup {
            write!(out, " (backup)")?;
        }
        match (&b.probe_url, default_probe_url(h.probe, &b.addr)) {
            (Some(url), _) => write!(out, ", probe_url {url}")?,
            (None, Some(url)) => write!(out, ", probe_url {url} (derived)")?,
            (None, None) => {}
        }
        writeln!(out)?;
    }
    for d in &pool.discover {
        let kind = match d.query {
            DiscoverQuery::Addrs { .. } => "A/AAAA",
            DiscoverQuery::Srv(_) => "SRV",
        };
        write!(
            out,
            "    - {}/* discovered from {} ({kind})",
            d.name, d.query
        )?;
        if d.backup {
            write!(out, " (backup)")?;
        }
        if let Some(t) = &d.probe_url {
            write!(out, ", probe_url {t}")?;
        }
        writeln!(out)?;
    }
    if !pool.discover.is_empty() {
        let r = &pool.discovery;
        let resolver = r
            .resolver
            .map_or_else(|| "the system's resolvers".to_owned(), |a| a.to_string());
        writeln!(
            out,
            "  discovery: every {}, hold {}, asking {resolver}",
            dur(r.interval),
            dur(r.hold)
        )?;
    }
    Ok(())
}

/// Where backend connections come from, and what that takes.
fn source(source: BackendSource) -> String {
    let why = match source {
        BackendSource::Proxy => "the kernel chooses",
        BackendSource::Client => {
            "the client's own IP; needs CAP_NET_ADMIN or CAP_NET_RAW, see README \"Transparent source\""
        }
        BackendSource::Address(_) => "backend connections are made from it",
    };
    format!("{source} ({why})")
}

/// What a backend must show its probe to be given clients.
fn requirement(h: &HealthConfig) -> String {
    let custom = "nothing (a custom network has no chain to check)".to_owned();
    match h.probe {
        ProbeKind::BitcoinP2p => {
            let mut parts = Vec::new();
            if !h.require_services.is_empty() {
                let s = h.require_services;
                parts.push(format!("services {s} ({})", s.describe()));
            }
            if let Some(min) = h.min_protocol_version {
                parts.push(format!("protocol >= {min}"));
            }
            if parts.is_empty() {
                "nothing (any services, any protocol)".to_owned()
            } else {
                parts.join(", ")
            }
        }
        ProbeKind::Electrum | ProbeKind::ElectrumTls if h.network == Network::Custom => custom,
        ProbeKind::Electrum | ProbeKind::ElectrumTls => {
            format!("the genesis_hash of {} (server.features)", h.network)
        }
        ProbeKind::Blockbook if h.network == Network::Custom => custom,
        ProbeKind::Blockbook => {
            let coins: Vec<String> = h
                .network
                .blockbook_coins()
                .iter()
                .map(|c| format!("{c:?}"))
                .collect();
            format!("coin {} ({})", coins.join(" or "), h.network)
        }
        ProbeKind::Connect | ProbeKind::Http => {
            format!(
                "nothing (the {} probe reads no node facts)",
                h.probe.as_str()
            )
        }
    }
}

fn dur(d: Duration) -> String {
    span(d).to_string()
}

fn nets(nets: &[IpNet]) -> String {
    nets.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The names `Host` may carry: always the listen address, `localhost`
/// and loopback addresses, and those of `admin.hosts`.
fn admin_hosts(hosts: &[String]) -> String {
    let own = "its address, localhost, loopback".to_owned();
    std::iter::once(own)
        .chain(hosts.iter().cloned())
        .collect::<Vec<_>>()
        .join(", ")
}

fn hex(bytes: [u8; 4]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Things `check` should point out although the file is valid (a
/// `state_file` the proxy could not write here is one: it would run, but
/// keep nothing).
pub fn warnings(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(admin) = &config.admin
        && !admin.listen.ip().is_loopback()
    {
        out.push(format!(
            "admin.listen {} is reachable beyond loopback; the admin endpoint has no authentication, only admin.allow",
            admin.listen
        ));
    }
    out.extend(state_file_warning(config));
    out.extend(config.pools.iter().filter_map(stall_warning));
    out.extend(
        config
            .pools
            .iter()
            .filter_map(super::identity::trust_warning),
    );
    out.extend(open_to_others(config));
    out.extend(super::lag_warnings::warnings(config));
    out
}

/// How often Bitcoin-family nodes ping each peer: an idle peer of a quiet
/// node hears nothing else for that long.
const P2P_PING: Duration = Duration::from_secs(120);

/// A `bitcoin-p2p` pool whose `stall_timeout` is under the nodes' own
/// ping: its idle peers would be taken for a stalled node's.
fn stall_warning(pool: &PoolConfig) -> Option<String> {
    let timeout = pool.health.stall_timeout?;
    (pool.health.probe == ProbeKind::BitcoinP2p && timeout < P2P_PING).then(|| {
        format!(
            "pool {}: health.stall_timeout {} is under the 2-minute ping of bitcoin-p2p nodes: \
             the idle peers of a quiet node hear nothing that long, and the node would be \
             taken for stalled (5m fits, see \"Stalled backends\")",
            pool.name,
            span(timeout)
        )
    })
}
