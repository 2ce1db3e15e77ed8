//! A pool of real Litecoin nodes behind the proxy, for the tests that see
//! and act on one connection (`/connections`, close, shed, the page).

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use pin_proxy::inspect::wire;
use serde_json::Value;

use crate::support::admin_http::{admin_addr, request};
use crate::support::admin_wait::wait_connections;
use crate::support::litecoind::Litecoind;
use crate::support::p2p_client::{self, Client};
use crate::support::proxy::Proxy;

/// Bound on every wait.
pub const T: Duration = Duration::from_secs(20);

/// Litecoin nodes behind pool `ltc` (backends `a`, `b`, ...), the proxy
/// in front of them and its admin endpoint.
pub struct Fixture {
    pub nodes: Vec<Litecoind>,
    pub proxy: Proxy,
    pub admin: SocketAddr,
}

impl Fixture {
    /// `n` nodes, probed (`bitcoin-p2p`) until healthy; no rebalancing;
    /// drains and sheds spread over 400 ms. `None` without litecoind.
    pub async fn start(n: usize) -> Option<Fixture> {
        let nodes: Vec<Litecoind> = (0..n).filter_map(|_| Litecoind::start(None)).collect();
        if nodes.len() < n {
            return None;
        }
        for node in &nodes {
            node.mine(3);
        }
        let backends: Vec<String> = nodes
            .iter()
            .zip(NAMES)
            .map(|(node, name)| format!("{{ name: {name}, addr: \"{}\" }}", node.p2p_addr()))
            .collect();
        let proxy = Proxy::start(&format!(
            "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: ltc\n    listen: 127.0.0.1:0\n    \
             rebalance: {{ interval: 0s }}\n    \
             health: {{ probe: bitcoin-p2p, network: litecoin-regtest, interval: 500ms, timeout: 2s, \
             drain_spread: 400ms }}\n    backends: [{}]\n",
            backends.join(", ")
        ))
        .await;
        for name in &NAMES[..n] {
            let probe = proxy
                .wait_event(|e| e["message"] == "probe" && e["backend"] == *name, T)
                .await;
            assert_eq!(probe["outcome"], "healthy", "{probe}");
        }
        let admin = admin_addr(&proxy);
        Some(Fixture {
            nodes,
            proxy,
            admin,
        })
    }

    /// A P2P client through the proxy, past its handshake, announcing
    /// `agent`; its connection id as `/connections` lists it, once the
    /// listing counts the handshake's bytes both ways (the proxy counts
    /// what it moved just after the move, which the client may see first).
    pub async fn client(&self, agent: &str) -> (Client, u64) {
        let client = p2p_client::connect(self.proxy.addr("ltc"), agent, T).expect("handshake");
        let local = client.stream.local_addr().unwrap().to_string();
        let what = format!("{local} listed with bytes both ways");
        let conn = wait_connections(self.admin, "", &what, T, |listing| {
            let c = listing["connections"]
                .as_array()?
                .iter()
                .find(|c| c["client"] == local.as_str())?;
            let moved = |k: &str| c[k].as_u64().is_some_and(|n| n > 0);
            (moved("bytes_up") && moved("bytes_down")).then(|| c["conn"].as_u64())?
        })
        .await;
        (client, conn)
    }
}

const NAMES: [&str; 3] = ["a", "b", "c"];

/// `GET /connections?query`, which must answer 200.
pub async fn list(admin: SocketAddr, query: &str) -> Value {
    let answer = request(admin, "GET", &format!("/connections?{query}")).await;
    assert_eq!(answer.status, 200, "{query}: {}", answer.body);
    answer.json()
}

/// The node behind `stream` answers a `ping` with its `pong`.
pub fn answers_ping(stream: &mut TcpStream) -> bool {
    p2p_client::answers_ping(stream, wire::random_nonce())
}

/// The proxy closed `stream`: an EOF (or a reset) comes within [`T`],
/// whatever the node sent before it.
pub fn sees_close(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(T)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}
