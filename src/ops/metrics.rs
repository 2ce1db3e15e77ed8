//! `GET /metrics`: the pools' counters and gauges in the Prometheus text
//! format, encoded by `prometheus-client` from a fresh snapshot per scrape.
//!
//! The registry is rebuilt on every scrape from each pool's overview
//! snapshot, so a backend removed by a reload disappears and one added
//! appears, and every configured backend's counters are present (at 0)
//! from start-up. Beside them, the figures an HAProxy operator looks for:
//! refused clients by reason, ended connections by backend and reason, the
//! build, and the connection budget with its use.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::ops::control::Process;
use crate::pool::admission::Refusal;
use crate::pool::backend::Suitability;
use crate::pool::health::{ProbeOutcome, QuarantineReason};
use crate::pool::registry::Pool;
use crate::pool::snapshot::{BackendSnapshot, PoolSnapshot};
use crate::pool::tally::Ends;

/// `Content-Type` of [`render`]'s output (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    pool: String,
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EntryLabels {
    pool: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    pool: String,
    name: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BytesLabels {
    pool: String,
    backend: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    pool: String,
    backend: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolReasonLabels {
    pool: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    generation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    pool: String,
    backend: String,
    reason: &'static str,
}

/// Every metric family of one scrape. `prometheus-client` appends `_total`
/// to counter names, so counters are registered without it.
#[derive(Default)]
struct Families {
    active: Family<BackendLabels, Gauge>,
    connections: Family<BackendLabels, Counter>,
    connect_failures: Family<BackendLabels, Counter>,
    refused_by_node: Family<BackendLabels, Counter>,
    source_fallbacks: Family<BackendLabels, Counter>,
    bytes: Family<BytesLabels, Counter>,
    usable: Family<BackendLabels, Gauge>,
    suitable: Family<BackendLabels, Gauge>,
    height: Family<BackendLabels, Gauge>,
    probes: Family<OutcomeLabels, Counter>,
    rebalance_moves: Family<PoolLabels, Counter>,
    quarantines: Family<ReasonLabels, Counter>,
    discovered: Family<EntryLabels, Gauge>,
    lookups: Family<LookupLabels, Counter>,
    rejected: Family<PoolReasonLabels, Counter>,
    closed: Family<ReasonLabels, Counter>,
    pool_connections: Family<PoolLabels, Gauge>,
    pool_limit: Family<PoolLabels, Gauge>,
    build: Family<BuildLabels, Gauge>,
    budget: Gauge,
    budget_used: Gauge,
}

impl Families {
    fn register(self) -> Registry {
        let mut r = Registry::default();
        r.register(
            "pin_proxy_active_connections",
            "Live client connections per backend",
            self.active,
        );
        r.register(
            "pin_proxy_connections",
            "Client connections spliced to the backend since start",
            self.connections,
        );
        r.register(
            "pin_proxy_connect_failures",
            "Failed backend connects from client traffic since start",
            self.connect_failures,
        );
        r.register(
            "pin_proxy_refused_by_node",
            "Client connections the backend closed at once, before a byte, since start (its refusals of clients)",
            self.refused_by_node,
        );
        r.register(
            "pin_proxy_source_fallbacks",
            "Client connections made from the proxy's own address instead of source, the client's address family not being the backend's",
            self.source_fallbacks,
        );
        r.register(
            "pin_proxy_bytes",
            "Bytes spliced since start; up is client to backend, down is backend to client",
            self.bytes,
        );
        r.register(
            "pin_proxy_backend_usable",
            "1 while the backend takes new clients (healthy or unknown), else 0",
            self.usable,
        );
        r.register(
            "pin_proxy_backend_suitable",
            "0 once a probe found the node unable to serve the pool's clients (services, protocol or chain; it gets none), else 1",
            self.suitable,
        );
        r.register(
            "pin_proxy_backend_height",
            "Last block height a probe read from the backend",
            self.height,
        );
        r.register(
            "pin_proxy_probes",
            "Probe results by outcome since start",
            self.probes,
        );
        r.register(
            "pin_proxy_rebalance_moves",
            "Connections closed by the rebalancer so their clients land elsewhere",
            self.rebalance_moves,
        );
        r.register(
            "pin_proxy_quarantines",
            "Quarantines by reason since start",
            self.quarantines,
        );
        r.register(
            "pin_proxy_discovered_members",
            "Members a discover entry has now",
            self.discovered,
        );
        r.register(
            "pin_proxy_discovery_lookups",
            "DNS lookups of a discover entry by outcome (ok, failed) since it was configured, across live upgrades",
            self.lookups,
        );
        r.register(
            "pin_proxy_rejected",
            "Clients refused at accept by reason (allow_list, max_connections, per_source, no_suitable_backend) since start",
            self.rejected,
        );
        r.register(
            "pin_proxy_closed",
            "Client connections ended, by backend and the reason of their closed event, since start; \
             backend is empty for those that reached none",
            self.closed,
        );
        r.register(
            "pin_proxy_pool_connections",
            "Client connections the pool holds, counted against its max_connections",
            self.pool_connections,
        );
        r.register(
            "pin_proxy_pool_max_connections",
            "The pool's max_connections",
            self.pool_limit,
        );
        r.register(
            "pin_proxy_build_info",
            "Always 1; the running version and generation (live upgrades since the cold start)",
            self.build,
        );
        r.register(
            "pin_proxy_connection_budget",
            "Client connections the open-file limit lets the process hold at once; accepting pauses beyond it",
            self.budget,
        );
        r.register(
            "pin_proxy_connection_budget_used",
            "Slots of the connection budget taken: one per client connection, plus one per accept loop waiting for its next client",
            self.budget_used,
        );
        r
    }
}

/// The Prometheus text for `pools`, as served on `/metrics`.
///
/// Each pool's lock is held only while its overview is copied out.
///
/// # Errors
/// Only if the encoder fails to write into the string (it does not in
/// practice); surfaced rather than unwrapped.
pub fn render(pools: &[Arc<Pool>], process: &Process) -> Result<String, std::fmt::Error> {
    let families = Families::default();
    let build = BuildLabels {
        version: process.version,
        generation: process.generation.to_string(),
    };
    families.build.get_or_create(&build).set(1);
    if let Some((total, used)) = process.budget {
        families.budget.set(saturate(total as u64));
        families.budget_used.set(saturate(used as u64));
    }
    for pool in pools {
        let snap = pool.view().overview();
        let pool_labels = PoolLabels {
            pool: snap.name.clone(),
        };
        families
            .rebalance_moves
            .get_or_create(&pool_labels)
            .inc_by(snap.rebalance_moves);
        families
            .pool_connections
            .get_or_create(&pool_labels)
            .set(saturate(snap.clients as u64));
        families
            .pool_limit
            .get_or_create(&pool_labels)
            .set(saturate(pool.config().max_connections as u64));
        add_ends(&families, &snap.name, &pool.view().ends());
        for b in &snap.backends {
            add(&families, &snap, b);
        }
        for d in &snap.discovery {
            let entry = EntryLabels {
                pool: snap.name.clone(),
                name: d.name.clone(),
            };
            families
                .discovered
                .get_or_create(&entry)
                .set(saturate(d.members as u64));
            for (outcome, n) in [("ok", d.lookups_ok), ("failed", d.lookups_failed)] {
                let labels = LookupLabels {
                    pool: snap.name.clone(),
                    name: d.name.clone(),
                    outcome,
                };
                families.lookups.get_or_create(&labels).inc_by(n);
            }
        }
    }
    let mut out = String::new();
    prometheus_text::encode(&mut out, &families.register())?;
    Ok(out)
}

/// Add one pool's refused clients (every reason, at 0 too) and ended
/// connections to the families.
fn add_ends(f: &Families, pool: &str, ends: &Ends) {
    for reason in Refusal::ALL {
        let labels = PoolReasonLabels {
            pool: pool.to_owned(),
            reason: reason.as_str(),
        };
        f.rejected.get_or_create(&labels).inc_by(0);
    }
    for (&reason, &n) in &ends.rejected {
        let labels = PoolReasonLabels {
            pool: pool.to_owned(),
            reason,
        };
        f.rejected.get_or_create(&labels).inc_by(n);
    }
    for (backend, reasons) in &ends.closed {
        for &(reason, n) in reasons {
            let labels = ReasonLabels {
                pool: pool.to_owned(),
                backend: backend.clone(),
                reason: reason.as_str(),
            };
            f.closed.get_or_create(&labels).inc_by(n);
        }
    }
}

/// Add one backend's figures to the families.
fn add(f: &Families, pool: &PoolSnapshot, b: &BackendSnapshot) {
    let l = &BackendLabels {
        pool: pool.name.clone(),
        backend: b.name.clone(),
    };
    let c = &b.counters;
    f.active
        .get_or_create(l)
        .set(saturate(b.connections as u64));
    f.usable
        .get_or_create(l)
        .set(i64::from(b.state.is_usable()));
    f.suitable
        .get_or_create(l)
        .set(i64::from(b.suitability != Suitability::Unsuitable));
    if let Some(h) = b.height {
        f.height.get_or_create(l).set(saturate(h));
    }
    f.connections.get_or_create(l).inc_by(c.connections_total);
    f.connect_failures
        .get_or_create(l)
        .inc_by(c.connect_failures_total);
    f.refused_by_node.get_or_create(l).inc_by(c.refused_by_node);
    f.source_fallbacks
        .get_or_create(l)
        .inc_by(c.source_fallbacks);
    for (direction, n) in [("up", c.bytes_up), ("down", c.bytes_down)] {
        let labels = BytesLabels {
            pool: l.pool.clone(),
            backend: l.backend.clone(),
            direction,
        };
        f.bytes.get_or_create(&labels).inc_by(n);
    }
    for outcome in ProbeOutcome::ALL {
        let labels = OutcomeLabels {
            pool: l.pool.clone(),
            backend: l.backend.clone(),
            outcome: outcome.as_str(),
        };
        f.probes
            .get_or_create(&labels)
            .inc_by(c.probe_count(outcome));
    }
    for reason in QuarantineReason::ALL {
        let labels = ReasonLabels {
            pool: l.pool.clone(),
            backend: l.backend.clone(),
            reason: reason.as_str(),
        };
        f.quarantines
            .get_or_create(&labels)
            .inc_by(c.quarantine_count(reason));
    }
}

/// A gauge value; figures beyond `i64::MAX` cannot occur, but saturate
/// rather than wrap.
fn saturate(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::pool::close::CloseReason;
    use tokio_util::sync::CancellationToken;

    fn process() -> Process {
        Process {
            version: "9.9.9",
            generation: 2,
            budget: Some((9861, 3)),
        }
    }

    fn pool() -> Arc<Pool> {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends:\n      - { name: \"a\\\"b\", addr: 127.0.0.1:1 }\n      - 127.0.0.1:2\n";
        let config =
            Config::parse(yaml, std::path::Path::new("t.yaml")).expect("valid test config");
        Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()))
    }

    #[test]
    fn counters_are_named_as_the_contract_and_present_at_zero() {
        let text = render(&[pool()], &process()).expect("render");
        for name in [
            "pin_proxy_connections_total{",
            "pin_proxy_connect_failures_total{",
            "pin_proxy_refused_by_node_total{",
            "pin_proxy_source_fallbacks_total{",
            "pin_proxy_bytes_total{",
            "pin_proxy_probes_total{",
            "pin_proxy_quarantines_total{",
            "pin_proxy_rebalance_moves_total{pool=\"p\"} 0",
            "pin_proxy_active_connections{",
            "pin_proxy_backend_usable{",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        assert!(!text.contains("_total_total"), "{text}");
        // No height before a probe has read one.
        assert!(!text.contains("pin_proxy_backend_height{"), "{text}");
        // Label values are escaped by the encoder.
        assert!(text.contains(r#"backend="a\"b""#), "{text}");
        assert!(
            !text.contains("pin_proxy_discovered_members"),
            "no entry, no family"
        );
    }

    #[test]
    fn refusals_ends_build_and_budget_are_reported() {
        let pool = pool();
        pool.gate().count_rejected(Refusal::MaxConnections);
        pool.legs().count_closed(None, CloseReason::NoBackend);
        let text = render(&[pool], &process()).expect("render");
        for line in [
            "pin_proxy_rejected_total{pool=\"p\",reason=\"max_connections\"} 1",
            "pin_proxy_rejected_total{pool=\"p\",reason=\"allow_list\"} 0",
            "pin_proxy_rejected_total{pool=\"p\",reason=\"per_source\"} 0",
            "pin_proxy_closed_total{pool=\"p\",backend=\"\",reason=\"no_backend\"} 1",
            "pin_proxy_closed_total{pool=\"p\",backend=\"127.0.0.1:2\",reason=\"client_closed\"} 0",
            "pin_proxy_pool_connections{pool=\"p\"} 0",
            "pin_proxy_pool_max_connections{pool=\"p\"} 1024",
            "pin_proxy_build_info{version=\"9.9.9\",generation=\"2\"} 1",
            "pin_proxy_connection_budget 9861",
            "pin_proxy_connection_budget_used 3",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn discover_entries_count_members_and_lookups() {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends:\n      - { name: ltc, discover: \"n.test:1\" }\n";
        let config = Config::parse(yaml, std::path::Path::new("t.yaml")).expect("valid");
        let pool = Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()));
        pool.discovery().lookup_failed("ltc", "timeout");
        let found = crate::config::Found {
            key: "127.0.0.2:1".into(),
            addr: "127.0.0.2:1".parse().unwrap(),
            lower_priority: false,
        };
        pool.discovery()
            .apply_lookup("ltc", vec![found], tokio::time::Instant::now());
        let text = render(&[pool], &process()).expect("render");
        for line in [
            "pin_proxy_discovered_members{pool=\"p\",name=\"ltc\"} 1",
            "pin_proxy_discovery_lookups_total{pool=\"p\",name=\"ltc\",outcome=\"ok\"} 1",
            "pin_proxy_discovery_lookups_total{pool=\"p\",name=\"ltc\",outcome=\"failed\"} 1",
            "pin_proxy_active_connections{pool=\"p\",backend=\"ltc/127.0.0.2:1\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
