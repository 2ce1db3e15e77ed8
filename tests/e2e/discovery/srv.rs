//! SRV discovery: one member per target:port, named after the target
//! (no trailing dot), at the target's lowest address; records above the
//! lowest priority are backups, and clients go to the primaries.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use crate::support::admin_wait::wait_status;
use crate::support::discovery::{
    T, backend, config, connections_until, counts, discover, ip, members_until, named,
    nth_discovery,
};
use crate::support::dnsmasq::{Dnsmasq, Srv};
use crate::support::nodes::{echo_client, echo_on_shared_port};
use crate::support::proxy::Proxy;

const SRV_NAME: &str = "_p2p._tcp.nodes.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowest_priority_targets_are_primaries_and_the_rest_backups() {
    // a.test has two addresses; the member uses the lower one.
    let (a_low, a_high, b, c) = (ip(31, 2), ip(31, 3), ip(31, 4), ip(31, 5));
    let mut hosts = named("a.test", &[a_high, a_low]);
    hosts.extend(named("b.test", &[b]));
    hosts.extend(named("c.test", &[c]));
    let (port, nodes, _) = echo_on_shared_port(&[a_low, a_high, b, c], &[]).await;
    let srv = [
        Srv::new(SRV_NAME, "a.test", port, 0),
        Srv::new(SRV_NAME, "b.test", port, 0),
        Srv::new(SRV_NAME, "c.test", port, 10),
    ];
    let Some(mut dns) = Dnsmasq::start(&hosts, &srv).await else {
        return;
    };
    let yaml = config(
        &dns,
        Duration::from_secs(1),
        &[discover("ltc", SRV_NAME, "")],
    );
    let proxy = Proxy::start(&yaml).await;
    let first = nth_discovery(&proxy, 1).await;
    assert_eq!(counts(&first), (3, 0, 3), "{first}");
    let names = ["a.test", "b.test", "c.test"].map(|t| format!("ltc/{t}:{port}"));
    let st = members_until(&proxy, &names.iter().cloned().collect()).await;
    for (name, addr, backup) in [
        (&names[0], SocketAddr::new(a_low, port), false),
        (&names[1], SocketAddr::new(b, port), false),
        (&names[2], SocketAddr::new(c, port), true),
    ] {
        let m = backend(&st, name);
        assert_eq!(m["addr"], addr.to_string(), "{m}");
        assert_eq!(m["backup"], backup, "{m}");
        assert_eq!(m["discovered_from"], "ltc", "{m}");
    }
    wait_status(proxy.admin(), "every member probed healthy", T, |s| {
        (names.iter().all(|n| backend(s, n)["state"] == "healthy")).then_some(())
    })
    .await;

    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(echo_client(proxy.addr("p")).await);
    }
    connections_until(&proxy, &[(&names[0], 2), (&names[1], 2), (&names[2], 0)]).await;
    assert_eq!(nodes[1].accepted(), 0, "a's other address is never used");

    // a leaves the record set: after hold its clients are closed, and
    // when they redial they go to b, the primary left; c stays a backup.
    dns.set_srv(&[
        Srv::new(SRV_NAME, "b.test", port, 0),
        Srv::new(SRV_NAME, "c.test", port, 10),
    ])
    .await;
    let st = members_until(&proxy, &names[1..].iter().cloned().collect()).await;
    assert_eq!(backend(&st, &names[2])["backup"], true, "{st}");
    let closed = proxy.wait_count(|e| e["message"] == "closed", 2, T).await;
    for e in &closed {
        assert_eq!(
            (&e["backend"], &e["reason"]),
            (
                &Value::from(names[0].as_str()),
                &Value::from("backend_removed")
            ),
            "{e}"
        );
    }
    for _ in 0..2 {
        clients.push(echo_client(proxy.addr("p")).await);
    }
    connections_until(&proxy, &[(&names[1], 4), (&names[2], 0)]).await;
}
