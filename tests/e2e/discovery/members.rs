//! Members follow the answers: one backend per address, named after its
//! entry, added at once and probed at once, removed only once missing for
//! `hold` (its clients closed with `backend_removed`, its metrics gone),
//! and kept, connections and health, when it comes back within `hold`.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::support::admin_http::{Kind, metrics, status};
use crate::support::admin_wait::wait_status;
use crate::support::discovery::{
    HOLD, INTERVAL, T, backend, client_on, closed_by_proxy, closed_on, config, config_with,
    connections_until, counts, discover, discoveries, ip, member, members_of, members_until, named,
    nth_discovery, quarantine, still_echoes,
};
use crate::support::dns::Qtype;
use crate::support::dnsmasq::Dnsmasq;
use crate::support::nodes::{BlackHole, echo_client, echo_on_shared_port};
use crate::support::proxy::Proxy;

const NAME: &str = "nodes.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_added_at_once_and_removed_only_after_hold() {
    let (a, b, c) = (ip(11, 2), ip(11, 3), ip(11, 4));
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let Some(mut dns) = Dnsmasq::start(&named(NAME, &[a, b, v6]), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&[a, b, c, v6], &[]).await;
    let target = format!("{NAME}:{port}");
    let proxy = Proxy::start(&config(&dns, HOLD, &[discover("ltc", &target, "")])).await;
    let first = nth_discovery(&proxy, 1).await;
    assert_eq!(first["name"], "ltc", "{first}");
    assert_eq!(counts(&first), (3, 0, 3), "{first}");
    let st = members_until(&proxy, &members_of("ltc", &[a, b, v6], port)).await;
    for ip in [a, b, v6] {
        let addr = SocketAddr::new(ip, port);
        let m = backend(&st, &member("ltc", addr));
        assert_eq!(m["addr"], addr.to_string(), "{m}");
        assert_eq!(m["discovered_from"], "ltc", "{m}");
        assert_eq!(m["backup"], false, "{m}");
    }
    assert!(
        backend(&st, &format!("ltc/[::1]:{port}"))["name"].is_string(),
        "IPv6 members are named with brackets"
    );

    // One client per member (the fewest connections wins).
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(echo_client(proxy.addr("p")).await);
    }
    let one = |ip| member("ltc", SocketAddr::new(ip, port));
    let (on_a, on_b, on_v6) = (one(a), one(b), one(v6));
    connections_until(&proxy, &[(&on_a, 1), (&on_b, 1), (&on_v6, 1)]).await;

    dns.set_hosts(&named(NAME, &[a, c, v6])).await;
    let second = nth_discovery(&proxy, 2).await;
    assert_eq!(
        counts(&second),
        (1, 0, 4),
        "c at once, b still held: {second}"
    );
    let third = nth_discovery(&proxy, 3).await;
    assert_eq!(counts(&third), (0, 1, 3), "{third}");
    // By the proxy's own clock: from the lookup that first missed b (the
    // one that added c) to b's removal.
    let held = timestamp(&third)
        .duration_since(timestamp(&second))
        .unwrap_or_default();
    assert!(
        held >= HOLD - 2 * INTERVAL,
        "b removed {held:?} after it left the answers, before hold ({HOLD:?})"
    );
    let gone = on_b;
    let closed = proxy.wait_event(closed_on(&gone), T).await;
    assert_eq!(closed["reason"], "backend_removed", "{closed}");
    let on_b = client_on(&proxy, &clients, &gone);
    closed_by_proxy(&mut clients[on_b]).await;
    for (i, c) in clients.iter_mut().enumerate() {
        if i != on_b {
            still_echoes(c).await;
        }
    }
    members_until(&proxy, &members_of("ltc", &[a, c, v6], port)).await;
}

/// Gone from the answers and back within `hold`: the member never left.
/// Its client stays, a quarantine set by hand stays, and no `discovered`
/// event says anything changed, over lookups that span more than `hold`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_within_hold_keeps_its_connection_and_health() {
    let (a, b, c) = (ip(12, 2), ip(12, 3), ip(12, 4));
    let Some(mut dns) = Dnsmasq::start(&named(NAME, &[a, b, c]), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&[a, b, c], &[]).await;
    let target = format!("{NAME}:{port}");
    // Long enough that two lookups surely fit in it on a loaded machine.
    let hold = Duration::from_secs(2);
    let proxy = Proxy::start(&config(&dns, hold, &[discover("ltc", &target, "")])).await;
    members_until(&proxy, &members_of("ltc", &[a, b, c], port)).await;
    let on_c = member("ltc", SocketAddr::new(c, port));
    quarantine(&proxy, &on_c).await;
    let mut clients = vec![
        echo_client(proxy.addr("p")).await,
        echo_client(proxy.addr("p")).await,
    ];
    let on_b = member("ltc", SocketAddr::new(b, port));
    connections_until(&proxy, &[(&on_b, 1)]).await;
    let before = status(proxy.admin()).await;

    dns.set_hosts(&named(NAME, &[a])).await;
    dns.wait_queries(Qtype::A, NAME, 2, T).await;
    dns.set_hosts(&named(NAME, &[a, b, c])).await;
    // More lookups than fit in one hold, all after the return.
    let lookups = (hold.as_millis() / INTERVAL.as_millis()) as usize + 3;
    dns.wait_queries(Qtype::A, NAME, lookups, T).await;

    assert_eq!(discoveries(&proxy).len(), 1, "{:?}", discoveries(&proxy));
    assert!(
        proxy.named("closed").is_empty(),
        "{:?}",
        proxy.named("closed")
    );
    for c in &mut clients {
        still_echoes(c).await;
    }
    let after = status(proxy.admin()).await;
    let (was, is) = (backend(&before, &on_c), backend(&after, &on_c));
    assert_eq!(is["state"], "quarantined", "{is}");
    assert_eq!(is["quarantine"], was["quarantine"], "the same window");
    assert_eq!(backend(&after, &on_b)["state"], "healthy");
    assert_eq!(backend(&after, &on_b)["connections"], 1);
}

/// A removed member's series leave `/metrics`; the others' stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_members_metrics_go_away() {
    let (a, b) = (ip(13, 2), ip(13, 3));
    let Some(mut dns) = Dnsmasq::start(&named(NAME, &[a, b]), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&[a, b], &[]).await;
    let target = format!("{NAME}:{port}");
    let hold = Duration::from_millis(300);
    let proxy = Proxy::start(&config(&dns, hold, &[discover("ltc", &target, "")])).await;
    members_until(&proxy, &members_of("ltc", &[a, b], port)).await;
    let (on_a, on_b) = (
        member("ltc", SocketAddr::new(a, port)),
        member("ltc", SocketAddr::new(b, port)),
    );
    let m = metrics(proxy.admin()).await;
    for name in [&on_a, &on_b] {
        let labels = [("pool", "p"), ("backend", name.as_str())];
        assert_eq!(
            m.get("pin_proxy_connections_total", Kind::Counter, &labels),
            Some(0.0),
            "{name} counted from the start"
        );
    }

    dns.set_hosts(&named(NAME, &[a])).await;
    members_until(&proxy, &members_of("ltc", &[a], port)).await;
    let m = metrics(proxy.admin()).await;
    let left: Vec<&str> = m
        .samples
        .iter()
        .filter(|s| s.labels.get("backend") == Some(on_b.as_str()))
        .map(|s| s.metric.as_str())
        .collect();
    assert!(left.is_empty(), "{on_b} still in /metrics: {left:?}");
    let labels = [("pool", "p"), ("backend", on_a.as_str())];
    assert!(
        m.get("pin_proxy_connections_total", Kind::Counter, &labels)
            .is_some()
    );
}

/// A new member is `unknown` until its first probe, which runs at once,
/// not at the next probe tick (an hour away here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_members_start_unknown_and_are_probed_at_once() {
    let (a, b, slow) = (ip(14, 2), ip(14, 3), ip(14, 4));
    let Some(mut dns) = Dnsmasq::start(&named(NAME, &[a]), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&[a, b], &[]).await;
    // Connects to `slow` hang until the probe's timeout.
    let hole = BlackHole::at(SocketAddr::new(slow, port));
    let target = format!("{NAME}:{port}");
    let health = "probe: connect, interval: 1h, timeout: 2s";
    let yaml = config_with(&dns, HOLD, health, &[discover("ltc", &target, "")]);
    let proxy = Proxy::start(&yaml).await;
    let on_a = member("ltc", SocketAddr::new(a, port));
    proxy.wait_event(probed(&on_a, "healthy"), T).await;

    dns.set_hosts(&named(NAME, &[a, b, slow])).await;
    let added = nth_discovery(&proxy, 2).await;
    assert_eq!(counts(&added), (2, 0, 3), "{added}");
    let on_slow = member("ltc", hole.addr);
    let st = status(proxy.admin()).await;
    assert_eq!(
        backend(&st, &on_slow)["state"],
        "unknown",
        "its probe cannot have ended yet"
    );
    let on_b = member("ltc", SocketAddr::new(b, port));
    // Within T, not an hour: probed when they appeared.
    proxy.wait_event(probed(&on_b, "healthy"), T).await;
    proxy.wait_event(probed(&on_slow, "down"), T).await;
    wait_status(proxy.admin(), "b healthy in /status", T, |s| {
        (backend(s, &on_b)["state"] == "healthy").then_some(())
    })
    .await;
    drop(hole);
}

fn probed<'a>(backend: &'a str, outcome: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |e| e["message"] == "probe" && e["backend"] == backend && e["outcome"] == outcome
}

fn timestamp(event: &Value) -> SystemTime {
    humantime::parse_rfc3339(event["timestamp"].as_str().expect("timestamp")).expect("RFC 3339")
}
