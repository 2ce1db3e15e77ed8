//! What the probes learn of real nodes, and how a pool's requirement judges
//! them: Litecoin Core regtest nodes with and without compact filters, a
//! pruned one, and ElectrumX on regtest under the right and the wrong
//! network. Skips when litecoind or ElectrumX is not installed (unless
//! `PIN_PROXY_REQUIRE_PEERS=1`).

use std::future::Future;
use std::path::Path;

use pin_proxy::config::Config;
use pin_proxy::inspect::{NodeFacts, P2pFacts, Report, Services, Verdict, probe_once};

use crate::support::electrumx::ElectrumX;
use crate::support::litecoind::Litecoind;

/// Litecoin regtest's genesis block, as explorers print it.
const REGTEST_GENESIS: &str = "530827f38f93b43ed12af0b3ad25a288dc02ed74d6d7857862df51fc56c416f9";

/// Run `fut` on a runtime of its own: these are plain `#[test]`s, since
/// their nodes start blocking.
fn block_on<F: Future>(fut: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(fut)
}

/// One probe of the node at `addr` by a pool whose health is `{ <health> }`,
/// judged as the prober judges it for that pool.
fn probe(addr: &str, health: &str) -> Report {
    let text = format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         health: {{ timeout: 10s, {health} }}\n    backends: [\"{addr}\"]\n"
    );
    let config = Config::parse(&text, Path::new("facts.yaml")).expect("a valid config");
    let pool = &config.pools[0];
    block_on(probe_once(&pool.health, &pool.backends[0]))
}

/// A `bitcoin-p2p` probe of `node` under `require`, on regtest.
fn p2p(node: &Litecoind, require: &str) -> Report {
    let health = format!("probe: bitcoin-p2p, network: litecoin-regtest, {require}");
    let report = probe(&node.p2p_addr().to_string(), &health);
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    report
}

fn p2p_facts(report: &Report) -> &P2pFacts {
    match &report.node {
        Some(NodeFacts::P2p(facts)) => facts,
        other => panic!("no P2P facts: {other:?}"),
    }
}

fn unfit(report: &Report) -> Option<String> {
    report.unfit.as_ref().map(ToString::to_string)
}

fn bit(name: &str) -> Services {
    Services::named(name).expect("a known service")
}

fn has(facts: &P2pFacts, name: &str) -> bool {
    bit(name).missing_from(facts.services).is_empty()
}

#[test]
fn a_litecoind_without_filters_lacks_what_mwebd_demands() {
    let Some(node) = Litecoind::start(None) else {
        return;
    };
    node.mine(3);
    let report = p2p(&node, "require_services: mwebd");
    let facts = p2p_facts(&report);
    eprintln!("litecoind without filters: {}", json(&report));
    // Debian's 0.21.2.1 announces 0x1000409: network, witness,
    // network_limited and mweb; never compact_filters without the flags.
    for name in ["network", "witness", "network_limited", "mweb"] {
        assert!(has(facts, name), "{name} missing from {facts:?}");
    }
    assert!(!has(facts, "compact_filters"), "{facts:?}");
    assert!(facts.protocol >= 70016, "{facts:?}");
    assert!(
        facts.user_agent.starts_with("/LitecoinCore:0.21."),
        "{facts:?}"
    );
    assert_eq!(i64::from(facts.start_height), 3);
    // What mwebd would ban it for, named.
    let missing = Services::MWEBD.missing_from(facts.services);
    assert!(missing.names().contains(&"compact_filters"), "{missing}");
    assert_eq!(
        unfit(&report),
        Some(format!("lacks {}", missing.describe()))
    );
    if facts.user_agent == "/LitecoinCore:0.21.2.1/" {
        assert_eq!(facts.services, Services(0x0100_0409));
        assert_eq!(
            unfit(&report).as_deref(),
            Some("lacks compact_filters, mweb_light_client")
        );
    }
    // A protocol floor above its own is named; nothing asked, nothing lacked.
    let above = facts.protocol + 1;
    let report = p2p(&node, &format!("min_protocol_version: {above}"));
    let want = format!("protocol {} below {above}", above - 1);
    assert_eq!(unfit(&report), Some(want));
    let at = p2p(&node, &format!("min_protocol_version: {}", above - 1));
    assert_eq!(unfit(&at), None);
    assert_eq!(
        unfit(&p2p(&node, "require_services: [network, witness]")),
        None
    );
}

#[test]
fn a_litecoind_with_filters_announces_compact_filters() {
    let flags = ["-blockfilterindex=1", "-peerblockfilters=1"];
    let Some(node) = Litecoind::start_with(None, &flags) else {
        return;
    };
    let report = p2p(&node, "require_services: mwebd");
    let facts = p2p_facts(&report);
    eprintln!("litecoind with filters: {}", json(&report));
    assert!(has(facts, "compact_filters"), "{facts:?}");
    let missing = Services::MWEBD.missing_from(facts.services);
    assert!(!missing.names().contains(&"compact_filters"), "{missing}");
    if facts.user_agent == "/LitecoinCore:0.21.2.1/" {
        // 0.21.2.1 predates NODE_MWEB_LIGHT_CLIENT (0.21.3).
        assert_eq!(facts.services, Services(0x0100_0449));
        assert_eq!(unfit(&report).as_deref(), Some("lacks mweb_light_client"));
    }
    let filters = "require_services: [network, witness, compact_filters, mweb]";
    assert_eq!(unfit(&p2p(&node, filters)), None);
}

#[test]
fn a_pruned_litecoind_lacks_network() {
    let Some(node) = Litecoind::start_with(None, &["-prune=550"]) else {
        return;
    };
    let report = p2p(&node, "require_services: [network]");
    let facts = p2p_facts(&report);
    eprintln!("pruned litecoind: {}", json(&report));
    assert!(!has(facts, "network"), "{facts:?}");
    assert!(has(facts, "network_limited"), "{facts:?}");
    assert_eq!(unfit(&report).as_deref(), Some("lacks network"));
}

#[test]
fn electrumx_on_regtest_is_fit_for_regtest_and_not_for_mainnet() {
    let Some(node) = Litecoind::start(None) else {
        return;
    };
    node.mine(2);
    let Some(ex) = ElectrumX::start(&node) else {
        return;
    };
    let addr = ex.tcp_addr().to_string();
    let regtest = probe(&addr, "probe: electrum, network: litecoin-regtest");
    eprintln!("ElectrumX on regtest: {}", json(&regtest));
    assert_eq!(regtest.verdict, Verdict::Healthy, "{regtest:?}");
    let Some(NodeFacts::Electrum(facts)) = &regtest.node else {
        panic!("no Electrum facts: {regtest:?}");
    };
    assert!(facts.server_version.starts_with("ElectrumX "), "{facts:?}");
    assert_eq!(facts.genesis_hash.as_deref(), Some(REGTEST_GENESIS));
    assert!(facts.protocol_max.is_some(), "{facts:?}");
    assert_eq!(unfit(&regtest), None);
    // The same server in a mainnet pool: its genesis says it is not one.
    let mainnet = probe(&addr, "probe: electrum, network: litecoin");
    assert_eq!(mainnet.node, regtest.node);
    assert_eq!(
        unfit(&mainnet),
        Some(format!("genesis {REGTEST_GENESIS} is not litecoin's"))
    );
}

/// The node facts and the judgement, for the test's log.
fn json(report: &Report) -> String {
    let node = serde_json::to_string(&report.node).unwrap_or_default();
    format!("node {node}, unfit {:?}", unfit(report))
}
