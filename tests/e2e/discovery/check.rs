//! `pin-proxy check` on discover entries: the forms the contract gives pass,
//! and a bad discover value or resolver is refused (exit 2) naming its
//! YAML path. No DNS is needed: `check` looks nothing up.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_pin-proxy");

fn check(yaml: &str) -> (Output, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let out = Command::new(BIN)
        .arg("check")
        .arg("-c")
        .arg(&path)
        .env_remove("PIN_PROXY_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run pin-proxy check");
    (out, path.display().to_string())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One pool `p` with `pool_extra` keys and a backend list `backends`,
/// after `top` (top-level keys).
fn yaml(top: &str, pool_extra: &str, backends: &str) -> String {
    format!(
        "{top}pools:\n  - name: p\n    listen: 127.0.0.1:9333\n{pool_extra}    backends:\n{backends}"
    )
}

#[test]
fn discover_entries_in_every_documented_form_pass() {
    let backends: String = [
        "{ name: ltc, discover: \"nodes.example.net:9333\" }",
        "{ name: spare, discover: \"_p2p._tcp.example.net\", backup: true }",
        "{ name: bb, discover: \"bb.example.net:9130\", probe_url: \"http://{ip}:{port}/api/\" }",
        "10.0.0.9:9333",
        "{ name: fixed, addr: 10.0.0.10:9333 }",
    ]
    .iter()
    .map(|b| format!("      - {b}\n"))
    .collect();
    let cases = [
        ("defaults:\n  discovery: { interval: 30s, hold: 5m }\n", ""),
        (
            "",
            "    discovery: { interval: 10s, hold: 1m, resolver: 127.0.0.1:5353 }\n",
        ),
        ("defaults:\n  discovery: { resolver: 10.0.0.53 }\n", ""),
        ("", "    discovery: { resolver: \"[::1]:53\" }\n"),
        ("", ""),
    ];
    for (top, pool) in cases {
        let config = yaml(top, pool, &backends);
        let (out, _) = check(&config);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{config}\n{stderr}");
        assert!(stdout.contains("pool "), "{stdout}");
    }
}

#[test]
fn bad_discover_values_and_resolvers_are_refused_naming_their_path() {
    let entry = |value: &str| format!("      - {{ name: ltc, discover: \"{value}\" }}\n");
    let fine = entry("nodes.example.net:9333");
    let cases = [
        (
            yaml("", "", &entry("no port here")),
            "pools[0].backends[0].discover",
        ),
        (
            yaml("", "", &entry("host:notaport")),
            "pools[0].backends[0].discover",
        ),
        (
            yaml("", "", &entry("nodes.example.net:99999")),
            "pools[0].backends[0].discover",
        ),
        (
            yaml("", "", &entry("_p2p.nodes.test")),
            "pools[0].backends[0].discover",
        ),
        (yaml("", "", &entry("")), "pools[0].backends[0].discover"),
        (
            yaml("", "    discovery: { resolver: dns.example.net }\n", &fine),
            "pools[0].discovery.resolver",
        ),
        (
            yaml(
                "defaults:\n  discovery: { resolver: \"10.0.0.53:dns\" }\n",
                "",
                &fine,
            ),
            "defaults.discovery.resolver",
        ),
        (
            yaml("", "    discovery: { interval: soon }\n", &fine),
            "pools[0].discovery.interval",
        ),
        (
            yaml("", "    discovery: { hold: 5m, bogus: 1 }\n", &fine),
            "bogus",
        ),
    ];
    for (config, want) in cases {
        let (out, path) = check(&config);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{config}\n{stderr}");
        assert!(stderr.contains(&path), "file not named:\n{stderr}");
        assert!(
            stderr.contains(want),
            "want `{want}` for\n{config}\n{stderr}"
        );
    }
}
