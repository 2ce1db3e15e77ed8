//! Table tests of the reload plan.

use std::path::Path;

use super::*;

/// Two pools; each case edits one line of it.
const BASE: &str = "\
admin: { listen: 127.0.0.1:9900 }
log: { level: info }
pools:
  - name: p
    listen: 127.0.0.1:9333
    health: { interval: 30s }
    backends:
      - { name: a, addr: 10.0.0.1:9333 }
      - { name: b, addr: 10.0.0.2:9333 }
  - name: q
    listen: 127.0.0.1:9334
    backends: [10.0.0.3:9333]
";

fn config(yaml: &str) -> Config {
    match Config::parse(yaml, Path::new("test.yaml")) {
        Ok(c) => c,
        Err(e) => panic!("{e}\n{yaml}"),
    }
}

fn edit(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from:?} not in the base config");
    BASE.replacen(from, to, 1)
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address")
}

/// The plan changing only pool `p` (empty when `change` is).
fn p(change: PoolPlan<'static>) -> ReloadPlan<'static> {
    let keep = PoolPlan {
        name: "p",
        ..change
    };
    ReloadPlan {
        keep: if keep.is_empty() { vec![] } else { vec![keep] },
        ..ReloadPlan::default()
    }
}

#[test]
fn plans() {
    let q_pool = "  - name: q\n    listen: 127.0.0.1:9334\n    backends: [10.0.0.3:9333]\n";
    let r_pool = "  - name: r\n    listen: 127.0.0.1:9335\n    backends: [10.0.0.3:9333]\n";
    let cases: Vec<(&str, String, ReloadPlan<'static>)> = vec![
        ("identical", BASE.to_owned(), ReloadPlan::default()),
        (
            "pool added",
            format!("{BASE}{r_pool}"),
            ReloadPlan {
                bind: vec!["r"],
                ..ReloadPlan::default()
            },
        ),
        (
            "pool removed",
            edit(q_pool, ""),
            ReloadPlan {
                stop: vec!["q"],
                ..ReloadPlan::default()
            },
        ),
        (
            "pool renamed: removed and added",
            edit("name: q", "name: r"),
            ReloadPlan {
                bind: vec!["r"],
                stop: vec!["q"],
                ..ReloadPlan::default()
            },
        ),
        (
            "listen added",
            edit(
                "listen: 127.0.0.1:9333",
                "listen: [127.0.0.1:9333, 127.0.0.1:9336]",
            ),
            p(PoolPlan {
                listen_added: vec![addr("127.0.0.1:9336")],
                ..PoolPlan::default()
            }),
        ),
        (
            "listen removed",
            edit("listen: 127.0.0.1:9333", "listen: 127.0.0.1:9336"),
            p(PoolPlan {
                listen_added: vec![addr("127.0.0.1:9336")],
                listen_removed: vec![addr("127.0.0.1:9333")],
                ..PoolPlan::default()
            }),
        ),
        (
            "backend added",
            edit(
                "      - { name: b, addr: 10.0.0.2:9333 }\n",
                "      - { name: b, addr: 10.0.0.2:9333 }\n      - { name: c, addr: 10.0.0.4:9333 }\n",
            ),
            p(PoolPlan {
                backends_added: vec!["c"],
                ..PoolPlan::default()
            }),
        ),
        (
            "backend removed",
            edit("      - { name: a, addr: 10.0.0.1:9333 }\n", ""),
            p(PoolPlan {
                backends_removed: vec!["a"],
                ..PoolPlan::default()
            }),
        ),
        (
            "backend addr changed: another node, removed and added",
            edit("addr: 10.0.0.2:9333", "addr: 10.0.0.5:9333"),
            p(PoolPlan {
                backends_added: vec!["b"],
                backends_removed: vec!["b"],
                ..PoolPlan::default()
            }),
        ),
        (
            "backend made a backup: changed in place",
            edit(
                "addr: 10.0.0.2:9333 }",
                "addr: 10.0.0.2:9333, backup: true }",
            ),
            p(PoolPlan {
                backends_changed: vec!["b"],
                ..PoolPlan::default()
            }),
        ),
        (
            "backends reordered: nothing added or removed",
            edit(
                "      - { name: a, addr: 10.0.0.1:9333 }\n      - { name: b, addr: 10.0.0.2:9333 }\n",
                "      - { name: b, addr: 10.0.0.2:9333 }\n      - { name: a, addr: 10.0.0.1:9333 }\n",
            ),
            ReloadPlan::default(),
        ),
        (
            "health interval changed",
            edit("interval: 30s", "interval: 10s"),
            p(PoolPlan {
                settings_changed: true,
                ..PoolPlan::default()
            }),
        ),
        (
            "admin listen changed",
            edit("listen: 127.0.0.1:9900", "listen: 127.0.0.1:9901"),
            ReloadPlan {
                restart_only: vec!["admin.listen"],
                ..ReloadPlan::default()
            },
        ),
        (
            "admin removed",
            edit("admin: { listen: 127.0.0.1:9900 }\n", ""),
            ReloadPlan {
                restart_only: vec!["admin.listen", "admin.allow", "admin.hosts"],
                ..ReloadPlan::default()
            },
        ),
        (
            "admin hosts added",
            edit(
                "listen: 127.0.0.1:9900 }",
                "listen: 127.0.0.1:9900, hosts: [proxy.example] }",
            ),
            ReloadPlan {
                restart_only: vec!["admin.hosts"],
                ..ReloadPlan::default()
            },
        ),
        (
            "log level and format changed",
            edit("level: info", "level: debug, format: text"),
            ReloadPlan {
                restart_only: vec!["log.level", "log.format"],
                ..ReloadPlan::default()
            },
        ),
    ];
    let old = config(BASE);
    for (name, yaml, want) in &cases {
        let new = config(yaml);
        assert_eq!(&plan(&old, &new), want, "case: {name}");
    }
}

fn bound(configured: &str, local: &str) -> Bound {
    Bound {
        configured: addr(configured),
        local: addr(local),
    }
}

/// A port-0 listener is the same listener whether the new config writes
/// `:0` again or the port it got; only an address no listener serves is
/// bound.
#[test]
fn port_zero_listeners_are_recognised_in_bound_terms() {
    let with = |listen: &str| config(&edit("listen: 127.0.0.1:9333", listen));
    let old = with("listen: [127.0.0.1:0, 127.0.0.1:0]");
    let running = [
        bound("127.0.0.1:0", "127.0.0.1:40001"),
        bound("127.0.0.1:0", "127.0.0.1:40002"),
    ];
    let cases = [
        ("listen: 127.0.0.1:0", vec![], vec![]),
        ("listen: 127.0.0.1:40001", vec![], vec!["127.0.0.1:40002"]),
        ("listen: [127.0.0.1:40002, 127.0.0.1:0]", vec![], vec![]),
        (
            "listen: [127.0.0.1:40002, 127.0.0.1:9336]",
            vec!["127.0.0.1:9336"],
            vec!["127.0.0.1:40001"],
        ),
    ];
    for (listen, added, removed) in cases {
        let new = with(listen);
        let by_name = |name: &str| (name == "p").then(|| running.to_vec());
        let (old_b, new_b) = in_bound_terms(&old, &new, by_name);
        let got = plan(&old_b, &new_b);
        let want = p(PoolPlan {
            listen_added: added.into_iter().map(addr).collect(),
            listen_removed: removed.into_iter().map(addr).collect(),
            ..PoolPlan::default()
        });
        assert_eq!(got, want, "case: {listen}");
    }
}

#[test]
fn changes_name_the_pools_and_backends_of_the_plan() {
    let old = config(BASE);
    let new = config(
        &edit("name: q", "name: r")
            .replace(
                "      - { name: a, addr: 10.0.0.1:9333 }\n",
                "      - { name: c, addr: 10.0.0.9:9333 }\n",
            )
            .replace(
                "{ name: b, addr: 10.0.0.2:9333 }",
                "{ name: b, addr: 10.0.0.2:9333, backup: true }",
            ),
    );
    let names = |l: &[&str]| -> Vec<String> { l.iter().map(|s| (*s).to_owned()).collect() };
    assert_eq!(
        plan(&old, &new).changes(),
        Reloaded {
            pools_added: names(&["r"]),
            pools_removed: names(&["q"]),
            pools_changed: names(&["p"]),
            backends_added: names(&["p/c"]),
            backends_removed: names(&["p/a"]),
            backends_changed: names(&["p/b"]),
        }
    );
    assert_eq!(plan(&old, &old).changes(), Reloaded::default());
}

/// `proxy_protocol` and `source` are pool settings: a change applies to
/// new connections; no listener is bound again for it.
#[test]
fn client_identity_changes_are_pool_settings() {
    let old = config(BASE);
    for (from, to) in [
        (
            "    health: { interval: 30s }\n",
            "    health: { interval: 30s }\n    proxy_protocol: { from: 10.0.0.0/8 }\n",
        ),
        (
            "    health: { interval: 30s }\n",
            "    health: { interval: 30s }\n    source: client\n",
        ),
        (
            "    health: { interval: 30s }\n",
            "    health: { interval: 30s }\n    source: 127.0.0.2\n",
        ),
    ] {
        let new = config(&edit(from, to));
        let want = p(PoolPlan {
            settings_changed: true,
            ..PoolPlan::default()
        });
        assert_eq!(plan(&old, &new), want, "{to}");
    }
    // A timeout changed is a change too.
    let with = |timeout: &str| {
        config(&edit(
            "    health: { interval: 30s }\n",
            &format!(
                "    health: {{ interval: 30s }}\n    proxy_protocol: {{ from: 10.0.0.0/8, timeout: {timeout} }}\n"
            ),
        ))
    };
    let (three, five) = (with("3s"), with("5s"));
    assert!(
        plan(&three, &five)
            .kept("p")
            .is_some_and(|p| p.settings_changed)
    );
    assert_eq!(plan(&three, &with("3s")), ReloadPlan::default());
}
