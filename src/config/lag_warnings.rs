//! `check` warnings about pools whose lag can never be judged: a lead is
//! counted only when it is proven (headers under a known network's rules)
//! or corroborated (another backend near it, which takes at least three);
//! and about an Electrum pool whose `network` the config itself suggests is
//! not its servers' chain (`check` connects to nothing; the probes name a
//! wrong chain in their detail).

use super::{Config, PoolConfig, ProbeKind};

/// Backends a pool needs before a lead can be corroborated: the leader, one
/// near it, and the one behind.
const CORROBORATING: usize = 3;

/// One warning for each pool that reads heights and can neither prove nor
/// corroborate a lead.
pub fn warnings(config: &Config) -> Vec<String> {
    let mut out: Vec<String> = config.pools.iter().filter_map(never_judged).collect();
    for pool in &config.pools {
        out.extend(other_chain(config, pool));
    }
    out
}

/// Electrum's default ports as its wallets use them: main networks, and
/// test networks (testnet, regtest).
const ELECTRUM_MAIN_PORTS: [u16; 2] = [50001, 50002];
const ELECTRUM_TEST_PORTS: [u16; 2] = [51001, 51002];

/// `host:port`'s host (brackets taken off) and port.
fn host_port(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

/// An `electrum*` pool on a named network whose servers listen on the
/// other kind of network's Electrum port, or share a host with a
/// `bitcoin-p2p` pool on another network: every height it reads would be
/// checked against the wrong chain's genesis and fail.
fn other_chain(config: &Config, pool: &PoolConfig) -> Vec<String> {
    let h = &pool.health;
    let electrum = matches!(h.probe, ProbeKind::Electrum | ProbeKind::ElectrumTls);
    if !electrum || !h.proves_heights() {
        return Vec::new();
    }
    let test = h.network.is_test();
    let mut out = Vec::new();
    for b in &pool.backends {
        let Some((host, port)) = host_port(&b.addr) else {
            continue;
        };
        let (theirs, kind) = if test {
            (ELECTRUM_MAIN_PORTS, "a main network's")
        } else {
            (ELECTRUM_TEST_PORTS, "a test network's")
        };
        if theirs.contains(&port) {
            out.push(format!(
                "pool {}: backend {} listens on {port}, {kind} Electrum port, but \
                 health.network is {}: if the server is on another chain, every height \
                 fails its genesis check and lag is never judged",
                pool.name, b.name, h.network
            ));
        }
        let p2p_elsewhere = config.pools.iter().find(|other| {
            other.health.probe == ProbeKind::BitcoinP2p
                && other.health.proves_heights()
                && other.health.network != h.network
                && other
                    .backends
                    .iter()
                    .any(|ob| host_port(&ob.addr).is_some_and(|(oh, _)| oh == host))
        });
        if let Some(other) = p2p_elsewhere {
            out.push(format!(
                "pool {}: backend {} shares host {host} with pool {}, whose nodes are on {}, \
                 but health.network is {}: if the server indexes that node, every height \
                 fails its genesis check and lag is never judged",
                pool.name, b.name, other.name, other.health.network, h.network
            ));
        }
    }
    out
}

fn never_judged(pool: &PoolConfig) -> Option<String> {
    let h = &pool.health;
    let unprovable = h.probe.uses_network() && !h.proves_heights();
    // Discovered members may make up the number.
    let few = pool.discover.is_empty() && pool.backends.len() < CORROBORATING;
    (unprovable && few).then(|| {
        format!(
            "pool {}: health.magic without health.network and {} backend(s): a backend's \
             lead can be neither proven (no known network's rules) nor corroborated (that \
             takes {CORROBORATING} backends), so lag is never judged; set health.network",
            pool.name,
            pool.backends.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn warned(health: &str, backends: &str) -> Vec<String> {
        let yaml = format!(
            "pools:\n  - name: p\n    listen: 127.0.0.1:9333\n    health: {health}\n    \
             backends: {backends}\n"
        );
        let config = Config::parse(&yaml, Path::new("t.yaml")).unwrap();
        warnings(&config)
    }

    #[test]
    fn a_custom_magic_with_fewer_than_three_backends_is_warned_about() {
        let two = "[127.0.0.1:1, 127.0.0.1:2]";
        let three = "[127.0.0.1:1, 127.0.0.1:2, 127.0.0.1:3]";
        let custom = "{ probe: bitcoin-p2p, magic: 0a0b0c0d }";
        let got = warned(custom, two);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("pool p: health.magic without health.network and 2 backend(s)"));
        assert!(got[0].contains("lag is never judged"), "{got:?}");
        let electrum = "{ probe: electrum, magic: 0a0b0c0d }";
        assert_eq!(warned(electrum, "[127.0.0.1:1]").len(), 1);
        // Three can corroborate; a named network can prove; a probe that
        // reads no height judges no lag.
        for (health, backends) in [
            (custom, three),
            ("{ probe: bitcoin-p2p, network: litecoin-regtest }", two),
            (
                "{ probe: bitcoin-p2p, network: bitcoin, magic: 0a0b0c0d }",
                two,
            ),
            ("{ probe: electrum, network: litecoin }", two),
            ("{ probe: connect, magic: 0a0b0c0d }", two),
        ] {
            assert_eq!(warned(health, backends), Vec::<String>::new(), "{health}");
        }
    }

    fn warned_config(yaml: &str) -> Vec<String> {
        warnings(&Config::parse(yaml, Path::new("t.yaml")).unwrap())
    }

    #[test]
    fn an_electrum_pool_on_another_kind_of_networks_port_is_warned_about() {
        let pool = |network: &str, port: u16| {
            format!(
                "pools:\n  - name: e\n    listen: 127.0.0.1:9333\n    \
                 health: {{ probe: electrum, network: {network} }}\n    \
                 backends: [\"127.0.0.1:{port}\", \"127.0.0.2:{port}\"]\n"
            )
        };
        let got = warned_config(&pool("litecoin", 51001));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0]
                .starts_with("pool e: backend 127.0.0.1:51001 listens on 51001, a test network's"),
            "{got:?}"
        );
        assert!(got[0].contains("health.network is litecoin"), "{got:?}");
        let got = warned_config(&pool("litecoin-regtest", 50002));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].contains("a main network's Electrum port"), "{got:?}");
        for quiet in [
            pool("litecoin", 50001),
            pool("litecoin-testnet", 51002),
            pool("litecoin", 60001),
        ] {
            assert_eq!(warned_config(&quiet), Vec::<String>::new(), "{quiet}");
        }
    }

    #[test]
    fn an_electrum_pool_beside_p2p_nodes_of_another_network_is_warned_about() {
        let yaml = |electrum_network: &str| {
            format!(
                "pools:\n  - name: p2p\n    listen: 127.0.0.1:9333\n    \
                 health: {{ probe: bitcoin-p2p, network: litecoin-regtest }}\n    \
                 backends: [\"10.0.0.5:19444\", \"10.0.0.6:19444\"]\n  \
                 - name: e\n    listen: 127.0.0.1:9334\n    \
                 health: {{ probe: electrum, network: {electrum_network} }}\n    \
                 backends: [\"10.0.0.5:60001\"]\n"
            )
        };
        let got = warned_config(&yaml("litecoin"));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with(
                "pool e: backend 10.0.0.5:60001 shares host 10.0.0.5 with pool p2p, \
                 whose nodes are on litecoin-regtest, but health.network is litecoin"
            ),
            "{got:?}"
        );
        assert_eq!(
            warned_config(&yaml("litecoin-regtest")),
            Vec::<String>::new()
        );
    }
}
