//! A DNS that fails changes nothing: stopped (refused at the socket),
//! frozen (lookups time out), REFUSED, NXDOMAIN and answers with no records
//! all keep the last good set, clients included, for several `hold`s, and
//! `discovery_failed` says so. Once good answers come again they are
//! followed.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpStream;

use crate::support::admin_wait::wait_metrics;
use crate::support::discovery::{
    INTERVAL, T, config, counts, discover, discovered, discoveries, ip, lookups, lookups_in,
    member, members_of, members_until, named, still_echoes,
};
use crate::support::dns::Qtype;
use crate::support::dnsmasq::{Dnsmasq, empty_hosts, refused_name};
use crate::support::nodes::{echo_client, echo_on_shared_port};
use crate::support::proxy::Proxy;

const NAME: &str = "nodes.test";

/// Short, so that a wrong removal would show within the tests' outages.
const HOLD: Duration = Duration::from_millis(300);

/// Lookups that span two holds.
fn two_holds_of_lookups() -> usize {
    2 * (HOLD.as_millis() / INTERVAL.as_millis()) as usize + 2
}

/// A proxy discovering `name` on `port`, once its members are `ips`, with
/// one client per member.
async fn running(dns: &Dnsmasq, name: &str, ips: &[IpAddr], port: u16) -> (Proxy, Vec<TcpStream>) {
    let target = format!("{name}:{port}");
    let proxy = Proxy::start(&config(dns, HOLD, &[discover("ltc", &target, "")])).await;
    members_until(&proxy, &members_of("ltc", ips, port)).await;
    let mut clients = Vec::new();
    for _ in ips {
        clients.push(echo_client(proxy.addr("p")).await);
    }
    (proxy, clients)
}

fn failed(e: &Value) -> bool {
    e["message"] == "discovery_failed" && e["pool"] == "p" && e["name"] == "ltc"
}

/// Wait for a `discovery_failed` logged after the first `from` events.
async fn failure_after(proxy: &Proxy, from: usize) -> Value {
    let n = proxy.events()[..from].iter().filter(|e| failed(e)).count();
    let e = proxy.wait_count(failed, n + 1, T).await[n].clone();
    assert!(
        e["error"].as_str().is_some_and(|s| !s.is_empty()),
        "no error in {e}"
    );
    e
}

/// Nothing changed: still one `discovered` event, the same members, and
/// every client's splice up.
async fn unchanged(proxy: &Proxy, want: &BTreeSet<String>, clients: &mut [TcpStream]) {
    assert_eq!(discoveries(proxy).len(), 1, "{:?}", discoveries(proxy));
    members_until(proxy, want).await;
    for c in clients.iter_mut() {
        still_echoes(c).await;
    }
    assert!(
        proxy.named("closed").is_empty(),
        "{:?}",
        proxy.named("closed")
    );
}

/// After good answers returned with `added` and `removed` members: the
/// `discovered` events since the first add up to them (a removal may
/// come with the addition or a hold later).
async fn followed(proxy: &Proxy, want: &BTreeSet<String>, added: u64, removed: u64) {
    members_until(proxy, want).await;
    // The event is logged as the members change: wait for its line.
    let what = format!("discovered events adding up to +{added} -{removed}");
    proxy
        .wait_log(&what, T, |events| {
            let later = events.iter().filter(|e| discovered(e)).skip(1);
            let sum = later
                .map(counts)
                .fold((0, 0), |(a, r), (da, dr, _)| (a + da, r + dr));
            (sum == (added, removed)).then_some(())
        })
        .await;
}

/// The outage lasts three holds' worth of failed lookups, counted by the
/// proxy's own `pin_proxy_discovery_lookups_total{outcome="failed"}`.
async fn outage(proxy: &Proxy) {
    let wanted = 3 * (HOLD.as_millis() / INTERVAL.as_millis()) as u64;
    let start = lookups(proxy, "failed").await;
    let what = format!("{wanted} failed lookups");
    wait_metrics(proxy.admin(), &what, T, |m| {
        (lookups_in(m, "failed") >= start + wanted).then_some(())
    })
    .await;
}

/// What [`scene`] sets up.
struct Scene {
    dns: Dnsmasq,
    ips: [IpAddr; 3],
    port: u16,
    _nodes: Vec<crate::support::nodes::Node>,
    proxy: Proxy,
    clients: Vec<TcpStream>,
    want: BTreeSet<String>,
}

/// dnsmasq listing `a` and `b` of 127.`net`.0.x, echo nodes on `a`, `b`
/// and `c` at one port, and a proxy following the name with a client on
/// each member; `None` when dnsmasq is not installed.
async fn scene(net: u8) -> Option<Scene> {
    let (a, b, c) = (ip(net, 2), ip(net, 3), ip(net, 4));
    let dns = Dnsmasq::start(&named(NAME, &[a, b]), &[]).await?;
    let (port, nodes, _) = echo_on_shared_port(&[a, b, c], &[]).await;
    let (proxy, clients) = running(&dns, NAME, &[a, b], port).await;
    Some(Scene {
        want: members_of("ltc", &[a, b], port),
        dns,
        ips: [a, b, c],
        port,
        _nodes: nodes,
        proxy,
        clients,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_dns_keeps_the_set_and_a_restarted_one_is_followed() {
    let Some(Scene {
        mut dns,
        ips: [a, b, c],
        port,
        _nodes,
        proxy,
        mut clients,
        want,
    }) = scene(21).await
    else {
        return;
    };

    let before = proxy.events().len();
    dns.stop();
    failure_after(&proxy, before).await;
    outage(&proxy).await;
    unchanged(&proxy, &want, &mut clients).await;

    dns.set_hosts(&named(NAME, &[a, c])).await;
    dns.start_again().await;
    followed(&proxy, &members_of("ltc", &[a, c], port), 1, 1).await;
    let gone = member("ltc", SocketAddr::new(b, port));
    let closed = proxy
        .wait_event(|e| e["message"] == "closed" && e["backend"] == gone, T)
        .await;
    assert_eq!(closed["reason"], "backend_removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_that_time_out_keep_the_set() {
    let Some(Scene {
        mut dns,
        ips: [a, b, c],
        port,
        _nodes,
        proxy,
        mut clients,
        want,
    }) = scene(22).await
    else {
        return;
    };

    let before = proxy.events().len();
    dns.freeze();
    failure_after(&proxy, before).await;
    outage(&proxy).await;
    unchanged(&proxy, &want, &mut clients).await;

    dns.thaw();
    dns.set_hosts(&named(NAME, &[a, b, c])).await;
    followed(&proxy, &members_of("ltc", &[a, b, c], port), 1, 0).await;
}

/// NOERROR with no records, then NXDOMAIN, each for lookups spanning two
/// holds, with good answers between: never a member less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_and_nxdomain_answers_keep_the_set() {
    let Some(Scene {
        mut dns,
        ips: [a, b, c],
        port,
        _nodes,
        proxy,
        mut clients,
        want,
    }) = scene(23).await
    else {
        return;
    };

    for failing in [empty_hosts(NAME), Vec::new()] {
        let before = proxy.events().len();
        dns.set_hosts(&failing).await;
        failure_after(&proxy, before).await;
        dns.wait_queries(Qtype::A, NAME, two_holds_of_lookups(), T)
            .await;
        unchanged(&proxy, &want, &mut clients).await;
        dns.set_hosts(&named(NAME, &[a, b])).await;
        dns.wait_queries(Qtype::A, NAME, 2, T).await;
    }
    dns.set_hosts(&named(NAME, &[a, b, c])).await;
    followed(&proxy, &members_of("ltc", &[a, b, c], port), 1, 0).await;
}

/// REFUSED for both A and AAAA (a name outside the zone dnsmasq serves,
/// with one address of each family while it is listed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_answers_keep_the_set() {
    let (a, b) = (ip(24, 2), ip(24, 3));
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let name = refused_name();
    let Some(mut dns) = Dnsmasq::start(&named(name, &[a, v6]), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&[a, b, v6], &[]).await;
    let (proxy, mut clients) = running(&dns, name, &[a, v6], port).await;
    let want = members_of("ltc", &[a, v6], port);

    let before = proxy.events().len();
    let refused: [(IpAddr, &str); 0] = [];
    dns.set_hosts(&refused).await;
    failure_after(&proxy, before).await;
    dns.wait_queries(Qtype::A, name, two_holds_of_lookups(), T)
        .await;
    unchanged(&proxy, &want, &mut clients).await;

    dns.set_hosts(&named(name, &[a, b, v6])).await;
    followed(&proxy, &members_of("ltc", &[a, b, v6], port), 1, 0).await;
}
