//! Keeping clients on good nodes, through the real binary: drain on failure,
//! rebalance on recovery, quarantine escalation and hysteresis, lag, the
//! blockbook verdicts, backups.
//!
//! Backends are simulated Litecoin P2P nodes ([`SimNode`]) probed with
//! `bitcoin-p2p`. Every wait is on a log event or a node's own count,
//! bounded by `T`; where a test must show that *nothing* happens for a while,
//! it counts the proxy's own rebalance ticks (see [`Clock`]) rather than
//! sleeping.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use crate::support::admin_http::{self, Kind};
use crate::support::blockbook::RestTwin;
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::{live_on, wait_until};
use pin_proxy::sim::simnode::SimNode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Bound on every wait.
const T: Duration = Duration::from_secs(20);

/// Litecoin regtest message start, as `network: litecoin-regtest` sends it.
const REGTEST: [u8; 4] = [0xfa, 0xbf, 0xb5, 0xda];

/// Dials per redialing client: enough for every move in these tests.
const MAX_DIALS: usize = 50;

/// A redialing client's pause before it dials again.
const REDIAL_PAUSE: Duration = Duration::from_millis(50);

async fn sim(height: u64) -> SimNode {
    SimNode::start("127.0.0.1:0".parse().unwrap(), REGTEST, height)
        .await
        .unwrap()
}

/// The settings of pool `p` that the tests turn.
#[derive(Clone)]
struct Knobs {
    probe: &'static str,
    /// Probe interval.
    interval: &'static str,
    fall: u32,
    base: &'static str,
    max: &'static str,
    /// Rebalance interval; `0s` is off.
    rebalance: &'static str,
    min_imbalance: usize,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            probe: "bitcoin-p2p",
            interval: "100ms",
            fall: 2,
            base: "500ms",
            max: "1s",
            rebalance: "0s",
            min_imbalance: 2,
        }
    }
}

impl Knobs {
    /// Pool `p` with these settings in front of `backends` (see [`primary`]).
    fn pool(&self, backends: &[String]) -> String {
        format!(
            "  - name: p\n    listen: 127.0.0.1:0\n    connect_timeout: 300ms\n    \
             rebalance: {{ interval: {}, min_imbalance: {} }}\n    \
             quarantine: {{ base: {}, max: {}, failures: 3 }}\n    \
             health: {{ probe: {}, network: litecoin-regtest, interval: {}, timeout: 300ms, \
             fall: {}, rise: 1, max_lag_blocks: 3 }}\n    backends: [{}]\n",
            self.rebalance,
            self.min_imbalance,
            self.base,
            self.max,
            self.probe,
            self.interval,
            self.fall,
            backends.join(", ")
        )
    }
}

fn primary(name: &str, addr: SocketAddr) -> String {
    format!("{{ name: {name}, addr: \"{addr}\" }}")
}

fn backup(name: &str, addr: SocketAddr) -> String {
    format!("{{ name: {name}, addr: \"{addr}\", backup: true }}")
}

fn config(pools: &[String]) -> String {
    format!("pools:\n{}", pools.concat())
}

/// Matches event `message` about backend `backend` of pool `p`.
fn about<'a>(message: &'a str, backend: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |e| e["message"] == message && e["pool"] == "p" && e["backend"] == backend
}

/// Matches a `probe` event of backend `backend` with `outcome`.
fn probed<'a>(backend: &'a str, outcome: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |e| about("probe", backend)(e) && e["outcome"] == outcome
}

/// Matches event `message` of pool `p`, whatever the backend.
fn in_p(message: &str) -> impl Fn(&Value) -> bool + '_ {
    move |e| e["message"] == message && e["pool"] == "p"
}

fn wait_healthy(proxy: &Proxy, backends: &[&str]) {
    for b in backends {
        proxy.wait_event_blocking(probed(b, "healthy"), T);
    }
}

fn counts(events: &[Value], backends: &[(&str, usize)]) -> Vec<(String, usize)> {
    backends
        .iter()
        .map(|(b, _)| (b.to_string(), live_on(events, b).len()))
        .collect()
}

fn expected(backends: &[(&str, usize)]) -> Vec<(String, usize)> {
    backends.iter().map(|(b, n)| (b.to_string(), *n)).collect()
}

/// Wait until pool `p` holds exactly these client connections per backend.
async fn wait_live(proxy: &Proxy, backends: &[(&str, usize)]) {
    let what = format!("client connections {backends:?}");
    let want = expected(backends);
    wait_until(&what, T, || counts(&proxy.events(), backends) == want).await;
}

fn assert_live(proxy: &Proxy, backends: &[(&str, usize)]) {
    assert_eq!(counts(&proxy.events(), backends), expected(backends));
}

/// Position of `event` in the log.
fn index_of(events: &[Value], event: &Value) -> usize {
    events
        .iter()
        .position(|e| e == event)
        .expect("event is in the log")
}

fn timestamp(event: &Value) -> SystemTime {
    humantime::parse_rfc3339(event["timestamp"].as_str().expect("timestamp")).expect("RFC 3339")
}

fn window_ms(event: &Value) -> u64 {
    event["window_ms"].as_u64().expect("window_ms")
}

/// Long-lived clients that redial whenever their connection closes (as
/// mwebd does), at most [`MAX_DIALS`] times each. Aborted on drop.
struct Clients(Vec<JoinHandle<()>>);

impl Clients {
    fn spawn(addr: SocketAddr, n: usize) -> Clients {
        Clients((0..n).map(|_| tokio::spawn(redial(addr, b""))).collect())
    }

    /// As [`Clients::spawn`], each sending one byte on every connection, so
    /// a [`Node::hold_greeted`] node tells them from probes.
    fn greeting(addr: SocketAddr, n: usize) -> Clients {
        Clients((0..n).map(|_| tokio::spawn(redial(addr, b"!"))).collect())
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

async fn redial(addr: SocketAddr, greeting: &'static [u8]) {
    for _ in 0..MAX_DIALS {
        if let Ok(mut stream) = TcpStream::connect(addr).await {
            let mut buf = [0u8; 1024];
            if stream.write_all(greeting).await.is_ok() {
                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            }
        }
        tokio::time::sleep(REDIAL_PAUSE).await;
    }
}

/// A second pool, `clock`, whose every rebalance tick logs
/// `rebalance_skipped`: its two clients sit on one backend while the other
/// (nothing listens there) stays `unknown` (one failed start-up probe, `fall:
/// 2`, no further probe within the test) and refuses the test connect.
///
/// Its ticks are the proxy's own evidence that time passed: with the same
/// interval as pool `p`, `n` clock ticks span at least `n - 1` ticks of `p`.
/// The tests use it where they must show that nothing happens for a while.
struct Clock {
    node: Node,
    interval: &'static str,
    clients: Vec<TcpStream>,
}

impl Clock {
    async fn new(interval: &'static str) -> Clock {
        Clock {
            node: Node::hold().await,
            interval,
            clients: Vec::new(),
        }
    }

    fn pool(&self) -> String {
        // Port 1 on loopback: nothing listens there, so connects are refused.
        format!(
            "  - name: clock\n    listen: 127.0.0.1:0\n    \
             rebalance: {{ interval: {}, min_imbalance: 2 }}\n    \
             quarantine: {{ base: 1h, max: 1h, failures: 1000 }}\n    \
             health: {{ probe: connect, interval: 1h, fall: 2 }}\n    \
             backends: [\"{}\", \"127.0.0.1:1\"]\n",
            self.interval, self.node.addr
        )
    }

    /// Connect its two clients and wait until the first tick.
    async fn start(&mut self, proxy: &Proxy) {
        for _ in 0..2 {
            let stream = TcpStream::connect(proxy.addr("clock")).await.unwrap();
            self.clients.push(stream);
        }
        wait_until("clock clients on their node", T, || self.node.live() == 2).await;
        self.wait_ticks(proxy, 1);
    }

    fn is_tick(e: &Value) -> bool {
        e["message"] == "rebalance_skipped" && e["pool"] == "clock"
    }

    /// Clock ticks logged in `events`.
    fn ticks(events: &[Value]) -> usize {
        events.iter().filter(|e| Clock::is_tick(e)).count()
    }

    /// Wait for `n` more ticks.
    fn wait_ticks(&self, proxy: &Proxy, n: usize) {
        let seen = Clock::ticks(&proxy.events());
        proxy.wait_count_blocking(Clock::is_tick, seen + n, T);
    }
}

/// The incident pin-proxy exists for: a node fails, its clients move to the
/// other; it comes back, and exactly one connection moves back to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_node_is_left_and_gets_exactly_one_connection_back_on_recovery() {
    let (a, b) = (sim(100).await, sim(100).await);
    let mut clock = Clock::new("400ms").await;
    let knobs = Knobs {
        rebalance: "400ms",
        ..Knobs::default()
    };
    let pool = knobs.pool(&[primary("a", a.addr()), primary("b", b.addr())]);
    let proxy = Proxy::start(&config(&[pool, clock.pool()])).await;
    clock.start(&proxy).await;
    wait_healthy(&proxy, &["a", "b"]);
    let _clients = Clients::spawn(proxy.addr("p"), 2);
    wait_live(&proxy, &[("a", 1), ("b", 1)]).await;

    a.stop().await;
    proxy.wait_event(about("quarantined", "a"), T).await;
    wait_live(&proxy, &[("a", 0), ("b", 2)]).await;
    wait_until("both clients at node B", T, || b.live() == 2).await;
    // While A is down, ticks close nothing: 4 clock ticks span at least 3 of p's.
    clock.wait_ticks(&proxy, 4);
    assert!(proxy.events().iter().all(|e| !in_p("rebalanced")(e)));
    assert_live(&proxy, &[("a", 0), ("b", 2)]);

    a.restart().await.unwrap();
    let released = proxy.wait_event(about("released", "a"), T).await;
    let moved = proxy.wait_event(in_p("rebalanced"), T).await;
    let events = proxy.events();
    let (at_release, at_move) = (index_of(&events, &released), index_of(&events, &moved));
    let newest_on_b = *live_on(&events[..at_move], "b").last().unwrap();
    assert_eq!(
        (&moved["from"], &moved["to"], moved["conn"].as_u64()),
        (&Value::from("b"), &Value::from("a"), Some(newest_on_b)),
        "B's newest connection moves to A: {moved}"
    );
    let ticks = Clock::ticks(&events[at_release..at_move]);
    assert!(ticks <= 2, "moved {ticks} clock ticks after A's release");
    let closed = proxy
        .wait_event(|e| in_p("closed")(e) && e["conn"] == moved["conn"], T)
        .await;
    assert_eq!(closed["reason"], "rebalanced");
    wait_live(&proxy, &[("a", 1), ("b", 1)]).await;
    wait_until("1/1 at the nodes", T, || a.live() == 1 && b.live() == 1).await;

    // Then nothing more moves.
    clock.wait_ticks(&proxy, 4);
    let events = proxy.events();
    let closed_since: Vec<&Value> = events[at_release..]
        .iter()
        .filter(|e| in_p("closed")(e))
        .collect();
    assert_eq!(closed_since, [&closed], "only the moved connection closed");
    assert_eq!(events.iter().filter(|e| in_p("rebalanced")(e)).count(), 1);
    assert_live(&proxy, &[("a", 1), ("b", 1)]);
}

/// The clock pool is itself the case: every tick plans a move to a backend
/// that does not answer the test connect, so no tick closes anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_closes_nothing_when_the_emptier_backend_does_not_answer() {
    let mut clock = Clock::new("200ms").await;
    let proxy = Proxy::start(&config(&[clock.pool()])).await;
    clock.start(&proxy).await;
    clock.wait_ticks(&proxy, 5);
    let moved = |e: &Value| e["message"] == "rebalanced" || e["message"] == "closed";
    assert!(
        proxy.events().iter().all(|e| !moved(e)),
        "a tick closed a connection"
    );
    assert_eq!(clock.node.live(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_pool_ticks_connect_to_no_backend() {
    let (a, b) = (sim(100).await, sim(100).await);
    let mut clock = Clock::new("200ms").await;
    // Only the start-up probe connects; ticks are frequent and strict.
    let knobs = Knobs {
        interval: "1h",
        rebalance: "200ms",
        min_imbalance: 1,
        ..Knobs::default()
    };
    let pool = knobs.pool(&[primary("a", a.addr()), primary("b", b.addr())]);
    let proxy = Proxy::start(&config(&[pool, clock.pool()])).await;
    wait_healthy(&proxy, &["a", "b"]);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(TcpStream::connect(proxy.addr("p")).await.unwrap());
    }
    wait_live(&proxy, &[("a", 2), ("b", 2)]).await;
    wait_until("2/2 at the nodes", T, || a.live() == 2 && b.live() == 2).await;
    clock.start(&proxy).await;
    clock.wait_ticks(&proxy, 6);
    assert_eq!(
        (a.accepted(), b.accepted()),
        (3, 3),
        "2 clients + 1 start-up probe each: ticks connected to a node"
    );
    let ticked = |e: &Value| in_p("rebalanced")(e) || in_p("rebalance_skipped")(e);
    assert!(proxy.events().iter().all(|e| !ticked(e)));
    drop(clients);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_node_is_drained_but_kept_as_the_last_leg() {
    let (a, b) = (sim(1000).await, sim(1000).await);
    // Windows longer than the test: A stays lagging once found so.
    let knobs = Knobs {
        base: "1h",
        max: "1h",
        ..Knobs::default()
    };
    let pool = knobs.pool(&[primary("a", a.addr()), primary("b", b.addr())]);
    let proxy = Proxy::start(&config(&[pool])).await;
    wait_healthy(&proxy, &["a", "b"]);
    let _clients = Clients::spawn(proxy.addr("p"), 2);
    wait_live(&proxy, &[("a", 1), ("b", 1)]).await;
    let on_a = live_on(&proxy.events(), "a");

    // B moves on by 10 blocks, A does not: 1000 vs 1010 with max_lag_blocks 3.
    b.set_height(1010);
    let lag = proxy.wait_event(probed("a", "lagging"), T).await;
    assert_eq!(lag["height"], 1000);
    let q = proxy.wait_event(about("quarantined", "a"), T).await;
    assert_eq!(q["reason"], "lagging");
    let drained = proxy.wait_event(about("drained", "a"), T).await;
    assert_eq!(
        (&drained["reason"], &drained["connections"]),
        (&Value::from("lagging"), &Value::from(1))
    );
    let closed = proxy
        .wait_event(
            |e| about("closed", "a")(e) && on_a.contains(&e["conn"].as_u64().unwrap()),
            T,
        )
        .await;
    assert_eq!(closed["reason"], "drained");
    wait_live(&proxy, &[("a", 0), ("b", 2)]).await;

    // Only the lagging node is left: it keeps its clients and takes new ones.
    b.stop().await;
    proxy.wait_event(about("quarantined", "b"), T).await;
    wait_live(&proxy, &[("a", 2), ("b", 0)]).await;
    let _late = Clients::spawn(proxy.addr("p"), 1);
    wait_live(&proxy, &[("a", 3), ("b", 0)]).await;
    wait_until("3 clients at node A", T, || a.live() == 3).await;
    let events = proxy.events();
    assert_eq!(
        events.iter().filter(|e| about("drained", "a")(e)).count(),
        1,
        "the last leg was drained"
    );
    assert!(
        events
            .iter()
            .all(|e| !in_p("closed")(e) || e["reason"] != "no_backend"),
        "a client was turned away instead of failing open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_node_gets_doubling_windows_and_one_success_resets_them() {
    let a = sim(100).await;
    let mut clock = Clock::new("200ms").await;
    let knobs = Knobs {
        base: "300ms",
        max: "1s",
        ..Knobs::default()
    };
    let proxy = Proxy::start(&config(&[
        knobs.pool(&[primary("a", a.addr())]),
        clock.pool(),
    ]))
    .await;
    clock.start(&proxy).await;
    wait_healthy(&proxy, &["a"]);

    a.stop().await;
    let qs = proxy.wait_count(about("quarantined", "a"), 4, T).await;
    let released_early = proxy.events().iter().any(|e| about("released", "a")(e));
    a.restart().await.unwrap();
    let windows: Vec<u64> = qs.iter().map(window_ms).collect();
    assert_eq!(windows, [300, 600, 1000, 1000], "base, doubled, capped");
    let strikes: Vec<&Value> = qs.iter().map(|q| &q["strikes"]).collect();
    assert_eq!(strikes, [1, 2, 3, 4]);
    assert!(qs.iter().all(|q| q["reason"] == "down"));
    // Probe-gated return: each window ran out while A was down, and the
    // failing probe after it re-quarantined A instead of letting it back.
    assert!(!released_early, "released while down");
    for pair in qs.windows(2) {
        let gap = timestamp(&pair[1])
            .duration_since(timestamp(&pair[0]))
            .unwrap();
        let window = Duration::from_millis(window_ms(&pair[0]));
        assert!(
            gap + Duration::from_millis(50) >= window,
            "re-quarantined {gap:?} into a {window:?} window"
        );
    }
    let released = proxy.wait_event(about("released", "a"), T).await;
    let events = proxy.events();
    let before = events[..index_of(&events, &released)]
        .iter()
        .rfind(|e| about("probe", "a")(e))
        .unwrap();
    assert_eq!(
        before["outcome"], "healthy",
        "released without a passed probe"
    );

    // Passed probes in service reset the count: the next window is base again.
    clock.wait_ticks(&proxy, 3);
    a.stop().await;
    let next = proxy
        .wait_count(about("quarantined", "a"), 5, T)
        .await
        .remove(4);
    assert_eq!((window_ms(&next), &next["strikes"]), (300, &Value::from(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bad_probe_between_good_ones_changes_nothing() {
    let a = sim(100).await;
    // Long enough between probes for the test to restart A in between.
    let knobs = Knobs {
        interval: "400ms",
        ..Knobs::default()
    };
    let proxy = Proxy::start(&config(&[knobs.pool(&[primary("a", a.addr())])])).await;
    wait_healthy(&proxy, &["a"]);
    a.stop().await;
    proxy.wait_event(probed("a", "down"), T).await;
    a.restart().await.unwrap();
    proxy.wait_count(probed("a", "healthy"), 2, T).await;
    let acted = |e: &Value| about("quarantined", "a")(e) || about("drained", "a")(e);
    assert!(
        proxy.events().iter().all(|e| !acted(e)),
        "one blip acted on A"
    );

    // Control: fall (2) bad verdicts in a row do take it out.
    a.stop().await;
    let q = proxy.wait_event(about("quarantined", "a"), T).await;
    assert_eq!(q["reason"], "down");
}

fn with_probe_url(name: &str, addr: SocketAddr, url: &str) -> String {
    format!("{{ name: {name}, addr: \"{addr}\", probe_url: \"{url}\" }}")
}

/// `inSync: false` is unhealthy (quarantined, drained); an unreachable
/// `/api/` says nothing about the socket clients use: unknown, kept, usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blockbook_out_of_sync_is_drained_but_unreachable_api_is_only_unknown() {
    let (x, y) = (Node::hold().await, Node::hold().await);
    let (x_api, y_api) = (RestTwin::start().await, RestTwin::start().await);
    let knobs = Knobs {
        probe: "blockbook",
        base: "1h",
        max: "1h",
        ..Knobs::default()
    };
    let pool = knobs.pool(&[
        with_probe_url("x", x.addr, &x_api.url()),
        with_probe_url("y", y.addr, &y_api.url()),
    ]);
    let proxy = Proxy::start(&config(&[pool])).await;
    wait_healthy(&proxy, &["x", "y"]);
    let _clients = Clients::spawn(proxy.addr("p"), 2);
    wait_live(&proxy, &[("x", 1), ("y", 1)]).await;
    let on_y = live_on(&proxy.events(), "y");

    y_api.go_away();
    let unknown = proxy.wait_event(probed("y", "unknown"), T).await;
    assert_eq!(unknown["detail"], "connect refused");

    x_api.set_in_sync(false);
    let bad = proxy.wait_event(probed("x", "unhealthy"), T).await;
    assert_eq!(bad["detail"], "inSync false");
    assert_eq!(
        proxy.wait_event(about("quarantined", "x"), T).await["reason"],
        "unhealthy"
    );
    assert_eq!(
        proxy.wait_event(about("drained", "x"), T).await["reason"],
        "unhealthy"
    );
    // x's client redials and lands on y: unknown is usable.
    wait_live(&proxy, &[("x", 0), ("y", 2)]).await;
    let events = proxy.events();
    assert!(
        on_y.is_subset(&live_on(&events, "y")),
        "y's client was closed"
    );
    let acted = |e: &Value| about("quarantined", "y")(e) || about("drained", "y")(e);
    assert!(events.iter().all(|e| !acted(e)), "unknown y was acted on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_serves_only_while_every_primary_is_down_and_hands_clients_back() {
    let (a, b, s) = (sim(100).await, sim(100).await, sim(100).await);
    // min_imbalance far above the moves below: backups move back regardless.
    let knobs = Knobs {
        base: "300ms",
        max: "600ms",
        rebalance: "300ms",
        min_imbalance: 5,
        ..Knobs::default()
    };
    let pool = knobs.pool(&[
        primary("a", a.addr()),
        primary("b", b.addr()),
        backup("s", s.addr()),
    ]);
    let proxy = Proxy::start(&config(&[pool])).await;
    wait_healthy(&proxy, &["a", "b", "s"]);
    let _clients = Clients::spawn(proxy.addr("p"), 2);
    wait_live(&proxy, &[("a", 1), ("b", 1), ("s", 0)]).await;

    a.stop().await;
    proxy.wait_event(about("quarantined", "a"), T).await;
    wait_live(&proxy, &[("a", 0), ("b", 2), ("s", 0)]).await;
    let on_backup = |e: &Value| about("connected", "s")(e);
    assert!(
        proxy.events().iter().all(|e| !on_backup(e)),
        "backup used while B was up"
    );

    b.stop().await;
    proxy.wait_event(about("quarantined", "b"), T).await;
    wait_live(&proxy, &[("a", 0), ("b", 0), ("s", 2)]).await;

    a.restart().await.unwrap();
    proxy.wait_event(about("released", "a"), T).await;
    let moves = proxy.wait_count(in_p("rebalanced"), 2, T).await;
    for m in &moves {
        assert_eq!(
            (&m["from"], &m["to"]),
            (&Value::from("s"), &Value::from("a")),
            "{m}"
        );
    }
    let apart = timestamp(&moves[1])
        .duration_since(timestamp(&moves[0]))
        .unwrap();
    assert!(
        apart >= Duration::from_millis(150),
        "two moves {apart:?} apart: one tick"
    );
    wait_live(&proxy, &[("a", 2), ("b", 0), ("s", 0)]).await;
    wait_until("both clients at node A", T, || {
        a.live() == 2 && s.live() == 0
    })
    .await;
}

/// A Blockbook of another coin is unsuitable: it gets no client, and once
/// the only other one turns unsuitable too, new clients are refused at
/// accept (`no_suitable_backend`) while the connections the last leg holds
/// stay; when a right coin comes back, clients reach it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blockbook_of_another_coin_gets_no_client_not_even_to_fail_open() {
    // The probes connect to the nodes too: count only greeting clients.
    let ((x_node, x), (y_node, y)) = (Node::hold_greeted().await, Node::hold_greeted().await);
    let (x_api, y_api) = (RestTwin::start().await, RestTwin::start().await);
    y_api.set_coin("Bitcoin");
    let knobs = Knobs {
        probe: "blockbook",
        ..Knobs::default()
    };
    let pool = knobs.pool(&[
        with_probe_url("x", x_node.addr, &x_api.url()),
        with_probe_url("y", y_node.addr, &y_api.url()),
    ]);
    let yaml = format!("admin: {{ listen: 127.0.0.1:0 }}\n{}", config(&[pool]));
    let proxy = Proxy::start(&yaml).await;
    let unfit = proxy.wait_event(probed("y", "unsuitable"), T).await;
    assert_eq!(unfit["detail"], "coin \"Bitcoin\" is not litecoin-regtest");
    assert_eq!(
        proxy.wait_event(about("quarantined", "y"), T).await["reason"],
        "unsuitable"
    );
    wait_healthy(&proxy, &["x"]);
    let status = admin_http::status(proxy.admin()).await;
    let y_status = &status["pools"][0]["backends"][1];
    assert_eq!(y_status["state"], "unsuitable");
    assert_eq!(y_status["node"]["coin"], "Bitcoin");
    assert_eq!(
        status["pools"][0]["backends"][0]["node"]["coin"],
        "Litecoin"
    );

    // Least-used would pick y (no connections): every client goes to x.
    let _clients = Clients::greeting(proxy.addr("p"), 3);
    wait_live(&proxy, &[("x", 3), ("y", 0)]).await;
    wait_until("3 clients at x", T, || x.live() == 3).await;
    assert_eq!(y.ever(), 0, "a client reached the other coin's node");

    // x turns unsuitable too: it keeps what it holds (the last leg), and a
    // new client is closed at once, unread, never handed to either.
    x_api.set_coin("Bitcoin");
    proxy.wait_event(probed("x", "unsuitable"), T).await;
    let mut late = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(T, late.read(&mut buf)).await.unwrap();
    assert!(matches!(n, Ok(0) | Err(_)), "the refused client read {n:?}");
    let rejected = proxy.wait_event(in_p("rejected"), T).await;
    assert_eq!(rejected["reason"], "no_suitable_backend");
    assert_eq!((x.live(), y.ever()), (3, 0));
    let metrics = admin_http::metrics(proxy.admin()).await;
    let refused = [("pool", "p"), ("reason", "no_suitable_backend")];
    assert!(metrics.value("pin_proxy_rejected_total", Kind::Counter, &refused) >= 1.0);
    let y_labels = [("pool", "p"), ("backend", "y")];
    assert_eq!(
        metrics.value("pin_proxy_backend_suitable", Kind::Gauge, &y_labels),
        0.0
    );

    // y is a Litecoin Blockbook again: it returns after its window and
    // `rise`, and x's clients are drained to it.
    y_api.set_coin("Litecoin");
    proxy.wait_event(about("released", "y"), T).await;
    wait_live(&proxy, &[("x", 0), ("y", 3)]).await;
    wait_until("3 clients at y", T, || y.live() == 3).await;
}
