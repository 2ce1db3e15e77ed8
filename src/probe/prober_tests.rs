use super::*;

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
