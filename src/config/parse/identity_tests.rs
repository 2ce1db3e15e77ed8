//! Tests of `proxy_protocol` and `source`.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use crate::config::{BackendSource, Config, ConfigError, IpNet, ProxyProtocol, describe, warnings};

const POOL: &str = "pools:\n  - name: p\n    listen: 127.0.0.1:9333\n    backends: [h:1]\n";

/// A second pool, `q`, to add after [`POOL`]'s.
const POOL_Q: &str = "  - name: q\n    listen: 127.0.0.1:9334\n    backends: [h:2]\n";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("t.yaml"))
}

fn ok(text: &str) -> Config {
    parse(text).unwrap_or_else(|e| panic!("expected a valid config, got: {e}\n{text}"))
}

/// [`POOL`] with `line` (indented 4) added to the pool.
fn pool_with(line: &str) -> String {
    format!("{POOL}    {line}\n")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("IP")
}

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|n| n.parse().expect("CIDR")).collect()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn none_by_default_and_the_kernel_chooses_the_source() {
    let c = ok(POOL);
    let p = &c.pools[0];
    assert_eq!((&p.proxy_protocol, p.source), (&None, BackendSource::Proxy));
    assert!(!p.needs_transparent());
    assert!(c.transparent_pools().is_empty());
}

#[test]
fn proxy_protocol_takes_cidrs_and_bare_ips_with_a_3s_default_timeout() {
    let cases = [
        (
            "proxy_protocol: { from: [10.0.0.0/8, 192.168.1.7] }",
            vec!["10.0.0.0/8", "192.168.1.7/32"],
            secs(3),
        ),
        (
            "proxy_protocol: { from: \"fd00::/8\", timeout: 500ms }",
            vec!["fd00::/8"],
            Duration::from_millis(500),
        ),
        (
            "proxy_protocol: { from: [\"::1\"], timeout: 10s }",
            vec!["::1/128"],
            secs(10),
        ),
    ];
    for (line, from, timeout) in cases {
        let c = ok(&pool_with(line));
        let want = ProxyProtocol {
            from: nets(&from),
            timeout,
        };
        assert_eq!(c.pools[0].proxy_protocol, Some(want), "{line}");
    }
}

#[test]
fn trusted_senders_are_matched_as_allow_matches_clients() {
    let c = ok(&pool_with("proxy_protocol: { from: [10.0.0.0/8] }"));
    let pp = c.pools[0].proxy_protocol.as_ref().expect("enabled");
    assert!(pp.trusts(ip("10.9.8.7")));
    assert!(pp.trusts(ip("::ffff:10.9.8.7")), "IPv4-mapped IPv6");
    assert!(!pp.trusts(ip("11.0.0.1")));
}

/// Key by key, the pool wins: `from` and `timeout` each come from the
/// pool when it sets them, else from `defaults`.
#[test]
fn proxy_protocol_merges_key_by_key() {
    let defaults = "defaults:\n  proxy_protocol: { from: [10.0.0.0/8], timeout: 5s }\n";
    let c = ok(&format!(
        "{defaults}{POOL}    proxy_protocol: {{ timeout: 1s }}\n{POOL_Q}    \
         proxy_protocol: {{ from: [172.16.0.0/12] }}\n  \
         - {{ name: r, listen: 127.0.0.1:9335, backends: [h:3] }}\n"
    ));
    let got: Vec<(Vec<IpNet>, Duration)> = c
        .pools
        .iter()
        .map(|p| {
            let pp = p.proxy_protocol.clone().expect("enabled");
            (pp.from, pp.timeout)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (nets(&["10.0.0.0/8"]), secs(1)),
            (nets(&["172.16.0.0/12"]), secs(5)),
            (nets(&["10.0.0.0/8"]), secs(5)),
        ]
    );
}

/// A `defaults` timeout alone enables nothing: it is the timeout of the
/// pools that name their senders.
#[test]
fn a_defaults_timeout_without_from_waits_for_a_pools_from() {
    let c = ok(&format!(
        "defaults:\n  proxy_protocol: {{ timeout: 7s }}\n{POOL}{POOL_Q}    \
         proxy_protocol: {{ from: 10.0.0.1 }}\n"
    ));
    assert_eq!(c.pools[0].proxy_protocol, None);
    let q = c.pools[1].proxy_protocol.as_ref().map(|pp| pp.timeout);
    assert_eq!(q, Some(secs(7)));
}

#[test]
fn source_is_proxy_client_or_an_address() {
    let cases = [
        ("source: proxy", BackendSource::Proxy),
        ("source: client", BackendSource::Client),
        ("source: 10.0.0.5", BackendSource::Address(ip("10.0.0.5"))),
        ("source: 127.0.0.2", BackendSource::Address(ip("127.0.0.2"))),
        ("source: \"::1\"", BackendSource::Address(ip("::1"))),
        ("source: ::1", BackendSource::Address(ip("::1"))),
        (
            "source: 2001:db8::7",
            BackendSource::Address(ip("2001:db8::7")),
        ),
        // As the IPv4 address it is.
        (
            "source: \"::ffff:10.0.0.5\"",
            BackendSource::Address(ip("10.0.0.5")),
        ),
    ];
    for (line, want) in cases {
        assert_eq!(ok(&pool_with(line)).pools[0].source, want, "{line}");
    }
}

#[test]
fn the_pools_source_wins_over_defaults() {
    let c = ok(&format!(
        "defaults:\n  source: client\n{POOL}    source: 10.0.0.5\n{POOL_Q}"
    ));
    let sources: Vec<BackendSource> = c.pools.iter().map(|p| p.source).collect();
    assert_eq!(
        sources,
        [
            BackendSource::Address(ip("10.0.0.5")),
            BackendSource::Client
        ]
    );
    assert_eq!(
        c.pools
            .iter()
            .map(|p| p.needs_transparent())
            .collect::<Vec<_>>(),
        [false, true]
    );
    assert_eq!(c.transparent_pools(), ["q"]);
}

/// Rules: what to add to [`POOL`]'s pool, the path the error names, a part
/// of its message.
#[rustfmt::skip]
const POOL_RULES: &[(&str, &str, &str)] = &[
    ("proxy_protocol: { from: [] }", "pools[0].proxy_protocol.from", "an empty `from` trusts no sender; remove `proxy_protocol`"),
    ("proxy_protocol: { from: [10.0.0.0/8, 10.0.0.0/33] }", "pools[0].proxy_protocol.from[1]", "`10.0.0.0/33` is not a CIDR"),
    ("proxy_protocol: { from: lb.example }", "pools[0].proxy_protocol.from", "`lb.example` is not a CIDR"),
    ("proxy_protocol: { from: 10.0.0.1, timeout: 0s }", "pools[0].proxy_protocol.timeout", "more than 0s"),
    ("proxy_protocol: { from: 10.0.0.1, timeout: soon }", "pools[0].proxy_protocol.timeout", "invalid duration `soon`"),
    ("proxy_protocol: { timeout: 3s }", "pools[0].proxy_protocol", "needs `from`"),
    ("proxy_protocol: {}", "pools[0].proxy_protocol", "needs `from`"),
    ("proxy_protocol: { from: 10.0.0.1, version: 2 }", "pools[0].proxy_protocol.version", "unknown field `version`"),
    ("proxy_protocol: 10.0.0.0/8", "pools[0].proxy_protocol", "a `proxy_protocol` mapping"),
    ("source: node.example", "pools[0].source", "`node.example` is not `proxy`, `client` or an IP address"),
    ("source: 10.0.0.5:9333", "pools[0].source", "`10.0.0.5:9333` has a port; write the address alone"),
    ("source: 0.0.0.0", "pools[0].source", "`0.0.0.0` is the unspecified address, not usable as a source; write `proxy` to let the kernel choose"),
    ("source: \"::\"", "pools[0].source", "`::` is the unspecified address"),
    ("source: 224.0.0.1", "pools[0].source", "`224.0.0.1` is a multicast address, not usable as a source"),
    ("source: ff02::1", "pools[0].source", "`ff02::1` is a multicast address, not usable"),
    ("source: 255.255.255.255", "pools[0].source", "the broadcast address, not usable as a source"),
    ("source: fe80::1", "pools[0].source", "link-local"),
    ("source: [client]", "pools[0].source", "expected `proxy`, `client` or an IP address"),
];

/// Rules in `defaults`: the `defaults` body, path, message part.
#[rustfmt::skip]
const DEFAULTS_RULES: &[(&str, &str, &str)] = &[
    ("  proxy_protocol: { from: [] }", "defaults.proxy_protocol.from", "an empty `from`"),
    ("  proxy_protocol: { bogus: 1 }", "defaults.proxy_protocol.bogus", "unknown field"),
    ("  source: nowhere", "defaults.source", "`nowhere` is not `proxy`, `client` or an IP address"),
];

#[test]
fn every_error_names_its_path_line_and_column() {
    let cases = POOL_RULES
        .iter()
        .map(|(line, path, needle)| (pool_with(line), path, needle))
        .chain(
            DEFAULTS_RULES
                .iter()
                .map(|(body, path, needle)| (format!("defaults:\n{body}\n{POOL}"), path, needle)),
        );
    for (text, path, needle) in cases {
        let e = match parse(&text) {
            Ok(c) => panic!("expected an error, got {c:?}\n{text}"),
            Err(e) => e,
        };
        assert_eq!(e.yaml_path(), Some(*path), "{text}\n{e}");
        assert!(e.message().contains(needle), "want {needle:?} in: {e}");
        assert!(e.line_column().is_some(), "{e}");
    }
}

#[test]
fn check_shows_both_keys_per_pool() {
    let shown = describe(&ok(POOL));
    assert!(
        shown.contains("\n  proxy_protocol: none (no PROXY header is read)\n"),
        "{shown}"
    );
    assert!(
        shown.contains("\n  source: proxy (the kernel chooses)\n"),
        "{shown}"
    );
    let shown = describe(&ok(&format!(
        "{POOL}    proxy_protocol: {{ from: [10.0.0.0/8, 192.168.0.0/16] }}\n    source: client\n\
         {POOL_Q}    source: 10.0.0.5\n"
    )));
    for line in [
        "  proxy_protocol: from 10.0.0.0/8, 192.168.0.0/16 (header within 3s)",
        "  source: client (the client's own IP; needs CAP_NET_ADMIN or CAP_NET_RAW, see README \"Transparent source\")",
        "  source: 10.0.0.5 (backend connections are made from it)",
    ] {
        assert!(shown.contains(&format!("\n{line}\n")), "{line}\n{shown}");
    }
}

#[test]
fn trusting_every_sender_is_warned_about() {
    let warned = |from: &str| {
        warnings(&ok(&pool_with(&format!(
            "proxy_protocol: {{ from: {from} }}"
        ))))
        .into_iter()
        .any(|w| w.contains("trusts every sender"))
    };
    assert!(warned("0.0.0.0/0"));
    assert!(warned("[10.0.0.0/8, \"::/0\"]"));
    assert!(!warned("[10.0.0.0/8, \"fd00::/8\"]"));
}
