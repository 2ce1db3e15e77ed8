//! Static and discovered backends in one pool: both listed (static ones
//! with `discovered_from: null`), both take clients, and a discovery change
//! leaves the static backend and its clients alone.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::discovery::{
    T, backend, client_on, closed_by_proxy, closed_on, config, connections_until, discover, ip,
    member, members_of, members_until, named, still_echoes,
};
use crate::support::dnsmasq::Dnsmasq;
use crate::support::nodes::{Node, echo_client, echo_on_shared_port};
use crate::support::proxy::Proxy;

const NAME: &str = "nodes.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_and_discovered_backends_share_a_pool() {
    let (a, b) = (ip(71, 2), ip(71, 3));
    let Some(mut dns) = Dnsmasq::start(&named(NAME, &[a, b]), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&[a, b], &[]).await;
    let fixed = Node::echo().await;
    let backends = [
        format!("{{ name: s, addr: \"{}\" }}", fixed.addr),
        discover("ltc", &format!("{NAME}:{port}"), ""),
    ];
    let proxy = Proxy::start(&config(&dns, Duration::from_millis(300), &backends)).await;
    let st = members_until(&proxy, &members_of("ltc", &[a, b], port)).await;
    let s = backend(&st, "s");
    assert!(s["discovered_from"].is_null(), "{s}");
    assert_eq!(s["addr"], fixed.addr.to_string());
    let on_b = member("ltc", SocketAddr::new(b, port));
    assert_eq!(backend(&st, &on_b)["discovered_from"], "ltc");

    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(echo_client(proxy.addr("p")).await);
    }
    let on_a = member("ltc", SocketAddr::new(a, port));
    connections_until(&proxy, &[("s", 1), (&on_a, 1), (&on_b, 1)]).await;

    dns.set_hosts(&named(NAME, &[a])).await;
    let st = members_until(&proxy, &members_of("ltc", &[a], port)).await;
    assert_eq!(backend(&st, "s")["state"], "healthy", "{st}");
    let closed = proxy.wait_event(closed_on(&on_b), T).await;
    assert_eq!(closed["reason"], "backend_removed");
    let gone = client_on(&proxy, &clients, &on_b);
    closed_by_proxy(&mut clients[gone]).await;
    for (i, c) in clients.iter_mut().enumerate() {
        if i != gone {
            still_echoes(c).await;
        }
    }
    assert_eq!(
        proxy.named("closed").len(),
        1,
        "{:?}",
        proxy.named("closed")
    );
}
