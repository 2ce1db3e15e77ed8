//! A reload that leaves a discover entry as it was keeps its members as
//! they were: no new `discovered` event, every connection, and a manual
//! quarantine with its window.

use std::net::SocketAddr;

use crate::support::admin_http::status;
use crate::support::discovery::{
    HOLD, T, backend, config, connections_until, discover, discoveries, ip, member, members_of,
    members_until, named, quarantine, same_members, still_echoes,
};
use crate::support::dns::Qtype;
use crate::support::dnsmasq::Dnsmasq;
use crate::support::nodes::{Node, echo_client, echo_on_shared_port};
use crate::support::proxy::Proxy;

const NAME: &str = "nodes.test";

/// `yaml` with the admin endpoint and pool `p` on the addresses `proxy`
/// bound, so a reload keeps them.
fn pinned(yaml: &str, proxy: &Proxy) -> String {
    yaml.replacen(
        "admin: { listen: 127.0.0.1:0 }",
        &format!("admin: {{ listen: \"{}\" }}", proxy.admin()),
        1,
    )
    .replacen(
        "    listen: 127.0.0.1:0\n",
        &format!("    listen: \"{}\"\n", proxy.addr("p")),
        1,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_members_connections_and_a_manual_quarantine() {
    let (a, b, c) = (ip(81, 2), ip(81, 3), ip(81, 4));
    let Some(dns) = Dnsmasq::start(&named(NAME, &[a, b, c]), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&[a, b, c], &[]).await;
    let entry = discover("ltc", &format!("{NAME}:{port}"), "");
    let proxy = Proxy::start(&config(&dns, HOLD, std::slice::from_ref(&entry))).await;
    let want = members_of("ltc", &[a, b, c], port);
    members_until(&proxy, &want).await;
    let on_c = member("ltc", SocketAddr::new(c, port));
    quarantine(&proxy, &on_c).await;
    let mut clients = vec![
        echo_client(proxy.addr("p")).await,
        echo_client(proxy.addr("p")).await,
    ];
    let one = |ip| member("ltc", SocketAddr::new(ip, port));
    connections_until(&proxy, &[(&one(a), 1), (&one(b), 1), (&on_c, 0)]).await;
    let before = status(proxy.admin()).await;
    let found = discoveries(&proxy).len();

    // Something else changes: a static backend joins.
    let extra = Node::echo().await;
    let more = [entry, format!("{{ name: s, addr: \"{}\" }}", extra.addr)];
    let outcome = proxy
        .reload(&pinned(&config(&dns, HOLD, &more), &proxy))
        .await;
    assert_eq!(outcome["message"], "reloaded", "{outcome}");
    dns.wait_queries(Qtype::A, NAME, 3, T).await;

    let after = members_until(&proxy, &want).await;
    assert!(backend(&after, "s")["discovered_from"].is_null());
    same_members(&before, &after, &want);
    assert_eq!(backend(&after, &on_c)["state"], "quarantined");
    assert_eq!(
        discoveries(&proxy).len(),
        found,
        "{:?}",
        discoveries(&proxy)
    );
    for c in &mut clients {
        still_echoes(c).await;
    }
    assert!(
        proxy.named("closed").is_empty(),
        "{:?}",
        proxy.named("closed")
    );
}
