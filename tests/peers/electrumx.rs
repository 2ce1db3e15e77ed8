//! The `electrum` and `electrum-tls` probes against real ElectrumX servers
//! on Litecoin Core regtest nodes: heights as the servers serve them, lag,
//! a stopped server, and a wallet's session through the proxy, unchanged.
//! Skips when litecoind or ElectrumX is not installed (unless
//! `PIN_PROXY_REQUIRE_PEERS=1`).

use std::future::Future;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::admin_http::backend;
use crate::support::admin_wait::wait_status;
use crate::support::electrumx::{ElectrumX, Wallet};
use crate::support::litecoind::Litecoind;
use crate::support::proxy::Proxy;
use crate::support::wait_until;

/// Bound on every wait.
const T: Duration = Duration::from_secs(20);

/// A pool named `name` probing its backends (`name`, `addr`) with `probe`.
fn pool(name: &str, probe: &str, backends: &[(&str, String)]) -> String {
    let backends: Vec<String> = backends
        .iter()
        .map(|(n, a)| format!("{{ name: {n}, addr: \"{a}\" }}"))
        .collect();
    // Windows longer than the test: once out, a backend stays out.
    format!(
        "  - name: {name}\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
         quarantine: {{ base: 1h, max: 1h }}\n    \
         health: {{ probe: {probe}, network: litecoin-regtest, interval: 200ms, \
         timeout: 5s, fall: 2, max_lag_blocks: 3 }}\n    \
         backends: [{}]\n",
        backends.join(", ")
    )
}

fn config(pools: &[String]) -> String {
    format!("admin:\n  listen: 127.0.0.1:0\npools:\n{}", pools.concat())
}

fn probe_of<'a>(pool: &'a str, backend: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |e| e["message"] == "probe" && e["pool"] == pool && e["backend"] == backend
}

/// Backend `backend` of pool `pool` in `/status`.
fn status_of(proxy: &Proxy, pool: &str, backend: &str) -> Value {
    let mut admin = TcpStream::connect(proxy.admin()).expect("connect admin");
    admin.set_read_timeout(Some(T)).unwrap();
    write!(admin, "GET /status HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut text = String::new();
    admin.read_to_string(&mut text).expect("read /status");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let status: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"));
    status["pools"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == pool))
        .and_then(|p| p["backends"].as_array())
        .and_then(|bs| bs.iter().find(|b| b["name"] == backend))
        .cloned()
        .unwrap_or_else(|| panic!("{pool}/{backend} not in {status}"))
}

/// Run `fut` on a runtime of its own: these are plain `#[test]`s, since
/// their nodes start blocking.
fn block_on<F: Future>(fut: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(fut)
}

#[test]
fn electrum_probes_read_the_heights_the_servers_serve() {
    let Some(node) = Litecoind::start(None) else {
        return;
    };
    node.mine(5);
    let Some(ex) = ElectrumX::start(&node) else {
        return;
    };
    eprintln!(
        "electrumx served height 5 {:?} after its start",
        ex.started_in()
    );
    // The TLS backend by name: the probe sends it as SNI and accepts the
    // self-signed certificate.
    let tls = format!("localhost:{}", ex.ssl_addr().port());
    let proxy = Proxy::start_blocking(&config(&[
        pool("tcp", "electrum", &[("ex", ex.tcp_addr().to_string())]),
        pool("tls", "electrum-tls", &[("ex", tls)]),
    ]));
    for pool in ["tcp", "tls"] {
        let probe = proxy.wait_event_blocking(probe_of(pool, "ex"), T);
        assert_eq!(probe["outcome"], "healthy", "{probe}");
        assert_eq!(probe["height"], 5, "{probe}");
        let detail = probe["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("ElectrumX"), "{probe}");
        assert_eq!(status_of(&proxy, pool, "ex")["height"], 5);
    }
    node.mine(2);
    for pool in ["tcp", "tls"] {
        let what = format!("{pool} at height 7 in /status");
        block_on(wait_status(proxy.admin(), &what, T, |s| {
            (backend(s, pool, "ex")["height"] == 7).then_some(())
        }));
    }
}

#[test]
fn a_server_on_a_node_behind_is_lagging() {
    let (Some(a), Some(b)) = (Litecoind::start(None), Litecoind::start(None)) else {
        return;
    };
    a.mine(5);
    b.mine(15);
    let (Some(ex_a), Some(ex_b)) = (ElectrumX::start(&a), ElectrumX::start(&b)) else {
        return;
    };
    let backends = [
        ("a", ex_a.tcp_addr().to_string()),
        ("b", ex_b.tcp_addr().to_string()),
    ];
    let proxy = Proxy::start_blocking(&config(&[pool("tcp", "electrum", &backends)]));
    // Two backends only: B's claim counts because its tip header proves it.
    let lagging = |e: &Value| probe_of("tcp", "a")(e) && e["outcome"] == "lagging";
    let lag = proxy.wait_event_blocking(lagging, T);
    assert_eq!(lag["height"], 5, "{lag}");
    let q = proxy.wait_event_blocking(|e| e["message"] == "quarantined" && e["backend"] == "a", T);
    assert_eq!(q["reason"], "lagging");
    let b = status_of(&proxy, "tcp", "b");
    assert_eq!(
        (b["state"].as_str(), b["height"].as_u64()),
        (Some("healthy"), Some(15))
    );
}

/// One regtest ElectrumX behind two pools: `network: litecoin-regtest` (its
/// genesis) serves wallets from it; `network: litecoin` finds it on another
/// chain, `unsuitable`, and turns its wallets away at accept.
#[test]
fn a_server_of_another_chain_is_unsuitable_and_serves_no_wallet() {
    let Some(node) = Litecoind::start(None) else {
        return;
    };
    node.mine(3);
    let Some(ex) = ElectrumX::start(&node) else {
        return;
    };
    let addr = ex.tcp_addr().to_string();
    let regtest = pool("regtest", "electrum", &[("ex", addr.clone())]);
    let mainnet = pool("mainnet", "electrum", &[("ex", addr)])
        .replace("network: litecoin-regtest", "network: litecoin");
    let proxy = Proxy::start_blocking(&config(&[regtest, mainnet]));
    let unfit = proxy.wait_event_blocking(
        |e| probe_of("mainnet", "ex")(e) && e["outcome"] == "unsuitable",
        T,
    );
    let detail = unfit["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with(
            "genesis 530827f38f93b43ed12af0b3ad25a288dc02ed74d6d7857862df51fc56c416f9"
        ) && detail.ends_with("is not litecoin's"),
        "{unfit}"
    );
    let fit = proxy.wait_event_blocking(probe_of("regtest", "ex"), T);
    assert_eq!(fit["outcome"], "healthy", "{fit}");
    let on_mainnet = status_of(&proxy, "mainnet", "ex");
    assert_eq!(on_mainnet["state"], "unsuitable", "{on_mainnet}");
    assert_eq!(
        on_mainnet["node"]["genesis_hash"],
        "530827f38f93b43ed12af0b3ad25a288dc02ed74d6d7857862df51fc56c416f9"
    );
    assert!(
        on_mainnet["node"]["server_version"]
            .as_str()
            .is_some_and(|v| v.contains("ElectrumX")),
        "{on_mainnet}"
    );

    // A wallet through the regtest pool gets its answer; one through the
    // mainnet pool is closed unread.
    let ask = "{\"id\":1,\"method\":\"server.version\",\"params\":[\"t\",\"1.4\"]}\n";
    let mut wallet = TcpStream::connect(proxy.addr("regtest")).unwrap();
    wallet.set_read_timeout(Some(T)).unwrap();
    wallet.write_all(ask.as_bytes()).unwrap();
    let mut line = [0u8; 256];
    let n = wallet.read(&mut line).unwrap();
    assert!(String::from_utf8_lossy(&line[..n]).contains("ElectrumX"));
    let mut turned_away = TcpStream::connect(proxy.addr("mainnet")).unwrap();
    turned_away.set_read_timeout(Some(T)).unwrap();
    let _ = turned_away.write_all(ask.as_bytes());
    assert!(matches!(turned_away.read(&mut line), Ok(0) | Err(_)));
    let rejected =
        proxy.wait_event_blocking(|e| e["message"] == "rejected" && e["pool"] == "mainnet", T);
    assert_eq!(rejected["reason"], "no_suitable_backend");
}

#[test]
fn a_stopped_server_is_down() {
    let Some(node) = Litecoind::start(None) else {
        return;
    };
    node.mine(3);
    let Some(mut ex) = ElectrumX::start(&node) else {
        return;
    };
    let proxy = Proxy::start_blocking(&config(&[pool(
        "tcp",
        "electrum",
        &[("ex", ex.tcp_addr().to_string())],
    )]));
    let first = proxy.wait_event_blocking(probe_of("tcp", "ex"), T);
    assert_eq!(first["outcome"], "healthy", "{first}");
    ex.stop();
    let down = proxy.wait_event_blocking(|e| probe_of("tcp", "ex")(e) && e["outcome"] == "down", T);
    assert!(
        down["detail"]
            .as_str()
            .is_some_and(|d| d.contains("refused")),
        "{down}"
    );
}

#[test]
fn a_wallet_gets_the_same_answers_through_the_proxy() {
    let Some(node) = Litecoind::start(None) else {
        return;
    };
    node.mine(10);
    let Some(ex) = ElectrumX::start(&node) else {
        return;
    };
    let proxy = Proxy::start_blocking(&config(&[pool(
        "tcp",
        "electrum",
        &[("ex", ex.tcp_addr().to_string())],
    )]));
    let mut direct = Wallet::connect(ex.tcp_addr()).unwrap();
    let mut proxied = Wallet::connect(proxy.addr("tcp")).unwrap();
    let requests = [
        ("server.version", json!(["wallet/1.0", ["1.4", "1.6"]])),
        ("blockchain.headers.subscribe", json!([])),
        ("blockchain.block.header", json!([3])),
    ];
    for (method, params) in requests {
        let want = direct.call(method, params.clone()).unwrap();
        let got = proxied.call(method, params).unwrap();
        assert_eq!(got, want, "{method}: through the proxy, then straight");
        let answer: Value = serde_json::from_str(&got).unwrap();
        assert!(answer.get("result").is_some(), "{method}: {got}");
        eprintln!("{method}: {} bytes as sent, {answer}", got.len());
    }
    // The subscription is the server's: a new block reaches the wallet
    // through the proxy as it reaches the one connected straight.
    node.mine(1);
    let want = direct.line().unwrap();
    let got = proxied.line().unwrap();
    let note: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(note["method"], "blockchain.headers.subscribe", "{got}");
    assert_eq!(note["params"][0]["height"], 11, "{got}");
    assert_eq!(
        got, want,
        "the notification, through the proxy and straight"
    );
}

#[test]
fn a_tls_wallet_checks_the_servers_own_certificate_through_the_proxy() {
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::io::{BufRead, BufReader};
    let Some(node) = Litecoind::start(None) else {
        return;
    };
    node.mine(4);
    let Some(ex) = ElectrumX::start(&node) else {
        return;
    };
    let proxy = Proxy::start_blocking(&config(&[pool(
        "tls",
        "electrum-tls",
        &[("ex", ex.ssl_addr().to_string())],
    )]));
    // The wallet trusts only the server's certificate, for its name: the
    // handshake goes through the proxy untouched.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ex.certificate().to_vec()))
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let session = rustls::ClientConnection::new(Arc::new(tls), name).unwrap();
    let tcp = TcpStream::connect(proxy.addr("tls")).unwrap();
    tcp.set_read_timeout(Some(T)).unwrap();
    let mut wallet = BufReader::new(rustls::StreamOwned::new(session, tcp));
    let mut direct = Wallet::connect(ex.tcp_addr()).unwrap();
    let requests = [
        ("server.version", json!(["wallet/1.0", ["1.4", "1.6"]])),
        ("blockchain.headers.subscribe", json!([])),
    ];
    for (id, (method, params)) in requests.into_iter().enumerate() {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(wallet.get_mut(), "{request}").unwrap();
        let mut got = String::new();
        wallet.read_line(&mut got).unwrap();
        let want = direct.call(method, params).unwrap();
        assert_eq!(
            got, want,
            "{method}: over TLS through the proxy, then TCP straight"
        );
    }
}

/// One relayed connection: bytes each way, and when the probe's side ended.
#[derive(Debug, Clone, Copy)]
struct Relayed {
    up: u64,
    down: u64,
    probe_done: Duration,
}

/// A loopback relay to `to` that records each connection it carries.
fn relay(to: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<Relayed>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let (Ok(client), Ok(server)) = (client, TcpStream::connect(to)) else {
                continue;
            };
            let record = record.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                let copy = move |mut from: TcpStream, mut to: TcpStream| {
                    let n = std::io::copy(&mut from, &mut to).unwrap_or(0);
                    // The other side may be gone already.
                    let _ = to.shutdown(Shutdown::Write);
                    (n, start.elapsed())
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let down = std::thread::spawn(move || copy(s2, c2));
                let (up, probe_done) = copy(client, server);
                let (down, _) = down.join().unwrap();
                record.lock().unwrap().push(Relayed {
                    up,
                    down,
                    probe_done,
                });
            });
        }
    });
    (addr, seen)
}

/// Prints what one probe costs against ElectrumX on loopback, measured by
/// a relay between the proxy and the server: bytes each way and the time
/// from the relay's accept to the probe's close.
#[test]
#[ignore = "a measurement: cargo test --test peers electrum_probe_cost -- --ignored --nocapture"]
fn electrum_probe_cost() {
    let Some(node) = Litecoind::start(None) else {
        return;
    };
    node.mine(5);
    let Some(ex) = ElectrumX::start(&node) else {
        return;
    };
    let (tcp, tcp_seen) = relay(ex.tcp_addr());
    let (tls, tls_seen) = relay(ex.ssl_addr());
    let _proxy = Proxy::start_blocking(&config(&[
        pool("tcp", "electrum", &[("ex", tcp.to_string())]),
        pool("tls", "electrum-tls", &[("ex", tls.to_string())]),
    ]));
    const PROBES: usize = 20;
    for (kind, seen) in [("electrum", &tcp_seen), ("electrum-tls", &tls_seen)] {
        let what = format!("{PROBES} {kind} probes");
        block_on(wait_until(&what, T, || {
            seen.lock().unwrap().len() >= PROBES
        }));
        let mut runs = seen.lock().unwrap().clone();
        runs.sort_by_key(|r| r.probe_done);
        let (fast, median, slow) = (runs[0], runs[runs.len() / 2], runs[runs.len() - 1]);
        println!(
            "{kind}: {} probes, up {}..{} B, down {}..{} B, probe time min {:?} median {:?} max {:?}",
            runs.len(),
            runs.iter().map(|r| r.up).min().unwrap_or(0),
            runs.iter().map(|r| r.up).max().unwrap_or(0),
            runs.iter().map(|r| r.down).min().unwrap_or(0),
            runs.iter().map(|r| r.down).max().unwrap_or(0),
            fast.probe_done,
            median.probe_done,
            slow.probe_done,
        );
    }
}
