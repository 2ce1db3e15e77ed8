//! Helpers for the lying-node tests: pool configs, nodes that announce what
//! they are told (a raw P2P script node, a Blockbook REST twin), redialing
//! clients, and the proxy's own counters as evidence that probes ran.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pin_proxy::config::Network;
use pin_proxy::inspect::pow::{self, Header, Tip};
use pin_proxy::inspect::wire::{self, Decoder, VersionParams};
use pin_proxy::sim::simchain::SimChain;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::admin_http::{Kind, Metrics, metrics};
use super::admin_wait::wait_metrics;
use super::live_on;
use super::proxy::Proxy;
use super::wait_until;

/// Bound on every wait.
pub const T: Duration = Duration::from_secs(20);

/// Litecoin regtest message start, as `network: litecoin-regtest` sends it.
pub const REGTEST: [u8; 4] = [0xfa, 0xbf, 0xb5, 0xda];

/// Admin endpoint and pool `p` with `probe` in front of `backends`; `fall: 2`,
/// quarantine windows longer than any test, no rebalance. `listen` and
/// `admin` are `127.0.0.1:0` at start, the bound addresses on a reload.
pub fn config(listen: &str, admin: &str, probe: &str, backends: &[String]) -> String {
    format!(
        "admin: {{ listen: \"{admin}\" }}\npools:\n  - name: p\n    listen: \"{listen}\"\n    \
         rebalance: {{ interval: 0s }}\n    quarantine: {{ base: 1h, max: 1h }}\n    \
         health: {{ probe: {probe}, network: litecoin-regtest, interval: 100ms, timeout: 3s, \
         fall: 2, rise: 1, max_lag_blocks: 3 }}\n    backends: [{}]\n",
        backends.join(", ")
    )
}

/// A backend entry.
pub fn backend(name: &str, addr: SocketAddr) -> String {
    format!("{{ name: {name}, addr: \"{addr}\" }}")
}

/// A backend entry with a `probe_url`.
pub fn with_url(name: &str, addr: SocketAddr, url: &str) -> String {
    format!("{{ name: {name}, addr: \"{addr}\", probe_url: \"{url}\" }}")
}

/// Matches event `message` about backend `backend` of pool `p`.
pub fn about<'a>(message: &'a str, backend: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |e| e["message"] == message && e["pool"] == "p" && e["backend"] == backend
}

/// Matches a `probe` event of `backend` with `outcome`.
pub fn probed<'a>(backend: &'a str, outcome: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |e| about("probe", backend)(e) && e["outcome"] == outcome
}

/// An event that acts against `backend`: a bad probe outcome, a
/// quarantine or a drain.
pub fn acted_on(e: &Value, backend: &str) -> bool {
    let bad = ["lagging", "unhealthy", "down"]
        .iter()
        .any(|o| probed(backend, o)(e));
    bad || about("quarantined", backend)(e) || about("drained", backend)(e)
}

/// Wait until pool `p` holds exactly these client connections per backend.
pub async fn wait_live(proxy: &Proxy, want: &[(&str, usize)]) {
    let counts = || -> Vec<(&str, usize)> {
        let events = proxy.events();
        want.iter()
            .map(|(b, _)| (*b, live_on(&events, b).len()))
            .collect()
    };
    wait_until(&format!("client connections {want:?}"), T, || {
        counts() == want
    })
    .await;
}

/// The address the admin endpoint bound.
pub fn admin_addr(proxy: &Proxy) -> SocketAddr {
    let event = proxy.wait_event_blocking(|e| e["message"] == "admin_listening", T);
    event["listen"].as_str().unwrap().parse().unwrap()
}

/// The body of `GET path` on the admin endpoint.
pub async fn get(admin: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(admin).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut text = String::new();
    super::within(path, T, stream.read_to_string(&mut text))
        .await
        .unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
    body.to_owned()
}

/// Backend `name` of pool `p` in `/status`.
pub async fn status_of(admin: SocketAddr, name: &str) -> Value {
    let status: Value = serde_json::from_str(&get(admin, "/status").await).unwrap();
    let backends = status["pools"][0]["backends"].as_array().unwrap();
    let found = backends.iter().find(|b| b["name"] == name);
    found
        .unwrap_or_else(|| panic!("no backend {name} in {status}"))
        .clone()
}

/// `pin_proxy_probes_total` of `backend` in pool `p` with `outcome`.
pub async fn probes(admin: SocketAddr, backend: &str, outcome: &str) -> f64 {
    probes_in(&metrics(admin).await, backend, outcome)
}

/// `pin_proxy_probes_total` of `backend` in pool `p` with `outcome` in
/// `metrics`.
fn probes_in(metrics: &Metrics, backend: &str, outcome: &str) -> f64 {
    let labels = [("pool", "p"), ("backend", backend), ("outcome", outcome)];
    let count = metrics.get("pin_proxy_probes_total", Kind::Counter, &labels);
    count.unwrap_or(0.0)
}

/// Wait until each of `backends` passed `n` more healthy probes: with
/// `fall: 2`, time enough for a bad verdict to have acted.
pub async fn wait_healthy_probes(admin: SocketAddr, backends: &[&str], n: u32) {
    for b in backends {
        let start = probes(admin, b, "healthy").await;
        let what = format!("{n} more healthy probes of {b}");
        wait_metrics(admin, &what, T, |m| {
            (probes_in(m, b, "healthy") >= start + f64::from(n)).then_some(())
        })
        .await;
    }
}

/// Wait until `liar`'s probe is `unhealthy`, or one of `honest` was acted
/// on (fail at once, with the event). Its detail must say its own headers
/// contradict its claim, because `why`.
pub fn judged_contradicted(proxy: &Proxy, liar: &str, honest: &[&str], why: &str) -> Value {
    let bad = probed(liar, "unhealthy");
    let event = proxy.wait_event_blocking(|e| bad(e) || honest.iter().any(|h| acted_on(e, h)), T);
    assert!(bad(&event), "an honest backend was acted on: {event}");
    let detail = event["detail"].as_str().unwrap();
    assert!(
        detail.contains("contradicted by its own headers") && detail.contains(why),
        "liar's detail: {detail}"
    );
    event
}

/// Nothing acted on `honest`, and no client connection of theirs closed.
pub fn assert_untouched(proxy: &Proxy, honest: &[&str]) {
    let events = proxy.events();
    for h in honest {
        let acted: Vec<&Value> = events.iter().filter(|e| acted_on(e, h)).collect();
        assert!(acted.is_empty(), "{h} was acted on: {acted:?}");
    }
    let moved = |e: &&Value| {
        let theirs = e["pool"] == "p" && honest.iter().any(|h| e["backend"] == *h);
        theirs && (e["message"] == "closed" || e["message"] == "drained")
    };
    let closed: Vec<&Value> = events.iter().filter(moved).collect();
    assert!(closed.is_empty(), "clients were moved: {closed:?}");
}

/// Long-lived clients that redial whenever their connection closes (as
/// mwebd does), at most 50 times each. Aborted on drop.
pub struct Clients(Vec<JoinHandle<()>>);

impl Clients {
    /// `n` clients of `addr`, connected one after the other (so the
    /// least-used spread is exact).
    pub async fn spawn(proxy: &Proxy, n: usize) -> Clients {
        let addr = proxy.addr("p");
        let mut tasks = Vec::new();
        let connected = || {
            let is = |e: &&Value| e["message"] == "connected" && e["pool"] == "p";
            proxy.events().iter().filter(is).count()
        };
        for _ in 0..n {
            let before = connected();
            tasks.push(tokio::spawn(redial(addr)));
            wait_until("client connected", T, || connected() > before).await;
        }
        Clients(tasks)
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

async fn redial(addr: SocketAddr) {
    for _ in 0..50 {
        if let Ok(mut stream) = TcpStream::connect(addr).await {
            let mut buf = [0u8; 1024];
            while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A regtest P2P node that announces any `start_height` (negative too) and
/// answers `getheaders` from a fixed list of headers (heights 1, 2, ...),
/// after the first locator hash it finds among them.
pub struct ScriptNode {
    /// Its address.
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl ScriptNode {
    /// Announce `start_height`, serve `headers`.
    pub async fn start(start_height: i32, headers: Vec<Header>) -> ScriptNode {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let headers = Arc::new(headers);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(converse(stream, start_height, headers.clone()));
            }
        });
        ScriptNode { addr, task }
    }
}

impl Drop for ScriptNode {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn converse(mut stream: TcpStream, start_height: i32, headers: Arc<Vec<Header>>) {
    let mut decoder = Decoder::new(REGTEST);
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            return;
        }
        decoder.feed(&buf[..n]);
        while let Ok(Some(msg)) = decoder.next_message() {
            let reply = match msg.command.as_str() {
                "version" => {
                    let mut out = version(&stream, start_height);
                    out.extend(wire::encode(REGTEST, "verack", &[]));
                    out
                }
                "getheaders" => headers_after(&headers, &msg.payload),
                _ => continue,
            };
            if stream.write_all(&reply).await.is_err() {
                return;
            }
        }
    }
}

fn version(stream: &TcpStream, start_height: i32) -> Vec<u8> {
    let params = VersionParams {
        services: 1,
        timestamp: wire::unix_now(),
        receiver: stream.peer_addr().unwrap(),
        sender: stream.local_addr().unwrap(),
        nonce: wire::random_nonce(),
        user_agent: "/liar:0.1/".into(),
        start_height,
    };
    wire::encode(REGTEST, "version", &wire::version_payload(&params))
}

/// The `headers` message after the first locator hash found in `headers`
/// (from the start when none is).
fn headers_after(headers: &[Header], payload: &[u8]) -> Vec<u8> {
    let locator = payload.get(5..).unwrap_or_default().chunks_exact(32);
    let from = locator
        .filter_map(|h| headers.iter().position(|x| x.hash()[..] == *h))
        .next()
        .map_or(0, |i| i + 1);
    let sent = &headers[from..headers.len().min(from + 2000)];
    let mut body = Vec::new();
    wire::put_var_int(&mut body, sent.len() as u64);
    for header in sent {
        body.extend_from_slice(&header.raw);
        body.push(0);
    }
    wire::encode(REGTEST, "headers", &body)
}

/// Valid regtest headers at heights 1..=`to` (the simulated nodes' chain),
/// except the one at `broken`, whose nonce is changed until its proof of
/// work fails.
pub fn headers_with_bad_work(to: u64, broken: u64) -> Vec<Header> {
    let params = pow::params(Network::LitecoinRegtest).unwrap();
    let mut headers = SimChain::new(params).headers_after(&[params.genesis], to);
    let mut prev: Tip = params.genesis_tip();
    for header in &headers[..broken as usize - 1] {
        prev = params.check(&prev, header).unwrap();
    }
    let bad = &mut headers[broken as usize - 1];
    while params.check(&prev, bad).is_ok() {
        bad.raw[76] = bad.raw[76].wrapping_add(1);
    }
    headers
}
