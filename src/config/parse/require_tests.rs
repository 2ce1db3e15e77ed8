//! Tests of `health.require_services` and `health.min_protocol_version`.

use std::path::Path;

use crate::config::{Config, ConfigError, Services, describe};

/// A one-pool config whose health is `{ <health> }`.
fn with_health(health: &str) -> String {
    format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:9333\n    health: {{ {health} }}\n    \
         backends: [h:1]\n"
    )
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("t.yaml"))
}

fn ok(text: &str) -> Config {
    parse(text).unwrap_or_else(|e| panic!("expected a valid config, got: {e}"))
}

/// The error of `text`: its YAML path, message and line.
fn err(text: &str) -> ConfigError {
    match parse(text) {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e,
    }
}

fn required(health: &str) -> Services {
    ok(&with_health(&format!("probe: bitcoin-p2p, {health}"))).pools[0]
        .health
        .require_services
}

#[test]
fn nothing_is_required_by_default() {
    let c = ok(&with_health("probe: bitcoin-p2p"));
    let h = &c.pools[0].health;
    assert_eq!(
        (h.require_services, h.min_protocol_version),
        (Services::NONE, None)
    );
}

#[test]
fn services_are_names_a_preset_or_hex_masks() {
    let cases = [
        (
            "require_services: [network, witness, compact_filters, mweb]",
            0x0100_0049,
        ),
        ("require_services: [mwebd]", 0x0180_0049),
        ("require_services: mwebd", 0x0180_0049),
        ("require_services: [mwebd, bloom]", 0x0180_004d),
        (
            "require_services: [network_limited, mweb_light_client]",
            0x0080_0400,
        ),
        ("require_services: \"0x1800049\"", 0x0180_0049),
        // Unquoted, YAML reads a hex number.
        ("require_services: 0x1800049", 0x0180_0049),
        ("require_services: [0x40, network]", 0x41),
        ("require_services: []", 0),
        ("require_services: 0x0", 0),
    ];
    for (health, want) in cases {
        assert_eq!(required(health), Services(want), "{health}");
    }
}

#[test]
fn min_protocol_version_is_an_integer() {
    let c = ok(&with_health(
        "probe: bitcoin-p2p, min_protocol_version: 70016",
    ));
    assert_eq!(c.pools[0].health.min_protocol_version, Some(70016));
    let e = err(&with_health(
        "probe: bitcoin-p2p, min_protocol_version: new",
    ));
    assert_eq!(
        e.yaml_path(),
        Some("pools[0].health.min_protocol_version"),
        "{e}"
    );
    assert!(e.line_column().is_some(), "{e}");
}

#[test]
fn an_unknown_service_names_the_known_ones() {
    let e = err(&with_health(
        "probe: bitcoin-p2p, require_services: [network, filters]",
    ));
    assert_eq!(
        e.yaml_path(),
        Some("pools[0].health.require_services[1]"),
        "{e}"
    );
    assert_eq!(e.line_column(), Some((4, 63)), "{e}");
    let message = e.message();
    assert!(
        message.starts_with("unknown service `filters`; known: network, bloom,"),
        "{e}"
    );
    assert!(message.contains("compact_filters"), "{e}");
    assert!(message.contains("the preset `mwebd` (0x1800049)"), "{e}");
}

#[test]
fn a_bad_hex_mask_is_refused() {
    for mask in ["\"0xfoo\"", "\"0x\"", "\"0x1234567890abcdef0\""] {
        let e = err(&with_health(&format!(
            "probe: bitcoin-p2p, require_services: {mask}"
        )));
        assert_eq!(
            e.yaml_path(),
            Some("pools[0].health.require_services"),
            "{e}"
        );
        assert!(e.message().contains("is not a hex mask"), "{e}");
    }
}

#[test]
fn only_a_p2p_probe_may_require_services_or_a_protocol() {
    for probe in ["connect", "electrum", "blockbook"] {
        for key in ["require_services: [witness]", "min_protocol_version: 70016"] {
            let e = err(&with_health(&format!("probe: {probe}, {key}")));
            let field = key.split(':').next().unwrap();
            assert_eq!(
                e.yaml_path().map(str::to_owned),
                Some(format!("pools[0].health.{field}")),
                "{e}"
            );
            assert!(e.message().contains("needs `probe: bitcoin-p2p`"), "{e}");
            assert!(
                e.message().contains(&format!("probes with `{probe}`")),
                "{e}"
            );
            assert!(e.line_column().is_some(), "{e}");
        }
    }
    // Requiring nothing is no requirement.
    ok(&with_health("probe: electrum, require_services: []"));
}

#[test]
fn a_requirement_in_defaults_is_blamed_there() {
    let text = "defaults:\n  health: { require_services: [mwebd] }\n\
                pools:\n  - name: p2p\n    listen: 127.0.0.1:9333\n    health: { probe: bitcoin-p2p }\n    backends: [h:1]\n\
                \x20 - name: ex\n    listen: 127.0.0.1:50001\n    health: { probe: electrum }\n    backends: [h:2]\n";
    let e = err(text);
    assert_eq!(
        e.yaml_path(),
        Some("defaults.health.require_services"),
        "{e}"
    );
    assert!(e.message().contains("pool `ex`"), "{e}");
    assert!(e.message().contains("rather than in defaults"), "{e}");
    // The Electrum pool may drop what defaults require.
    let fixed = text.replace(
        "{ probe: electrum }",
        "{ probe: electrum, require_services: [] }",
    );
    let c = ok(&fixed);
    assert_eq!(c.pools[0].health.require_services, Services::MWEBD);
    assert_eq!(c.pools[1].health.require_services, Services::NONE);
}

#[test]
fn check_prints_each_pools_requirement() {
    let text = "pools:\n\
        \x20 - name: ltc\n    listen: 127.0.0.1:9333\n    \
        health: { probe: bitcoin-p2p, require_services: mwebd, min_protocol_version: 70016 }\n    \
        backends: [h:1]\n\
        \x20 - name: free\n    listen: 127.0.0.1:9334\n    health: { probe: bitcoin-p2p }\n    \
        backends: [h:2]\n\
        \x20 - name: ex\n    listen: 127.0.0.1:50001\n    \
        health: { probe: electrum, network: litecoin-regtest }\n    backends: [h:3]\n\
        \x20 - name: bb\n    listen: 127.0.0.1:9130\n    health: { probe: blockbook }\n    \
        backends: [h:4]\n\
        \x20 - name: tcp\n    listen: 127.0.0.1:9135\n    backends: [h:5]\n";
    let shown = describe(&ok(text));
    for line in [
        "  requires: services 0x1800049 (network, witness, compact_filters, mweb_light_client, \
         mweb), protocol >= 70016\n",
        "  requires: nothing (any services, any protocol)\n",
        "  requires: the genesis_hash of litecoin-regtest (server.features)\n",
        "  requires: coin \"Litecoin\" (litecoin)\n",
        "  requires: nothing (the connect probe reads no node facts)\n",
    ] {
        assert!(shown.contains(line), "no {line:?} in:\n{shown}");
    }
}
