//! Probing discovered members: one whose address refuses is `down`, gets
//! no client and stays a member; a `probe_url` template reaches each
//! member's own REST twin through `{ip}` (IPv6 bracketed) and `{port}`.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use crate::support::admin_wait::wait_status;
use crate::support::blockbook::RestTwin;
use crate::support::discovery::{
    INTERVAL, T, backend, config, config_with, connections_until, discover, discoveries, ip,
    member, members_of, members_until, named,
};
use crate::support::dns::Qtype;
use crate::support::dnsmasq::{Dnsmasq, Srv};
use crate::support::nodes::{Node, echo, echo_client, echo_on_shared_port};
use crate::support::proxy::Proxy;

const NAME: &str = "nodes.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_failing_its_probes_is_down_gets_no_clients_and_stays() {
    let (a, dead) = (ip(51, 2), ip(51, 3));
    let Some(dns) = Dnsmasq::start(&named(NAME, &[a, dead]), &[]).await else {
        return;
    };
    // `dead` gets the port bound but not listening: connects are refused.
    let (port, _nodes, _refusing) = echo_on_shared_port(&[a], &[dead]).await;
    let target = format!("{NAME}:{port}");
    let hold = Duration::from_millis(300);
    let proxy = Proxy::start(&config(&dns, hold, &[discover("ltc", &target, "")])).await;
    let want = members_of("ltc", &[a, dead], port);
    members_until(&proxy, &want).await;
    let on_dead = member("ltc", SocketAddr::new(dead, port));
    wait_status(proxy.admin(), "the dead member down", T, |s| {
        (backend(s, &on_dead)["state"] == "down").then_some(())
    })
    .await;

    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(echo_client(proxy.addr("p")).await);
    }
    connections_until(&proxy, &[(&member("ltc", SocketAddr::new(a, port)), 4)]).await;
    let tried = |e: &serde_json::Value| {
        (e["message"] == "connected" || e["message"] == "connect_failed") && e["backend"] == on_dead
    };
    assert!(!proxy.events().iter().any(tried), "a client was sent to it");

    // Lookups over two holds: a down member is still a member.
    let lookups = 2 * (hold.as_millis() / INTERVAL.as_millis()) as usize + 2;
    dns.wait_queries(Qtype::A, NAME, lookups, T).await;
    let st = members_until(&proxy, &want).await;
    assert_eq!(backend(&st, &on_dead)["state"], "down");
    assert_eq!(discoveries(&proxy).len(), 1);
}

/// REST twins at each member's address on one port `Q`, at different
/// heights: `probe_url: "http://{ip}:Q/api/"` must reach each member's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_url_ip_is_each_members_address() {
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let ips = [ip(52, 2), ip(52, 3), v6];
    let heights = [500, 480, 490];
    let Some(dns) = Dnsmasq::start(&named(NAME, &ips), &[]).await else {
        return;
    };
    let (port, _nodes, _) = echo_on_shared_port(&ips, &[]).await;
    let (api_port, _twins) = twins_on_shared_port(&ips, &heights).await;
    let url = format!("http://{{ip}}:{api_port}/api/");
    let entry = discover(
        "bb",
        &format!("{NAME}:{port}"),
        &format!("probe_url: \"{url}\""),
    );
    let health = "probe: blockbook, interval: 100ms, timeout: 1s, max_lag_blocks: 100";
    let proxy = Proxy::start(&config_with(&dns, Duration::from_secs(1), health, &[entry])).await;
    members_until(&proxy, &members_of("bb", &ips, port)).await;
    let what = "each member at its own twin's height";
    wait_status(proxy.admin(), what, T, |s| {
        let at = |(ip, h): (&IpAddr, u64)| {
            backend(s, &member("bb", SocketAddr::new(*ip, port)))["height"] == h
        };
        ips.iter().zip(heights).all(at).then_some(())
    })
    .await;
}

/// SRV members on two ports, each with a REST twin on 127.0.0.1 at the
/// same port: `probe_url: "http://127.0.0.1:{port}/api/"` reaches each
/// member's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_url_port_is_each_members_port() {
    let (x, y) = (ip(53, 2), ip(53, 3));
    let (x_node, _x_twin) = node_and_twin(x, 470).await;
    let (y_node, _y_twin) = node_and_twin(y, 460).await;
    let srv_name = "_bb._tcp.nodes.test";
    let mut hosts = named("x.test", &[x]);
    hosts.extend(named("y.test", &[y]));
    let srv = [
        Srv::new(srv_name, "x.test", x_node.addr.port(), 0),
        Srv::new(srv_name, "y.test", y_node.addr.port(), 0),
    ];
    let Some(dns) = Dnsmasq::start(&hosts, &srv).await else {
        return;
    };
    let entry = discover(
        "bb",
        srv_name,
        "probe_url: \"http://127.0.0.1:{port}/api/\"",
    );
    let health = "probe: blockbook, interval: 100ms, timeout: 1s, max_lag_blocks: 100";
    let proxy = Proxy::start(&config_with(&dns, Duration::from_secs(1), health, &[entry])).await;
    let (on_x, on_y) = (
        format!("bb/x.test:{}", x_node.addr.port()),
        format!("bb/y.test:{}", y_node.addr.port()),
    );
    members_until(&proxy, &[on_x.clone(), on_y.clone()].into_iter().collect()).await;
    let what = "each member at its own twin's height";
    wait_status(proxy.admin(), what, T, |s| {
        let at = backend(s, &on_x)["height"] == 470 && backend(s, &on_y)["height"] == 460;
        at.then_some(())
    })
    .await;
}

/// REST twins on each of `ips` at one port, at `heights`.
async fn twins_on_shared_port(ips: &[IpAddr], heights: &[u64]) -> (u16, Vec<RestTwin>) {
    for _ in 0..20 {
        let Ok(first) = RestTwin::bind(SocketAddr::new(ips[0], 0), heights[0]).await else {
            continue;
        };
        let port = first.addr().port();
        let mut twins = vec![first];
        for (ip, h) in ips.iter().zip(heights).skip(1) {
            match RestTwin::bind(SocketAddr::new(*ip, port), *h).await {
                Ok(t) => twins.push(t),
                Err(_) => break,
            }
        }
        if twins.len() == ips.len() {
            return (port, twins);
        }
    }
    panic!("no port free on all of {ips:?}");
}

/// An echo node on `ip` and a REST twin at `height` on 127.0.0.1, both on
/// the same port.
async fn node_and_twin(ip: IpAddr, height: u64) -> (Node, RestTwin) {
    for _ in 0..20 {
        let node = Node::bind(SocketAddr::new(ip, 0), echo).await.unwrap();
        let twin_addr = SocketAddr::from(([127, 0, 0, 1], node.addr.port()));
        if let Ok(twin) = RestTwin::bind(twin_addr, height).await {
            return (node, twin);
        }
    }
    panic!("no port free on both {ip} and 127.0.0.1");
}
