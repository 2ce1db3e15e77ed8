//! A live upgrade hands discovered members over as they are: the same
//! members with their states and quarantine windows, their connections
//! still splicing; and the new process goes on following the answers.

use std::net::SocketAddr;

use crate::support::discovery::{
    HOLD, backend, config, connections_until, discover, ip, member, members_of, members_until,
    named, quarantine, same_members, still_echoes,
};
use crate::support::dnsmasq::Dnsmasq;
use crate::support::nodes::{echo_client, echo_on_shared_port};
use crate::support::proxy::Proxy;
use crate::support::upgrade::{Bin, status, upgrade_ok};

const NAME: &str = "nodes.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_hands_over_members_with_their_connections_and_health() {
    let (a, b, c, d) = (ip(91, 2), ip(91, 3), ip(91, 4), ip(91, 5));
    let Some(mut dns) = Dnsmasq::start(&named(NAME, &[a, b, c]), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&[a, b, c, d], &[]).await;
    let bin = Bin::new();
    let yaml = config(
        &dns,
        HOLD,
        &[discover("ltc", &format!("{NAME}:{port}"), "")],
    );
    let proxy = Proxy::start_from(bin.path(), &yaml, &[]).await;
    let want = members_of("ltc", &[a, b, c], port);
    members_until(&proxy, &want).await;
    let on_c = member("ltc", SocketAddr::new(c, port));
    quarantine(&proxy, &on_c).await;
    let mut clients = vec![
        echo_client(proxy.addr("p")).await,
        echo_client(proxy.addr("p")).await,
    ];
    let one = |ip| member("ltc", SocketAddr::new(ip, port));
    let before = connections_until(&proxy, &[(&one(a), 1), (&one(b), 1), (&on_c, 0)]).await;

    let done = upgrade_ok(&proxy).await;
    let after = status(&proxy).await;
    assert_eq!(after["pid"], done["pid"], "the new process answers");
    same_members(&before, &after, &want);
    assert_eq!(backend(&after, &on_c)["state"], "quarantined");
    for c in &mut clients {
        still_echoes(c).await;
    }
    assert!(
        proxy.named("closed").is_empty(),
        "{:?}",
        proxy.named("closed")
    );

    dns.set_hosts(&named(NAME, &[a, b, c, d])).await;
    members_until(&proxy, &members_of("ltc", &[a, b, c, d], port)).await;
}
