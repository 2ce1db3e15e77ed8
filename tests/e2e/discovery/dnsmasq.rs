//! The test DNS server itself, with no proxy: the answers the discovery
//! tests rely on (A, AAAA, SRV, REFUSED, NXDOMAIN, no records, TC and the
//! TCP retry), changes through SIGHUP and restarts, outages, and the count
//! of the lookups of others. Also that hickory-resolver, the proxy's
//! resolver, reads every record of a truncated answer.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use hickory_resolver::Resolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;

use crate::support::discovery::{ip, named};
use crate::support::dns::{self, NOERROR, NXDOMAIN, Qtype, REFUSED, Record, Reply, Transport};
use crate::support::dnsmasq::{
    Dnsmasq, QUERY_SOURCE, Srv, empty_hosts, nxdomain_name, refused_name,
};

const SRV_NAME: &str = "_p2p._tcp.nodes.test";

async fn ask(dns: &Dnsmasq, name: &str, qtype: Qtype, transport: Transport) -> Reply {
    dns::query(dns.addr(), QUERY_SOURCE, name, qtype, transport)
        .await
        .unwrap_or_else(|e| panic!("{name} {qtype:?} over {transport:?}: {e}"))
}

fn ips(reply: &Reply) -> BTreeSet<IpAddr> {
    reply.ips().into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_records_and_the_three_failures() {
    let mut hosts = named("a.test", &[ip(1, 2), ip(1, 3)]);
    hosts.push((IpAddr::V6(Ipv6Addr::LOCALHOST), "a.test".to_owned()));
    hosts.push((ip(1, 4), "b.test".to_owned()));
    hosts.extend(empty_hosts("empty.test"));
    let srv = [
        Srv::new(SRV_NAME, "a.test", 9333, 0),
        Srv::new(SRV_NAME, "b.test", 9334, 10),
    ];
    let Some(dns) = Dnsmasq::start(&hosts, &srv).await else {
        return;
    };
    let a = ask(&dns, "a.test", Qtype::A, Transport::Udp).await;
    assert_eq!((a.rcode, a.truncated), (NOERROR, false));
    assert_eq!(ips(&a), BTreeSet::from([ip(1, 2), ip(1, 3)]));
    let aaaa = ask(&dns, "a.test", Qtype::Aaaa, Transport::Udp).await;
    assert_eq!(
        ips(&aaaa),
        BTreeSet::from([IpAddr::V6(Ipv6Addr::LOCALHOST)])
    );

    let srv_reply = ask(&dns, SRV_NAME, Qtype::Srv, Transport::Udp).await;
    assert_eq!(srv_reply.rcode, NOERROR);
    let mut got = srv_reply.answers.clone();
    got.sort();
    let want = |priority, port, target: &str| Record::Srv {
        priority,
        weight: 10,
        port,
        target: target.to_owned(),
    };
    assert_eq!(got, vec![want(0, 9333, "a.test"), want(10, 9334, "b.test")]);

    // Known names with nothing of the asked type, and a name that only has
    // names below it: NOERROR, no answers.
    for (name, qtype) in [
        ("b.test", Qtype::Aaaa),
        ("a.test", Qtype::Srv),
        ("empty.test", Qtype::A),
        ("empty.test", Qtype::Aaaa),
    ] {
        let r = ask(&dns, name, qtype, Transport::Udp).await;
        assert_eq!((r.rcode, r.answers.len()), (NOERROR, 0), "{name} {qtype:?}");
    }
    let r = ask(&dns, nxdomain_name(), Qtype::A, Transport::Udp).await;
    assert_eq!((r.rcode, r.answers.len()), (NXDOMAIN, 0));
    let r = ask(&dns, "_none._tcp.nodes.test", Qtype::Srv, Transport::Udp).await;
    assert_eq!(r.rcode, NXDOMAIN);
    for qtype in [Qtype::A, Qtype::Aaaa] {
        let r = ask(&dns, refused_name(), qtype, Transport::Udp).await;
        assert_eq!((r.rcode, r.answers.len()), (REFUSED, 0), "{qtype:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_answers_are_truncated_over_udp_and_whole_over_tcp() {
    let many: Vec<IpAddr> = (1..=100).map(|h| ip(2, h)).collect();
    let sixty: Vec<IpAddr> = (1..=60).map(|h| ip(3, h)).collect();
    let mut hosts = named("many.test", &many);
    hosts.extend(named("sixty.test", &sixty));
    let Some(dns) = Dnsmasq::start(&hosts, &[]).await else {
        return;
    };
    let plain = ask(&dns, "many.test", Qtype::A, Transport::Udp).await;
    assert!(plain.truncated);
    assert_eq!(plain.answers.len(), 30, "512 bytes without EDNS");
    let edns = ask(&dns, "many.test", Qtype::A, Transport::UdpEdns(4096)).await;
    assert!(edns.truncated);
    assert_eq!(
        edns.answers.len(),
        75,
        "capped at 1232 bytes whatever is offered"
    );
    let tcp = ask(&dns, "many.test", Qtype::A, Transport::Tcp).await;
    assert!(!tcp.truncated);
    assert_eq!(ips(&tcp), many.iter().copied().collect());
    let fits = ask(&dns, "sixty.test", Qtype::A, Transport::UdpEdns(1232)).await;
    assert!(!fits.truncated, "60 records fit in 1232 bytes");
    assert_eq!(fits.answers.len(), 60);
}

/// The resolver library the proxy uses, asked the way a discovery asks:
/// it retries a truncated answer over TCP and gets all 100 addresses, and
/// the answers carry TTL 0, so it caches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hickory_reads_every_record_of_a_truncated_answer() {
    let many: Vec<IpAddr> = (1..=100).map(|h| ip(4, h)).collect();
    let srv = [Srv::new(SRV_NAME, "many.test", 9333, 0)];
    let Some(dns) = Dnsmasq::start(&named("many.test", &many), &srv).await else {
        return;
    };
    let mut server = NameServerConfig::udp_and_tcp(dns.addr().ip());
    for c in &mut server.connections {
        c.port = dns.addr().port();
    }
    let mut opts = ResolverOpts::default();
    opts.cache_size = 0;
    let resolver = Resolver::builder_with_config(
        ResolverConfig::from_parts(None, vec![], vec![server]),
        TokioRuntimeProvider::default(),
    )
    .with_options(opts)
    .build()
    .expect("build a resolver");
    let found = resolver
        .lookup_ip("many.test.")
        .await
        .expect("look up many.test");
    let got: BTreeSet<IpAddr> = found.iter().collect();
    assert_eq!(got, many.iter().copied().collect());
    let srv = resolver
        .srv_lookup(SRV_NAME)
        .await
        .expect("look up the SRV name");
    assert_eq!(srv.answers().len(), 1);
    assert!(srv.answers().iter().all(|r| r.ttl == 0), "{srv:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_change_on_sighup_and_srv_on_a_restart_on_the_same_port() {
    let srv = [Srv::new(SRV_NAME, "a.test", 9333, 0)];
    let Some(mut dns) = Dnsmasq::start(&named("a.test", &[ip(5, 2)]), &srv).await else {
        return;
    };
    let addr = dns.addr();
    let mut hosts = named("a.test", &[ip(5, 3)]);
    hosts.extend(named("b.test", &[ip(5, 4)]));
    dns.set_hosts(&hosts).await;
    let a = ask(&dns, "a.test", Qtype::A, Transport::Udp).await;
    assert_eq!(ips(&a), BTreeSet::from([ip(5, 3)]));
    let b = ask(&dns, "b.test", Qtype::A, Transport::Udp).await;
    assert_eq!(ips(&b), BTreeSet::from([ip(5, 4)]));

    dns.set_srv(&[Srv::new(SRV_NAME, "b.test", 9334, 5)]).await;
    assert_eq!(dns.addr(), addr, "same port");
    let r = ask(&dns, SRV_NAME, Qtype::Srv, Transport::Udp).await;
    assert_eq!(
        r.answers,
        vec![Record::Srv {
            priority: 5,
            weight: 10,
            port: 9334,
            target: "b.test".to_owned()
        }]
    );
    let a = ask(&dns, "a.test", Qtype::A, Transport::Udp).await;
    assert_eq!(ips(&a), BTreeSet::from([ip(5, 3)]), "hosts kept");
}

/// Stopped: refused at the socket; frozen: no answer at all; both answer
/// again afterwards. Only questions from 127.0.0.1 (the proxy's) count.
/// Until dnsmasq logged `n` questions for a.test from 127.0.0.1.
async fn counted(dns: &Dnsmasq, n: usize) {
    let logged = async {
        while dns.queries(Qtype::A, "a.test") < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    crate::support::within("questions logged", Duration::from_secs(5), logged).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_and_the_lookup_count() {
    let Some(mut dns) = Dnsmasq::start(&named("a.test", &[ip(6, 2)]), &[]).await else {
        return;
    };
    let server = dns.addr();
    let from = |source: IpAddr| dns::query(server, source, "a.test", Qtype::A, Transport::Udp);
    let proxy_side: IpAddr = [127, 0, 0, 1].into();
    assert_eq!(dns.queries(Qtype::A, "a.test"), 0);
    from(proxy_side).await.expect("answer");
    from(QUERY_SOURCE).await.expect("answer");
    from(proxy_side).await.expect("answer");
    // The log is written in order: once the second counts, the one between
    // would have too.
    counted(&dns, 2).await;
    assert_eq!(
        dns.queries(Qtype::A, "a.test"),
        2,
        "its own are not counted"
    );

    dns.stop();
    // Refused at the socket; under a parallel run another test may have
    // bound the freed port meanwhile, and then the query goes unanswered.
    let err = from(proxy_side).await.expect_err("stopped");
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    dns.start_again().await;
    let r = from(proxy_side).await.expect("answers again");
    assert_eq!(ips(&r), BTreeSet::from([ip(6, 2)]));
    counted(&dns, 3).await;

    dns.freeze();
    let err = from(proxy_side).await.expect_err("frozen");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    dns.thaw();
    from(proxy_side).await.expect("answers after a thaw");
    let port = dns.addr().port();
    drop(dns);
    let free = std::net::UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], port)));
    assert!(free.is_ok(), "the port is free once dropped");
}
