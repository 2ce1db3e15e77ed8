//! A pool's `backends` list: static backends (`addr`) and discover
//! entries (`discover`), each name once, and the probe URL each needs:
//! one URL for a static backend, a `{ip}`/`{port}` template for a
//! discover entry's members, or the one a probe derives from the address.

use std::collections::HashMap;

use super::error::{Invalid, invalid};
use super::values::{ProbeUrl, RawBackend};
use crate::config::{BackendConfig, DiscoverConfig, ProbeKind};

/// The static backends and the discover entries of a `backends` list.
type Backends = (Vec<BackendConfig>, Vec<DiscoverConfig>);

pub(super) fn build_backends(
    at: &str,
    raw: Vec<RawBackend>,
    probe: ProbeKind,
) -> Result<Backends, Invalid> {
    if raw.is_empty() {
        return invalid(
            format!("{at}.backends"),
            "a pool needs at least one backend",
        );
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut backends = Vec::with_capacity(raw.len());
    let mut discover = Vec::new();
    for (j, b) in raw.into_iter().enumerate() {
        let path = format!("{at}.backends[{j}]");
        let name = match (&b.name, &b.addr) {
            (Some(n), _) => Some((n.0.clone(), format!("{path}.name"))),
            (None, Some(addr)) => Some((addr.0.clone(), path.clone())),
            (None, None) => None,
        };
        if let Some((name, name_path)) = &name
            && let Some(first) = seen.insert(name.clone(), j)
        {
            return invalid(
                name_path,
                format!("duplicate backend name `{name}` (also backends[{first}])"),
            );
        }
        match (b.addr, b.discover) {
            (Some(addr), None) => {
                let url = match b.probe_url {
                    Some(ProbeUrl::Template(_)) => {
                        return invalid(
                            format!("{path}.probe_url"),
                            "`{ip}` and `{port}` stand for a discovered member's address; \
                             a static backend's probe_url is one URL",
                        );
                    }
                    Some(ProbeUrl::Url(u)) => Some(u),
                    None => None,
                };
                let speaks_http = matches!(probe, ProbeKind::Blockbook | ProbeKind::Http);
                if speaks_http && url.is_none() && default_probe_url(probe, &addr.0).is_none() {
                    return invalid(
                        path,
                        format!("cannot make a probe URL from `{}`; set probe_url", addr.0),
                    );
                }
                let name = name.map_or_else(|| addr.0.clone(), |(n, _)| n);
                backends.push(BackendConfig {
                    name,
                    addr: addr.0,
                    backup: b.backup,
                    probe_url: url,
                    discovered_from: None,
                });
            }
            (None, Some(query)) => {
                let Some(name) = b.name else {
                    return invalid(
                        path,
                        "a discover entry needs a `name`: its members are named `<name>/<address>`",
                    );
                };
                let probe_url = match b.probe_url {
                    Some(ProbeUrl::Url(_)) => {
                        return invalid(
                            format!("{path}.probe_url"),
                            "a discover entry's probe_url must name each member with `{ip}` \
                             or `{port}`, like `http://{ip}:9130/api/`",
                        );
                    }
                    Some(ProbeUrl::Template(t)) => Some(t),
                    None => None,
                };
                discover.push(DiscoverConfig {
                    name: name.0,
                    query: query.0,
                    backup: b.backup,
                    probe_url,
                });
            }
            (Some(_), Some(_)) => {
                return invalid(path, "a backend has either `addr` or `discover`, not both");
            }
            (None, None) => {
                return invalid(path, "a backend needs `addr` (or `discover`)");
            }
        }
    }
    Ok((backends, discover))
}

/// The URL a `blockbook` or `http` probe requests when a backend has no
/// `probe_url`: `http://{addr}/api/` (Blockbook's status endpoint) or
/// `http://{addr}/`. `None` for probes that do not speak HTTP.
///
/// The derived URL is deliberately NOT stored in `BackendConfig::probe_url`:
/// the contract treats a failing *separate* `probe_url` (a REST twin) as
/// `unknown`, while a probe on the node's own address may judge it, so the
/// probe must be able to tell the two apart. `check` shows the derived URL;
/// probes need it re-exported from `config` to share the rule.
pub(crate) fn default_probe_url(probe: ProbeKind, addr: &str) -> Option<url::Url> {
    let path = match probe {
        ProbeKind::Blockbook => "/api/",
        ProbeKind::Http => "/",
        ProbeKind::Connect
        | ProbeKind::BitcoinP2p
        | ProbeKind::Electrum
        | ProbeKind::ElectrumTls => return None,
    };
    url::Url::parse(&format!("http://{addr}{path}")).ok()
}
