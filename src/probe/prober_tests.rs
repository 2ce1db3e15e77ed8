use super::*;
use crate::pool::node::NodeFacts;

fn key(kind: ProbeKind, addr: &str, network: Network) -> ProbeKey {
    ProbeKey {
        kind,
        addr: addr.into(),
        url: None,
        magic: [0; 4],
        network,
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
    }
}

#[tokio::test]
async fn electrum_servers_of_a_named_network_are_enlisted_while_probed() {
    let prober = Prober::new(TaskTracker::new(), CancellationToken::new());
    let regtest = Network::LitecoinRegtest;
    let a = prober.enlist(&key(ProbeKind::Electrum, "a:1", regtest));
    let b = prober.enlist(&key(ProbeKind::ElectrumTls, "b:1", regtest));
    assert!(a.is_some() && b.is_some());
    let p2p = prober.enlist(&key(ProbeKind::BitcoinP2p, "c:1", regtest));
    let custom = prober.enlist(&key(ProbeKind::Electrum, "d:1", Network::Custom));
    assert!(p2p.is_none() && custom.is_none());
    let chain = prober.chain(regtest).unwrap();
    let agreement = chain.agreement();
    for server in ["a:1", "b:1", "c:1"] {
        agreement.claim(server, 5000);
    }
    // A and B are all the servers whose word is needed.
    assert_eq!(agreement.wants_word("a:1", 0), Some(4000));
    assert_eq!(agreement.wants_word("c:1", 0), None);
    // With B's probe gone, A is alone.
    drop(b);
    assert_eq!(agreement.wants_word("a:1", 0), None);
    drop(a);
}

/// The health settings of a one-pool config with `health`.
fn health(health: &str) -> HealthConfig {
    let text = format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    health: {{ {health} }}\n    \
         backends: [h:1]\n"
    );
    let config = crate::config::Config::parse(&text, std::path::Path::new("t.yaml")).unwrap();
    config.pools[0].health.clone()
}

#[test]
fn each_pool_judges_the_node_by_its_own_requirement() {
    let plain = NodeFacts::p2p(0x0100_0409, 70016, "/LitecoinCore:0.21.2.1/", 5);
    let report = Report::with_height(Verdict::Healthy, 5, "height 5").with_node(plain);
    let mwebd = health("probe: bitcoin-p2p, network: litecoin-regtest, require_services: mwebd");
    let judged_mwebd = judged(&report, &mwebd);
    let why = judged_mwebd.unfit.as_ref().map(ToString::to_string);
    assert_eq!(
        why.as_deref(),
        Some("lacks compact_filters, mweb_light_client")
    );
    // The rest of the report is the probe's, untouched.
    assert_eq!(
        Report {
            unfit: None,
            ..judged_mwebd
        },
        report
    );
    let free = health("probe: bitcoin-p2p, network: litecoin-regtest");
    assert_eq!(judged(&report, &free).unfit, None);
    // No facts, nothing judged.
    let down = Report::new(Verdict::Down, "refused");
    assert_eq!(judged(&down, &mwebd), down);
}

#[test]
fn an_electrum_server_is_held_to_the_genesis_of_the_pools_network() {
    let regtest = pow::params(Network::LitecoinRegtest).unwrap().genesis_hex();
    let server = NodeFacts::electrum("ElectrumX 2.0.0", "1.4", Some("1.7"), Some(&regtest));
    let report = Report::new(Verdict::Unknown, "tip").with_node(server);
    let on_regtest = health("probe: electrum, network: litecoin-regtest");
    assert_eq!(judged(&report, &on_regtest).unfit, None);
    let on_mainnet = health("probe: electrum, network: litecoin");
    let why = judged(&report, &on_mainnet).unfit.map(|u| u.to_string());
    assert_eq!(why, Some(format!("genesis {regtest} is not litecoin's")));
    // A custom network has no genesis to hold it to.
    let custom = health("probe: electrum, magic: 0a0b0c0d");
    assert_eq!(requirement(&custom).genesis, None);
    assert_eq!(judged(&report, &custom).unfit, None);
}
