//! Tests of the node facts, their JSON, and the judgement.

use serde_json::json;

use super::*;

/// Debian's litecoind 0.21.2.1: network, witness, network_limited, mweb.
const PLAIN: u64 = 0x0100_0409;
/// The same with `-blockfilterindex=1 -peerblockfilters=1`.
const FILTERS: u64 = 0x0100_0449;
const REGTEST_GENESIS: &str = "530827f38f93b43ed12af0b3ad25a288dc02ed74d6d7857862df51fc56c416f9";
const MAINNET_GENESIS: &str = "12a765e31ffd4059bada1e25190f6e98c99d9714d334efa41a195a7e7e04bfe2";

fn litecoind(services: u64, protocol: i32) -> NodeFacts {
    NodeFacts::p2p(services, protocol, "/LitecoinCore:0.21.2.1/", 431)
}

fn require(services: Services, min_protocol: Option<u32>, network: Network) -> Requirement {
    let genesis = match network {
        Network::LitecoinRegtest => Some(REGTEST_GENESIS.to_owned()),
        Network::Litecoin => Some(MAINNET_GENESIS.to_owned()),
        _ => None,
    };
    Requirement {
        services,
        min_protocol,
        network,
        genesis,
    }
}

fn unfit(req: &Requirement, facts: &NodeFacts) -> String {
    match judge(req, facts) {
        Ok(()) => panic!("{facts:?} judged fit for {req:?}"),
        Err(why) => why.to_string(),
    }
}

#[test]
fn service_names_follow_the_bits_in_order() {
    assert_eq!(
        Services(PLAIN).names(),
        ["network", "witness", "network_limited", "mweb"]
    );
    assert_eq!(
        Services::MWEBD.names(),
        [
            "network",
            "witness",
            "compact_filters",
            "mweb_light_client",
            "mweb"
        ]
    );
    assert_eq!(Services::MWEBD, Services(0x0180_0049));
    assert_eq!(Services(1 << 2).names(), ["bloom"]);
    // Bits without a name are left out of the names, not of the hex.
    let odd = Services(1 << 40 | 1 << 3);
    assert_eq!(odd.names(), ["witness"]);
    assert_eq!(odd.unnamed(), Services(1 << 40));
    assert_eq!(odd.describe(), "witness, 0x10000000000");
}

#[test]
fn services_show_as_lower_case_hex() {
    assert_eq!(Services(FILTERS).to_string(), "0x1000449");
    assert_eq!(Services::NONE.to_string(), "0x0");
    assert_eq!(Services(u64::MAX).to_string(), "0xffffffffffffffff");
}

#[test]
fn hex_masks_read_back() {
    for (text, want) in [
        ("0x1800049", Some(0x0180_0049)),
        ("0X1800049", Some(0x0180_0049)),
        ("0xABCdef", Some(0xab_cdef)),
        ("0x0", Some(0)),
        ("0xffffffffffffffff", Some(u64::MAX)),
        ("0x", None),
        ("0x1ffffffffffffffff", None),
        ("0xzz", None),
        ("1800049", None),
        ("0x-1", None),
        ("0x+1", None),
    ] {
        assert_eq!(Services::from_hex(text), want.map(Services), "{text}");
    }
    for name in Services::known_names() {
        let bit = Services::named(name).unwrap();
        assert_eq!(bit.names(), [name]);
    }
    assert_eq!(Services::named("mwebd"), None);
}

#[test]
fn p2p_facts_serialize_as_the_status_node_object() {
    let facts = litecoind(PLAIN, 70016);
    let shown = serde_json::to_value(&facts).unwrap();
    assert_eq!(
        shown,
        json!({
            "services": "0x1000409",
            "service_names": ["network", "witness", "network_limited", "mweb"],
            "protocol": 70016,
            "user_agent": "/LitecoinCore:0.21.2.1/",
        })
    );
    // Read back (the state file, a live upgrade): the same facts, but for
    // the start height, which the backend's height shows.
    let back: NodeFacts = serde_json::from_value(shown).unwrap();
    assert_eq!(
        back,
        NodeFacts::p2p(PLAIN, 70016, "/LitecoinCore:0.21.2.1/", 0)
    );
}

#[test]
fn electrum_and_blockbook_facts_show_only_what_applies() {
    let full = NodeFacts::electrum(
        "ElectrumX 2.0.0",
        "1.4",
        Some("1.4.3"),
        Some(&REGTEST_GENESIS.to_uppercase()),
    );
    let shown = serde_json::to_value(&full).unwrap();
    assert_eq!(
        shown,
        json!({
            "server_version": "ElectrumX 2.0.0",
            "protocol": "1.4",
            "protocol_max": "1.4.3",
            "genesis_hash": REGTEST_GENESIS,
        })
    );
    let bare = NodeFacts::electrum("Fulcrum 1.9", "1.4", None, None);
    let shown_bare = serde_json::to_value(&bare).unwrap();
    assert_eq!(
        shown_bare,
        json!({"server_version": "Fulcrum 1.9", "protocol": "1.4"})
    );
    let blockbook = NodeFacts::blockbook(Some("Litecoin"), Some("0.4.0"));
    let shown_bb = serde_json::to_value(&blockbook).unwrap();
    assert_eq!(shown_bb, json!({"coin": "Litecoin", "version": "0.4.0"}));
    for (value, facts) in [(shown, full), (shown_bare, bare), (shown_bb, blockbook)] {
        assert_eq!(serde_json::from_value::<NodeFacts>(value).unwrap(), facts);
    }
}

#[test]
fn node_text_is_printable_ascii_and_bounded() {
    let facts = NodeFacts::p2p(0, 70016, "/Evil:\u{1b}[31m\n\u{e9}/", 0);
    let NodeFacts::P2p(p) = &facts else {
        panic!("{facts:?}")
    };
    assert_eq!(p.user_agent, "/Evil:?[31m??/");
    let long = "a".repeat(1000);
    let NodeFacts::P2p(p) = NodeFacts::p2p(0, 70016, &long, 0) else {
        panic!()
    };
    assert_eq!(p.user_agent.len(), MAX_USER_AGENT);
    let NodeFacts::Electrum(e) = NodeFacts::electrum(&long, "1.4\0", Some(&long), Some("zz"))
    else {
        panic!()
    };
    assert_eq!(e.server_version.len(), MAX_TEXT);
    assert_eq!(e.protocol, "1.4?");
    assert_eq!(e.protocol_max.map(|p| p.len()), Some(MAX_TEXT));
    assert_eq!(e.genesis_hash.as_deref(), Some("zz"));
    assert_eq!(printable("tab\there", 100), "tab?here");
}

#[test]
fn a_negative_protocol_reads_as_zero() {
    let NodeFacts::P2p(p) = litecoind(PLAIN, -5) else {
        panic!()
    };
    assert_eq!(p.protocol, 0);
    let req = require(Services::NONE, Some(1), Network::LitecoinRegtest);
    assert_eq!(unfit(&req, &litecoind(PLAIN, -5)), "protocol 0 below 1");
}

#[test]
fn mwebd_finds_what_litecoind_0_21_2_lacks() {
    let req = require(Services::MWEBD, None, Network::LitecoinRegtest);
    assert_eq!(
        unfit(&req, &litecoind(PLAIN, 70016)),
        "lacks compact_filters, mweb_light_client"
    );
    assert_eq!(
        unfit(&req, &litecoind(FILTERS, 70016)),
        "lacks mweb_light_client"
    );
    let mweb_light = FILTERS | 1 << 23;
    assert_eq!(judge(&req, &litecoind(mweb_light, 70016)), Ok(()));
}

#[test]
fn a_pruned_node_lacks_network() {
    // NETWORK_LIMITED without NETWORK: a pruned node.
    let pruned = 0x0100_0408;
    let req = require(Services::named("network").unwrap(), None, Network::Litecoin);
    assert_eq!(unfit(&req, &litecoind(pruned, 70016)), "lacks network");
    assert_eq!(judge(&req, &litecoind(PLAIN, 70016)), Ok(()));
}

#[test]
fn protocol_below_the_minimum_is_named_with_what_it_lacks() {
    let req = require(Services::NONE, Some(70016), Network::LitecoinRegtest);
    assert_eq!(
        unfit(&req, &litecoind(PLAIN, 70015)),
        "protocol 70015 below 70016"
    );
    assert_eq!(judge(&req, &litecoind(PLAIN, 70016)), Ok(()));
    let both = require(Services::MWEBD, Some(70017), Network::LitecoinRegtest);
    let why = judge(&both, &litecoind(FILTERS, 70016)).unwrap_err();
    assert_eq!(
        why.to_string(),
        "lacks mweb_light_client; protocol 70016 below 70017"
    );
    assert_eq!(
        why.misfits(),
        [
            Misfit::Lacks(Services(1 << 23)),
            Misfit::Protocol {
                have: 70016,
                min: 70017
            }
        ]
    );
}

#[test]
fn nothing_required_is_always_met() {
    let req = require(Services::NONE, None, Network::Litecoin);
    assert_eq!(judge(&req, &litecoind(0, 0)), Ok(()));
}

#[test]
fn an_electrum_server_of_another_chain_is_named_by_its_genesis() {
    let regtest_server = NodeFacts::electrum("ElectrumX 2.0.0", "1.4", None, Some(REGTEST_GENESIS));
    let regtest = require(Services::NONE, None, Network::LitecoinRegtest);
    assert_eq!(judge(&regtest, &regtest_server), Ok(()));
    let mainnet = require(Services::NONE, None, Network::Litecoin);
    assert_eq!(
        unfit(&mainnet, &regtest_server),
        format!("genesis {REGTEST_GENESIS} is not litecoin's")
    );
    // Upper-case hex is the same hash.
    let shouting = NodeFacts::electrum("x", "1.4", None, Some(&REGTEST_GENESIS.to_uppercase()));
    assert_eq!(judge(&regtest, &shouting), Ok(()));
    // A server that did not say is not held to it.
    let silent = NodeFacts::electrum("x", "1.4", None, None);
    assert_eq!(judge(&mainnet, &silent), Ok(()));
    // Garbage is no hash of any chain.
    let garbage = NodeFacts::electrum("x", "1.4", None, Some(&format!("{MAINNET_GENESIS}00")));
    assert!(judge(&mainnet, &garbage).is_err());
}

#[test]
fn a_blockbook_of_another_coin_is_named_by_its_coin() {
    let litecoin = require(Services::NONE, None, Network::Litecoin);
    let btc = NodeFacts::blockbook(Some("Bitcoin"), Some("0.4.0"));
    assert_eq!(unfit(&litecoin, &btc), r#"coin "Bitcoin" is not litecoin"#);
    let ltc = NodeFacts::blockbook(Some("Litecoin"), Some("0.4.0"));
    assert_eq!(judge(&litecoin, &ltc), Ok(()));
    // Blockbook's own names: Bitcoin's testnet is `Testnet`.
    let testnet = require(Services::NONE, None, Network::BitcoinTestnet);
    let tbtc = NodeFacts::blockbook(Some("Testnet"), None);
    assert_eq!(judge(&testnet, &tbtc), Ok(()));
    assert!(judge(&testnet, &ltc).is_err());
    let ltc_testnet = require(Services::NONE, None, Network::LitecoinTestnet);
    assert!(judge(&ltc_testnet, &ltc).is_err());
    // No coin named: nothing to hold against it.
    let silent = NodeFacts::blockbook(None, None);
    assert_eq!(judge(&litecoin, &silent), Ok(()));
}

#[test]
fn a_custom_network_has_no_chain_to_check() {
    let custom = Requirement {
        genesis: Some(MAINNET_GENESIS.to_owned()),
        ..require(Services::NONE, None, Network::Custom)
    };
    let btc = NodeFacts::blockbook(Some("Bitcoin"), None);
    let regtest_server = NodeFacts::electrum("x", "1.4", None, Some(REGTEST_GENESIS));
    assert_eq!(judge(&custom, &btc), Ok(()));
    assert_eq!(judge(&custom, &regtest_server), Ok(()));
}

#[test]
fn only_the_facts_a_probe_kind_gives_are_judged() {
    // Services and a protocol asked of an Electrum server or a Blockbook:
    // they announce none, and are not held to them.
    let req = require(Services::MWEBD, Some(70016), Network::LitecoinRegtest);
    let server = NodeFacts::electrum("x", "1.4", None, Some(REGTEST_GENESIS));
    assert_eq!(judge(&req, &server), Ok(()));
    let blockbook = require(Services::MWEBD, Some(70016), Network::Litecoin);
    let ltc = NodeFacts::blockbook(Some("Litecoin"), None);
    assert_eq!(judge(&blockbook, &ltc), Ok(()));
}

#[test]
fn a_requirement_is_the_pools_health_settings() {
    let text = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    health: { probe: bitcoin-p2p, \
                network: litecoin-regtest, require_services: [mwebd], min_protocol_version: 70016 }\n    \
                backends: [h:1]\n";
    let config = crate::config::Config::parse(text, std::path::Path::new("t.yaml")).unwrap();
    let health = &config.pools[0].health;
    let req = Requirement::of(health, Some(REGTEST_GENESIS.to_uppercase()));
    assert_eq!(
        req,
        require(Services::MWEBD, Some(70016), Network::LitecoinRegtest)
    );
}
