//! A flapping record set: answers alternate between {A, B} and {A, C}, one
//! lookup each, for longer than several holds, with `hold` longer than
//! any absence. Churn is bounded: C is added once, then nothing changes,
//! nobody's connection is touched; once the flapping stops, B leaves a
//! hold later.

use std::net::SocketAddr;

use crate::support::discovery::{
    HOLD, INTERVAL, T, client_on, closed_by_proxy, config, counts, discover, discoveries, ip,
    member, members_of, members_until, named, nth_discovery, still_echoes,
};
use crate::support::dns::Qtype;
use crate::support::dnsmasq::Dnsmasq;
use crate::support::nodes::{echo_client, echo_on_shared_port};
use crate::support::proxy::Proxy;

const NAME: &str = "nodes.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_set_is_added_to_once_and_then_left_alone() {
    let (a, b, c) = (ip(41, 2), ip(41, 3), ip(41, 4));
    let Some(mut dns) = Dnsmasq::start(&named(NAME, &[a, b]), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&[a, b, c], &[]).await;
    let target = format!("{NAME}:{port}");
    let proxy = Proxy::start(&config(&dns, HOLD, &[discover("ltc", &target, "")])).await;
    members_until(&proxy, &members_of("ltc", &[a, b], port)).await;
    let mut clients = vec![
        echo_client(proxy.addr("p")).await,
        echo_client(proxy.addr("p")).await,
    ];

    // Three holds of flapping; each set is seen by at least one lookup.
    let flips = 3 * (HOLD.as_millis() / INTERVAL.as_millis()) as usize;
    for i in 0..flips {
        let other = if i.is_multiple_of(2) { c } else { b };
        dns.set_hosts(&named(NAME, &[a, other])).await;
        dns.wait_queries(Qtype::A, NAME, 1, T).await;
    }
    let all = discoveries(&proxy);
    assert_eq!(all.len(), 2, "churn: {all:?}");
    assert_eq!(counts(&all[1]), (1, 0, 3), "C added once: {}", all[1]);
    members_until(&proxy, &members_of("ltc", &[a, b, c], port)).await;
    for client in &mut clients {
        still_echoes(client).await;
    }
    assert!(
        proxy.named("closed").is_empty(),
        "{:?}",
        proxy.named("closed")
    );

    // The flapping stops at {A, C}: B goes, a hold later, with its client.
    if flips.is_multiple_of(2) {
        dns.set_hosts(&named(NAME, &[a, c])).await;
    }
    let third = nth_discovery(&proxy, 3).await;
    assert_eq!(counts(&third), (0, 1, 2), "{third}");
    let gone = member("ltc", SocketAddr::new(b, port));
    let closed = proxy
        .wait_event(|e| e["message"] == "closed" && e["backend"] == gone, T)
        .await;
    assert_eq!(closed["reason"], "backend_removed");
    let on_b = client_on(&proxy, &clients, &gone);
    closed_by_proxy(&mut clients[on_b]).await;
    still_echoes(&mut clients[1 - on_b]).await;
}
