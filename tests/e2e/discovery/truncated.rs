//! A name with more addresses than a UDP answer holds: dnsmasq sets TC
//! (75 of 100 fit in 1232 bytes), the lookup is retried over TCP, and
//! every address becomes a member. A change is seen at the next lookup:
//! no TCP connection is kept between lookups (dnsmasq answers a kept one
//! from the data it had when it opened, for up to 100 queries).

use std::net::IpAddr;

use crate::support::discovery::{
    HOLD, config_with, counts, discover, ip, lookups, members_of, members_until, named,
    nth_discovery,
};
use crate::support::dnsmasq::Dnsmasq;
use crate::support::nodes::echo_on_shared_port;
use crate::support::proxy::Proxy;

const NAME: &str = "many.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_answer_still_gives_every_member() {
    let all: Vec<IpAddr> = (1..=101).map(|h| ip(61, h)).collect();
    let ips = &all[..100];
    let Some(mut dns) = Dnsmasq::start(&named(NAME, ips), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&all, &[]).await;
    let target = format!("{NAME}:{port}");
    // Probes once a second: a hundred members.
    let health = "probe: connect, interval: 1s, timeout: 300ms";
    let yaml = config_with(&dns, HOLD, health, &[discover("ltc", &target, "")]);
    let proxy = Proxy::start(&yaml).await;
    let first = nth_discovery(&proxy, 1).await;
    assert_eq!(counts(&first), (100, 0, 100), "{first}");
    members_until(&proxy, &members_of("ltc", ips, port)).await;

    dns.set_hosts(&named(NAME, &all)).await;
    let before = lookups(&proxy, "ok").await;
    members_until(&proxy, &members_of("ltc", &all, port)).await;
    let took = lookups(&proxy, "ok").await - before;
    assert!(took <= 3, "the change took {took} lookups to be seen");
}
