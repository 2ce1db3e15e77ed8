//! Unit tests of parsing: default merging and every validation rule.
//! Over 500 lines: one table or case per rule, kept beside each other.

use std::path::Path;
use std::time::Duration;

use super::{default_probe_url, parse};
use crate::config::{Config, ConfigError, LogFormat, ProbeKind, StallRule};

const POOL: &str = "pools:\n  - name: p\n    listen: 127.0.0.1:9333\n    backends: [h:1]\n";

fn ok(text: &str) -> Config {
    match parse(text, Path::new("t.yaml")) {
        Ok(c) => c,
        Err(e) => panic!("expected valid config, got: {e}"),
    }
}

fn err(text: &str) -> ConfigError {
    match parse(text, Path::new("t.yaml")) {
        Ok(c) => panic!("expected an error, got: {c:?}"),
        Err(e) => e,
    }
}

/// Asserts the error names `path` and its message contains `needle`.
fn rejects(text: &str, path: &str, needle: &str) {
    let e = err(text);
    assert_eq!(e.yaml_path(), Some(path), "{e}");
    assert!(e.message().contains(needle), "{e}");
}

/// A one-pool config with `extra` (indented 4) added to the pool.
fn pool_with(extra: &str) -> String {
    format!("{POOL}{extra}")
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn builtin_defaults() {
    let c = ok(POOL);
    assert_eq!(c.admin, None);
    assert_eq!(
        (c.log.level.as_str(), c.log.format),
        ("info", LogFormat::Json)
    );
    assert_eq!(c.log.file, None);
    assert_eq!(c.state_file, None);
    let p = &c.pools[0];
    let k = p.keepalive;
    assert_eq!(
        (p.connect_timeout, p.idle_timeout, p.max_connections),
        (secs(5), None, 1024)
    );
    assert_eq!((k.idle, k.interval, k.count), (secs(60), secs(10), 6));
    assert_eq!(
        (p.rebalance.interval, p.rebalance.min_imbalance),
        (Some(secs(60)), 2)
    );
    let q = p.quarantine;
    assert_eq!((q.base, q.max, q.failures), (secs(300), secs(1800), 3));
    assert_eq!(q.refused_clients, 1024);
    let h = &p.health;
    assert_eq!((h.stall_timeout, h.stall_rule), (None, StallRule::Push));
    assert_eq!(
        (h.probe, h.interval, h.timeout),
        (ProbeKind::Connect, secs(30), secs(5))
    );
    assert_eq!((h.max_lag_blocks, h.network.name()), (3, "litecoin"));
    assert_eq!(
        (h.magic, h.fall, h.rise, h.drain),
        ([0xfb, 0xc0, 0xb6, 0xdb], 2, 1, true)
    );
    assert_eq!(h.drain_spread, secs(10));
    assert!(p.allow.is_empty());
    assert_eq!(p.backends[0].name, "h:1");
}

#[test]
fn defaults_merge_key_by_key_and_pool_wins() {
    let c = ok(&format!(
        "defaults:\n  connect_timeout: 2s\n  keepalive: {{ idle: 30s }}\n  \
         health: {{ interval: 7s, timeout: 1s, fall: 4 }}\n{POOL}    keepalive: {{ count: 3 }}\n    \
         health: {{ probe: bitcoin-p2p, timeout: 2s }}\n"
    ));
    let (p, k) = (&c.pools[0], c.pools[0].keepalive);
    assert_eq!(p.connect_timeout, secs(2));
    assert_eq!((k.idle, k.interval, k.count), (secs(30), secs(10), 3));
    let h = &p.health;
    assert_eq!(
        (h.probe, h.interval, h.timeout),
        (ProbeKind::BitcoinP2p, secs(7), secs(2))
    );
    assert_eq!((h.fall, h.rise), (4, 1));
}

#[test]
fn stall_rule_and_refused_clients_come_from_defaults_or_the_pool() {
    let c = ok(&format!(
        "defaults:\n  quarantine: {{ refused_clients: 10 }}\n  \
         health: {{ stall_timeout: 1m, stall_rule: request }}\n{POOL}\
         \x20 - name: q\n    listen: 127.0.0.1:9334\n    backends: [h:2]\n    \
         quarantine: {{ refused_clients: 20 }}\n    health: {{ stall_rule: push }}\n"
    ));
    let (p, q) = (&c.pools[0], &c.pools[1]);
    assert_eq!(p.quarantine.refused_clients, 10);
    assert_eq!(
        (p.health.stall_timeout, p.health.stall_rule),
        (Some(secs(60)), StallRule::Request)
    );
    assert_eq!(q.quarantine.refused_clients, 20);
    assert_eq!(
        (q.health.stall_timeout, q.health.stall_rule),
        (Some(secs(60)), StallRule::Push)
    );
    assert_eq!(StallRule::Request.as_str(), "request");
}

#[test]
fn electrum_probes_read_heights_on_the_backend_itself() {
    for (name, kind) in [
        ("electrum", ProbeKind::Electrum),
        ("electrum-tls", ProbeKind::ElectrumTls),
    ] {
        let c = ok(&format!(
            "{POOL}    health: {{ probe: {name}, network: litecoin-regtest }}\n"
        ));
        let h = &c.pools[0].health;
        assert_eq!((h.probe, h.network.name()), (kind, "litecoin-regtest"));
        assert_eq!(kind.as_str(), name);
        assert!(kind.reads_height() && kind.uses_network());
        // The server's own address is probed: no URL to derive.
        assert_eq!(default_probe_url(kind, "h:50001"), None);
        assert_eq!(c.pools[0].backends[0].probe_url, None);
    }
}

#[test]
fn drain_spread_merges_from_defaults_and_zero_means_at_once() {
    let two_pools = |own: &str| {
        format!(
            "defaults:\n  health: {{ drain_spread: 3s }}\n{POOL}    health: {{ probe: bitcoin-p2p }}\n  \
             - name: q\n    listen: 127.0.0.1:9334\n    backends: [h:2]\n    health: {{ {own} }}\n"
        )
    };
    let c = ok(&two_pools("drain_spread: 0s"));
    assert_eq!(
        c.pools[0].health.drain_spread,
        secs(3),
        "kept from defaults"
    );
    assert_eq!(
        c.pools[1].health.drain_spread,
        Duration::ZERO,
        "the pool wins"
    );
    let c = ok(&two_pools("drain_spread: 500ms, fall: 2"));
    assert_eq!(c.pools[1].health.drain_spread, Duration::from_millis(500));
    let d = crate::config::describe(&c);
    assert!(d.contains("drain on (spread over 3s)"), "{d}");
    assert!(d.contains("drain on (spread over 500ms)"), "{d}");
    let c = ok(&pool_with("    health: { drain_spread: 0s }\n"));
    assert!(crate::config::describe(&c).contains("drain on (at once)"));
    let c = ok(&pool_with(
        "    health: { drain: false, drain_spread: 5s }\n",
    ));
    assert!(crate::config::describe(&c).contains("drain off"));
}

#[test]
fn zero_disables_idle_timeout_and_rebalance() {
    let c = ok(&pool_with(
        "    idle_timeout: 0s\n    rebalance: { interval: 0s }\n",
    ));
    assert_eq!(
        (c.pools[0].idle_timeout, c.pools[0].rebalance.interval),
        (None, None)
    );
    let c = ok(&pool_with("    idle_timeout: 10m\n"));
    assert_eq!(c.pools[0].idle_timeout, Some(secs(600)));
}

#[test]
fn networks_and_magic() {
    let cases = [
        ("{}", "bitcoin", [0xf9, 0xbe, 0xb4, 0xd9]),
        (
            "{ network: litecoin-testnet }",
            "litecoin-testnet",
            [0xfd, 0xd2, 0xc8, 0xf1],
        ),
        (
            "{ network: litecoin-regtest }",
            "litecoin-regtest",
            [0xfa, 0xbf, 0xb5, 0xda],
        ),
        (
            "{ network: bitcoin-testnet }",
            "bitcoin-testnet",
            [0x0b, 0x11, 0x09, 0x07],
        ),
        (
            "{ network: bitcoin-regtest }",
            "bitcoin-regtest",
            [0xfa, 0xbf, 0xb5, 0xda],
        ),
        ("{ magic: 0a0b0c0d }", "custom", [0x0a, 0x0b, 0x0c, 0x0d]),
        (
            "{ network: litecoin, magic: 12345678 }",
            "litecoin",
            [0x12, 0x34, 0x56, 0x78],
        ),
    ];
    for (health, network, magic) in cases {
        let c = ok(&format!(
            "defaults:\n  health: {{ network: bitcoin }}\n{POOL}    health: {health}\n"
        ));
        let h = &c.pools[0].health;
        assert_eq!((h.network.name(), h.magic), (network, magic), "{health}");
    }
    // A pool's network is not paired with a magic written for the defaults.
    let c = ok(&format!(
        "defaults:\n  health: {{ magic: 0a0b0c0d }}\n{POOL}    health: {{ network: bitcoin }}\n"
    ));
    assert_eq!(c.pools[0].health.magic, [0xf9, 0xbe, 0xb4, 0xd9]);
}

#[test]
fn backend_forms() {
    let c = ok(concat!(
        "pools:\n  - name: p\n    listen: [\"[::1]:9333\", 127.0.0.1:9334]\n    health: { probe: blockbook }\n",
        "    backends:\n      - \"[::1]:9130\"\n",
        "      - { name: b, addr: node.example:9130, backup: true, probe_url: \"https://u:pw@x/api/?t=1\" }\n",
    ));
    let p = &c.pools[0];
    assert_eq!(p.listen.len(), 2);
    let (a, b) = (&p.backends[0], &p.backends[1]);
    assert_eq!(
        (a.name.as_str(), a.addr.as_str(), a.backup),
        ("[::1]:9130", "[::1]:9130", false)
    );
    assert_eq!(
        (b.name.as_str(), b.addr.as_str(), b.backup),
        ("b", "node.example:9130", true)
    );
    let url = b
        .probe_url
        .as_ref()
        .map(|u| (u.expose().password(), u.to_string()));
    assert_eq!(url, Some((Some("pw"), "https://***@x/api/?***".to_owned())));
}

/// Rules on one pool's settings: what to add to [`POOL`], the path the error
/// names, a part of its message.
#[rustfmt::skip]
const POOL_RULES: &[(&str, &str, &str)] = &[
    ("bogus: 1", "pools[0].bogus", "unknown field `bogus`"),
    ("health: { bogus: 1 }", "pools[0].health.bogus", "unknown field"),
    ("connect_timeout: 5x", "pools[0].connect_timeout", "invalid duration `5x`"),
    ("connect_timeout: 0s", "pools[0].connect_timeout", "more than 0s"),
    ("idle_timeout: 1000years", "pools[0].idle_timeout", "too long"),
    ("health: { interval: 0s }", "pools[0].health.interval", "more than 0s"),
    ("health: { drain_spread: soon }", "pools[0].health.drain_spread", "invalid duration"),
    ("health: { timeout: 0ms }", "pools[0].health.timeout", "more than 0s"),
    ("quarantine: { base: 0s }", "pools[0].quarantine.base", "more than 0s"),
    ("quarantine: { max: 0s }", "pools[0].quarantine.max", "more than 0s"),
    ("keepalive: { idle: 0s }", "pools[0].keepalive.idle", "more than 0s"),
    ("keepalive: { idle: 10h }", "pools[0].keepalive.idle", "between 1s"),
    ("keepalive: { interval: 1500ms }", "pools[0].keepalive.interval", "whole seconds"),
    ("keepalive: { count: 0 }", "pools[0].keepalive.count", "1 to 127"),
    ("keepalive: { count: 128 }", "pools[0].keepalive.count", "1 to 127"),
    ("max_connections: 0", "pools[0].max_connections", "nonzero"),
    ("quarantine: { failures: 0 }", "pools[0].quarantine.failures", "nonzero"),
    ("quarantine: { refused_clients: 0 }", "pools[0].quarantine.refused_clients", "nonzero"),
    ("health: { stall_rule: poll }", "pools[0].health.stall_rule", "unknown variant `poll`"),
    ("health: { fall: 0 }", "pools[0].health.fall", "nonzero"),
    ("health: { rise: 0 }", "pools[0].health.rise", "nonzero"),
    ("rebalance: { min_imbalance: 0 }", "pools[0].rebalance.min_imbalance", "nonzero"),
    ("quarantine: { base: 10m, max: 5m }", "pools[0].quarantine.max", "shorter than"),
    ("quarantine: { base: 1h }", "pools[0].quarantine.base", "shorter than"),
    ("health: { network: dogecoin }", "pools[0].health.network", "unknown variant"),
    ("health: { magic: fbc0b6 }", "pools[0].health.magic", "8 hex digits"),
    ("health: { magic: fbc0b6dx }", "pools[0].health.magic", "8 hex digits"),
    ("health: { probe: tcp }", "pools[0].health.probe", "unknown variant `tcp`"),
    ("allow: [10.0.0.0/33]", "pools[0].allow[0]", "not a CIDR"),
    ("allow: []", "pools[0].allow", "refuse every client"),
];

/// Rules on backends: what replaces `[h:1]` in [`POOL`], path, message part.
#[rustfmt::skip]
const BACKEND_RULES: &[(&str, &str, &str)] = &[
    ("[]", "pools[0].backends", "at least one backend"),
    ("[h]", "pools[0].backends[0]", "no port"),
    ("[{ addr: h }]", "pools[0].backends[0].addr", "no port"),
    ("[{ addr: \"h:0\" }]", "pools[0].backends[0].addr", "1 to 65535"),
    ("[{ addr: \"h:x\" }]", "pools[0].backends[0].addr", "1 to 65535"),
    ("[{ addr: \":9333\" }]", "pools[0].backends[0].addr", "empty host"),
    ("[{ addr: \"::1:9333\" }]", "pools[0].backends[0].addr", "brackets"),
    ("[{ addr: \"[zz]:9333\" }]", "pools[0].backends[0].addr", "IPv6"),
    ("[{ addr: \"a b:1\" }]", "pools[0].backends[0].addr", "letters, digits"),
    ("[{ name: x }]", "pools[0].backends[0]", "needs `addr` (or `discover`)"),
    ("[{ discover: \"n.test:9333\" }]", "pools[0].backends[0]", "needs a `name`"),
    ("[{ name: x, addr: h:1, discover: \"n.test:9333\" }]", "pools[0].backends[0]", "not both"),
    ("[{ name: x, discover: \"n.test\" }]", "pools[0].backends[0].discover", "no port"),
    ("[{ name: x, discover: \"n.test:port\" }]", "pools[0].backends[0].discover", "1 to 65535"),
    ("[{ name: x, discover: \"127.0.0.1:9333\" }]", "pools[0].backends[0].discover", "static backend"),
    ("[{ name: x, discover: \"_p2p.n.test\" }]", "pools[0].backends[0].discover", "_p2p._tcp"),
    ("[{ name: x, discover: \"_p2p._tcp.n.test:1\" }]", "pools[0].backends[0].discover", "carries the port"),
    ("[{ name: x, discover: \"a..b:1\" }]", "pools[0].backends[0].discover", "empty label"),
    ("[h:1, { name: h:1, discover: \"n.test:1\" }]", "pools[0].backends[1].name", "duplicate"),
    ("[{ name: x, discover: \"n.test:1\", probe_url: \"http://n/\" }]", "pools[0].backends[0].probe_url", "`{ip}`"),
    ("[{ addr: h:1, probe_url: \"http://{ip}:1/\" }]", "pools[0].backends[0].probe_url", "one URL"),
    ("[{ name: x, discover: \"n.test:1\", probe_url: \"ftp://{ip}/\" }]", "pools[0].backends[0].probe_url", "http or https"),
    ("[{ addr: h:1, bogus: 1 }]", "pools[0].backends[0].bogus", "expected one of `name`"),
    ("[h:1, h:2, h:1]", "pools[0].backends[2]", "duplicate backend name `h:1`"),
    ("[{name: a, addr: h:1}, {name: a, addr: h:2}]", "pools[0].backends[1].name", "`a`"),
    ("[{ name: a/b, addr: h:1 }]", "pools[0].backends[0].name", "without `/`"),
    ("[{ addr: h:1, probe_url: \"not a url\" }]", "pools[0].backends[0].probe_url", "not a URL"),
    ("[{ addr: h:1, probe_url: \"ftp://x/\" }]", "pools[0].backends[0].probe_url", "http or https"),
];

/// Rules across the file: the text (`$POOL` stands for [`POOL`]), path, message part.
#[rustfmt::skip]
const FILE_RULES: &[(&str, &str, &str)] = &[
    ("$POOL\nbogus: 1", "bogus", "unknown field `bogus`"),
    ("defaults:\n  discovery: { resolver: dns.test }\n$POOL", "defaults.discovery.resolver", "not a DNS server"),
    ("defaults:\n  discovery: { interval: 0s }\n$POOL", "defaults.discovery.interval", "more than 0s"),
    ("defaults:\n  discovery: { bogus: 1 }\n$POOL", "defaults.discovery.bogus", "unknown field"),
    ("defaults:\n  keepalive: { bogus: 1 }\n$POOL", "defaults.keepalive.bogus", "unknown field"),
    ("defaults:\n  quarantine: { max: 1m }\n$POOL", "defaults.quarantine.max", "shorter than"),
    ("defaults:\n  connect_timeout: 0s\n$POOL", "defaults.connect_timeout", "more than 0s"),
    ("admin: { listen: 127.0.0.1:9900, allow: [] }\n$POOL", "admin.allow", "admin: loopback only"),
    ("admin: { listen: 127.0.0.1:9900, allow: nope }\n$POOL", "admin.allow", "not a CIDR"),
    ("admin: { listen: 127.0.0.1:9333 }\n$POOL", "pools[0].listen", "used by admin.listen"),
    ("log: { format: xml }\n$POOL", "log.format", "unknown variant `xml`"),
    ("log: { level: \"a=b=c\" }\n$POOL", "log.level", "not a tracing filter"),
    ("pools: []", "pools", "at least one pool"),
    ("$POOL  - { name: p, listen: 127.0.0.1:1, backends: [h:1] }", "pools[1].name", "duplicate"),
    ("$POOL  - { name: q, listen: 127.0.0.1:9333, backends: [h:1] }", "pools[1].listen", "used by"),
    ("$POOL  - { name: q, listen: [127.0.0.1:1, 0.0.0.0:9333], backends: [h:1] }", "pools[1].listen[1]", "used by pools[0].listen"),
    ("pools:\n  - { name: Bad.Name, listen: 127.0.0.1:1, backends: [h:1] }", "pools[0].name", "[a-z0-9_-]+"),
    ("pools:\n  - { name: p, listen: [], backends: [h:1] }", "pools[0].listen", "at least one listen"),
    ("pools:\n  - { name: p, listen: localhost:1, backends: [h:1] }", "pools[0].listen", "not an ip:port"),
];

fn check_rules(rules: &[(&str, &str, &str)], text: impl Fn(&str) -> String) {
    for (input, path, needle) in rules {
        let e = err(&text(input));
        assert_eq!(e.yaml_path(), Some(*path), "{input}: {e}");
        assert!(e.message().contains(needle), "{input}: {e}");
        assert!(e.line_column().is_some(), "{input}: {e}");
    }
}

#[test]
fn every_rule_names_its_path() {
    check_rules(POOL_RULES, |extra| format!("{POOL}    {extra}\n"));
    check_rules(BACKEND_RULES, |backends| POOL.replace("[h:1]", backends));
    check_rules(FILE_RULES, |text| text.replace("$POOL", POOL));
}

#[test]
fn listeners_that_can_coexist() {
    // Port 0 (any free port) never clashes; v4 and v6 wildcards are separate sockets.
    ok(
        &format!("{POOL}  - {{ name: q, listen: 127.0.0.1:0, backends: [h:1] }}\n")
            .replace("9333", "0"),
    );
    ok(&POOL.replace("127.0.0.1:9333", "[\"0.0.0.0:9333\", \"[::]:9333\"]"));
}

#[test]
fn allow_lists() {
    let c = ok(&format!(
        "admin: {{ listen: 127.0.0.1:9900 }}\n{POOL}    allow: [10.0.0.0/8, 192.0.2.7, \"::1\"]\n"
    ));
    let allow: Vec<String> = c.pools[0].allow.iter().map(ToString::to_string).collect();
    assert_eq!(allow, ["10.0.0.0/8", "192.0.2.7/32", "::1/128"]);
    let admin = c
        .admin
        .map(|a| a.allow.iter().map(ToString::to_string).collect::<Vec<_>>());
    assert_eq!(
        admin,
        Some(vec!["127.0.0.1/32".to_owned(), "::1/128".to_owned()])
    );
    let c = ok(&format!("defaults:\n  allow: 10.0.0.0/8\n{POOL}"));
    assert_eq!(c.pools[0].allow.len(), 1);
}

#[test]
fn contract_style_ipv6_flow_lists_are_read() {
    let c = ok(&format!(
        "admin:\n  listen: 127.0.0.1:9900\n  allow: [127.0.0.1/32, ::1/128]\n{POOL}    allow: [ ::1 ]\n"
    ));
    assert_eq!(c.pools[0].allow.len(), 1);
}

#[test]
fn secrets_are_masked() {
    let with = |b: &str| POOL.replace("[h:1]", &format!("[{{ addr: h:1, {b} }}]"));
    let e = err(&with("probe_url: \"ftp://user:hunter2@h/x?token=s3cr3t\""));
    assert!(e.message().contains("ftp://***@h/x?***"), "{e}");
    // A secret under the wrong key is echoed by serde's type error: masked too.
    let e = err(&with("backup: \"http://u:hunter2@h/?token=s3cr3t\""));
    assert!(e.message().contains("http://***@h/?***"), "{e}");
    let e = err(&POOL.replace("[h:1]", "[\"u:hunter2@h:1?token=s3cr3t\"]"));
    for e in [
        e,
        err(&with("probe_url: \"http://user:hunter2@/x?token=s3cr3t\"")),
    ] {
        let shown = format!("{e} {e:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("s3cr3t"),
            "{shown}"
        );
    }
}

#[test]
fn log_section() {
    let c = ok(&format!(
        "log: {{ level: \"pin_proxy=debug,warn\", format: text, file: /tmp/p.log }}\n{POOL}"
    ));
    assert_eq!(c.log.level, "pin_proxy=debug,warn");
    assert_eq!(c.log.format, LogFormat::Text);
}

#[test]
fn whole_file_errors_have_positions() {
    // A syntax error keeps the path of the enclosing node it broke off in.
    let e = err("pools:\n  - name: p\n    listen: [127.0.0.1:1\n");
    assert_eq!(
        (e.yaml_path(), e.line_column()),
        (Some("pools[0].listen"), Some((4, 1))),
        "{e}"
    );
    let e = err("\"a\n");
    assert_eq!(
        (e.yaml_path(), e.line_column()),
        (None, Some((2, 1))),
        "{e}"
    );
    assert!(
        err("- a\n")
            .message()
            .contains("expected a mapping of `admin`")
    );
    assert_eq!(
        err(POOL.replace("pools", "pool").as_str()).yaml_path(),
        Some("pool")
    );
    rejects("pools: []\n", "pools", "at least one pool");
    assert!(err("").message().contains("missing field `pools`"));
}

#[test]
fn errors_name_file_path_and_position() {
    let e = err(
        "pools:\n  - name: p\n    listen: 127.0.0.1:1\n    backends:\n      - { addr: \"h:0\" }\n",
    );
    assert_eq!(e.line_column(), Some((5, 17)));
    assert!(
        e.to_string()
            .starts_with("t.yaml: pools[0].backends[0].addr: `h:0` is not"),
        "{e}"
    );
    assert!(e.to_string().ends_with(" (line 5, column 17)"), "{e}");
    // Found after deserializing, located by path.
    let e = err(&POOL.replace("[h:1]", "[h:1, h:1]"));
    assert_eq!(e.line_column(), Some((4, 21)), "{e}");
}

#[test]
fn state_file_is_a_path_to_a_file() {
    let c = ok(&format!(
        "state_file: /var/lib/pin-proxy/state.json\n{POOL}"
    ));
    assert_eq!(
        c.state_file.as_deref(),
        Some(Path::new("/var/lib/pin-proxy/state.json"))
    );
    rejects(
        &format!("state_file: \"\"\n{POOL}"),
        "state_file",
        "must not be empty",
    );
    rejects(
        &format!("state_file: /\n{POOL}"),
        "state_file",
        "names no file",
    );
    rejects(&format!("state_file: [a]\n{POOL}"), "state_file", "");
}

#[test]
fn pid_file_is_a_path_to_a_file() {
    let c = ok(&format!("pid_file: /run/pin-proxy/pid\n{POOL}"));
    assert_eq!(c.pid_file.as_deref(), Some(Path::new("/run/pin-proxy/pid")));
    assert_eq!(ok(POOL).pid_file, None);
    rejects(
        &format!("pid_file: \"\"\n{POOL}"),
        "pid_file",
        "names no file",
    );
    rejects(&format!("pid_file: /\n{POOL}"), "pid_file", "names no file");
}

#[test]
fn discover_entries_and_discovery_settings_are_read() {
    let c = ok(
        "defaults:\n  discovery: { interval: 10s, resolver: 127.0.0.1:5353 }\n\
                pools:\n  - name: p\n    listen: 127.0.0.1:9333\n    discovery: { hold: 1m }\n    \
                backends:\n      - h:1\n      - { name: ltc, discover: \"nodes.test:9333\", probe_url: \"http://{ip}:9130/api/\" }\n      \
                - { name: srv, discover: \"_p2p._tcp.nodes.test\", backup: true }\n",
    );
    let p = &c.pools[0];
    assert_eq!(p.backends.len(), 1, "only the static one is a backend");
    assert_eq!(p.discover.len(), 2);
    let (ltc, srv) = (&p.discover[0], &p.discover[1]);
    assert_eq!(ltc.name, "ltc");
    assert_eq!(
        ltc.query,
        crate::config::DiscoverQuery::Addrs {
            host: "nodes.test".into(),
            port: 9333
        }
    );
    assert_eq!(
        ltc.probe_url.as_ref().unwrap().to_string(),
        "http://{ip}:9130/api/"
    );
    assert_eq!(
        srv.query,
        crate::config::DiscoverQuery::Srv("_p2p._tcp.nodes.test".into())
    );
    assert!(srv.backup);
    assert_eq!(
        p.discovery.interval,
        Duration::from_secs(10),
        "from defaults"
    );
    assert_eq!(p.discovery.hold, Duration::from_secs(60), "the pool's own");
    assert_eq!(
        p.discovery.resolver,
        Some("127.0.0.1:5353".parse().unwrap())
    );
    let plain = ok(POOL);
    assert_eq!(plain.pools[0].discovery.interval, Duration::from_secs(30));
    assert_eq!(plain.pools[0].discovery.hold, Duration::from_secs(300));
    assert_eq!(plain.pools[0].discovery.resolver, None);
}

#[test]
fn flow_nesting_beyond_the_limit_is_refused_before_parsing() {
    let deep = |n: usize| format!("{POOL}x: {}{}\n", "[".repeat(n), "]".repeat(n));
    // At the limit it parses (and fails on the unknown key, as it should).
    let e = err(&deep(256));
    assert!(e.message().contains("unknown field `x`"), "{e}");
    // Beyond it: refused where it went too deep, at once even when huge.
    for n in [257, 1_000_000] {
        let e = err(&deep(n));
        assert!(e.message().contains("more than 256 levels"), "{e}");
        assert_eq!(e.line_column(), Some((5, 260)), "{e}");
    }
    // Balanced brackets in values never add up.
    ok(&format!("{POOL}{}", "# [x] {y} [[z]]\n".repeat(1000)));
}

#[test]
fn an_error_echoes_at_most_512_bytes_of_its_input() {
    let name = "K".repeat(3 << 20);
    let e = err(&format!(
        "pools:\n  - name: \"{name}\"\n    listen: 127.0.0.1:1\n    backends: [h:1]\n"
    ));
    let shown = e.to_string();
    assert!(shown.len() < 2048, "{} bytes", shown.len());
    assert!(
        e.message().starts_with("pool name `KKK"),
        "{}",
        clipped(&shown)
    );
    assert!(e.message().ends_with('…'), "{}", clipped(&shown));
}

fn clipped(text: &str) -> &str {
    text.get(..200).unwrap_or(text)
}

#[test]
fn a_keepalive_budget_beyond_the_kernels_limit_is_refused() {
    // 16000 s x 127: 23.5 days, taken; 17000 s x 127: 25 days, over i32 ms.
    ok(&format!(
        "defaults:\n  keepalive: {{ idle: 60s, interval: 16000s, count: 127 }}\n{POOL}"
    ));
    rejects(
        &format!("defaults:\n  keepalive: {{ idle: 60s, interval: 17000s, count: 127 }}\n{POOL}"),
        "defaults.keepalive",
        "over the kernel's limit",
    );
    rejects(
        &pool_with("    keepalive: { interval: 17000s, count: 127 }\n"),
        "pools[0].keepalive",
        "over the kernel's limit",
    );
}
