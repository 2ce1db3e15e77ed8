//! The rule that needs the host: no backend may be one of the instance's
//! own listen addresses (every connect would come back to the proxy and
//! nest until `max_connections`). Names are resolved and wildcard
//! listeners matched against the host's addresses, so this runs at `check`
//! and reload time, not inside the pure parse; what it cannot see (a name
//! that resolves to us later, a port-0 listener) is caught at run time
//! (`config::local`).

use std::net::{SocketAddr, ToSocketAddrs};

use super::error::{Invalid, invalid};
use super::locate::locate;
use crate::config::Config;
use crate::config::local::{is_local_ip, reaches};

/// Refuse the first backend that is one of `config`'s own listeners.
/// `resolve` turns a backend's `host:port` into addresses (empty when it
/// does not resolve: then nothing can be said); `is_local` says whether an
/// address is one of the host's. Only backends on a port some listener
/// uses are resolved, so a config of remote nodes costs no lookup.
pub(super) fn check(
    config: &Config,
    text: &str,
    resolve: impl Fn(&str) -> Vec<SocketAddr>,
    is_local: impl Fn(SocketAddr) -> bool,
) -> Result<(), Invalid> {
    let listeners: Vec<(SocketAddr, String)> = config
        .pools
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            let one = p.listen.len() == 1;
            p.listen.iter().enumerate().map(move |(k, l)| {
                let path = if one {
                    format!("pools[{i}].listen")
                } else {
                    format!("pools[{i}].listen[{k}]")
                };
                (*l, path)
            })
        })
        .filter(|(l, _)| l.port() != 0)
        .collect();
    for (i, pool) in config.pools.iter().enumerate() {
        for (j, b) in pool.backends.iter().enumerate() {
            let port = b
                .addr
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok());
            if !listeners.iter().any(|(l, _)| Some(l.port()) == port) {
                continue;
            }
            for to in resolve(&b.addr) {
                let Some((listen, listen_path)) =
                    listeners.iter().find(|(l, _)| reaches(to, *l, &is_local))
                else {
                    continue;
                };
                let path = format!("pools[{i}].backends[{j}]");
                let long = format!("{path}.addr");
                let path = if locate(text, &long).is_some() {
                    long
                } else {
                    path
                };
                let via = if b.addr == to.to_string() {
                    String::new()
                } else {
                    format!(" (it resolves to {to})")
                };
                return invalid(
                    path,
                    format!(
                        "backend `{}`{via} is this proxy's own listener {listen_path} ({listen}): \
                         every connect would come back to the proxy; give the node's own address",
                        b.addr
                    ),
                );
            }
        }
    }
    Ok(())
}

/// [`check`] with the system resolver and the host's routing table.
pub(super) fn check_host(config: &Config, text: &str) -> Result<(), Invalid> {
    check(
        config,
        text,
        |addr| {
            addr.to_socket_addrs()
                .map(Iterator::collect)
                .unwrap_or_default()
        },
        is_local_ip,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(yaml: &str, resolve: &[(&str, &str)], local: &[&str]) -> Result<(), Invalid> {
        let config = Config::parse(yaml, "t.yaml".as_ref()).unwrap();
        let resolve = |name: &str| -> Vec<SocketAddr> {
            resolve
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, a)| a.parse().unwrap())
                .collect()
        };
        let is_local = |a: SocketAddr| local.contains(&a.ip().to_string().as_str());
        check(&config, yaml, resolve, is_local)
    }

    const LIT: &[(&str, &str)] = &[
        ("127.0.0.1:29340", "127.0.0.1:29340"),
        ("10.1.2.3:29340", "10.1.2.3:29340"),
        ("localhost:29340", "127.0.0.1:29340"),
        ("10.0.0.9:9333", "10.0.0.9:9333"),
    ];

    #[test]
    fn a_backend_on_an_own_listener_is_refused_with_its_path() {
        let yaml =
            "pools:\n  - name: p\n    listen: 127.0.0.1:29340\n    backends: [127.0.0.1:29340]\n";
        let err = run(yaml, LIT, &[]).unwrap_err();
        assert_eq!(err.path, "pools[0].backends[0]");
        assert!(
            err.message.contains("own listener pools[0].listen"),
            "{}",
            err.message
        );

        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:29340\n    backends: [{ name: n, addr: \"localhost:29340\" }]\n";
        let err = run(yaml, LIT, &[]).unwrap_err();
        assert_eq!(err.path, "pools[0].backends[0].addr");
        assert!(
            err.message.contains("resolves to 127.0.0.1:29340"),
            "{}",
            err.message
        );
    }

    #[test]
    fn wildcards_match_the_hosts_addresses_and_other_pools_count() {
        let wild =
            "pools:\n  - name: p\n    listen: 0.0.0.0:29340\n    backends: [10.1.2.3:29340]\n";
        assert!(run(wild, LIT, &["10.1.2.3"]).is_err(), "own IP");
        assert!(run(wild, LIT, &[]).is_ok(), "another host's IP");
        let cross = "pools:\n  - name: a\n    listen: [127.0.0.1:1, 0.0.0.0:29340]\n    backends: [10.0.0.9:9333]\n  \
                     - name: b\n    listen: 127.0.0.1:2\n    backends: [10.0.0.9:9333, localhost:29340]\n";
        let err = run(cross, LIT, &[]).unwrap_err();
        assert_eq!(err.path, "pools[1].backends[1]");
        assert!(
            err.message.contains("pools[0].listen[1]"),
            "{}",
            err.message
        );
    }

    #[test]
    fn unresolved_names_other_ports_and_port_zero_pass() {
        let ok = [
            "pools:\n  - name: p\n    listen: 127.0.0.1:29340\n    backends: [nowhere.invalid:29340]\n",
            "pools:\n  - name: p\n    listen: 127.0.0.1:29340\n    backends: [10.0.0.9:9333]\n",
            "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends: [127.0.0.1:29340]\n",
        ];
        for yaml in ok {
            assert!(run(yaml, LIT, &[]).is_ok(), "{yaml}");
        }
    }
}
