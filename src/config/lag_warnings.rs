//! `check` warnings about pools whose lag can never be judged: a lead is
//! counted only when it is proven (headers under a known network's rules)
//! or corroborated (another backend near it, which takes at least three).

use super::{Config, PoolConfig};

/// Backends a pool needs before a lead can be corroborated: the leader, one
/// near it, and the one behind.
const CORROBORATING: usize = 3;

/// One warning for each pool that reads heights and can neither prove nor
/// corroborate a lead.
pub fn warnings(config: &Config) -> Vec<String> {
    config.pools.iter().filter_map(never_judged).collect()
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
}
