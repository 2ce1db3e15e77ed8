//! A lying Electrum server on loopback: it announces any height with any
//! tip header (a real one replayed, or one forged with valid regtest work
//! that links to nothing), and answers `blockchain.block.headers` from the
//! real headers it was given, as a server that copies an honest one would.
//! Aborted on drop.

use std::net::SocketAddr;
use std::sync::Arc;

use pin_proxy::config::Network;
use pin_proxy::inspect::pow::{self, HEADER_LEN, Header};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::electrumx::{ElectrumX, Wallet};
use super::hex;

/// What the liar says and serves.
struct Script {
    height: u64,
    tip: Header,
    /// Headers by height, from genesis.
    headers: Vec<Header>,
}

/// A fake Electrum server.
pub struct ElectrumLiar {
    /// Its address.
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl ElectrumLiar {
    /// Announce `height` with `tip`; serve `headers` (from genesis) to
    /// `blockchain.block.headers`.
    pub async fn start(height: u64, tip: Header, headers: Vec<Header>) -> ElectrumLiar {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let script = Arc::new(Script {
            height,
            tip,
            headers,
        });
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let script = script.clone();
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    let mut line = String::new();
                    while stream.read_line(&mut line).await.unwrap_or(0) > 0 {
                        let request: Value = serde_json::from_str(&line).unwrap_or_default();
                        line.clear();
                        let mut out = script.answer(&request).to_string().into_bytes();
                        out.push(b'\n');
                        if stream.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        ElectrumLiar { addr, task }
    }
}

impl Drop for ElectrumLiar {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Script {
    fn answer(&self, request: &Value) -> Value {
        let params = &request["params"];
        let result = match request["method"].as_str().unwrap_or_default() {
            "server.version" => json!(["ElectrumX 2.0.0", "1.4"]),
            "blockchain.headers.subscribe" => {
                json!({"height": self.height, "hex": hex(&self.tip.raw)})
            }
            "blockchain.block.headers" => {
                let start = params[0].as_u64().unwrap_or(0) as usize;
                let count = params[1].as_u64().unwrap_or(0) as usize;
                let end = self.headers.len().min(start.saturating_add(count));
                let sent = self.headers.get(start..end).unwrap_or_default();
                let joined: String = sent.iter().map(|h| hex(&h.raw)).collect();
                json!({"count": sent.len(), "max": 2016, "hex": joined})
            }
            _ => {
                let error = json!({"code": -32601, "message": "unknown method"});
                return json!({"jsonrpc": "2.0", "id": request["id"], "error": error});
            }
        };
        json!({"jsonrpc": "2.0", "id": request["id"], "result": result})
    }
}

/// The headers `ex` serves from genesis to `to`, as a wallet reads them.
pub fn real_headers(ex: &ElectrumX, to: u64) -> Vec<Header> {
    let mut wallet = Wallet::connect(ex.tcp_addr()).unwrap();
    wallet
        .call("server.version", json!(["pin-proxy-test", "1.4"]))
        .unwrap();
    let line = wallet
        .call("blockchain.block.headers", json!([0, to + 1]))
        .unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    let joined = answer["result"]["hex"].as_str().unwrap();
    assert_eq!(joined.len(), (to as usize + 1) * 2 * HEADER_LEN, "{line}");
    joined
        .as_bytes()
        .chunks(2 * HEADER_LEN)
        .map(|h| {
            let mut raw = [0u8; HEADER_LEN];
            for (i, byte) in raw.iter_mut().enumerate() {
                let pair = std::str::from_utf8(&h[2 * i..2 * i + 2]).unwrap();
                *byte = u8::from_str_radix(pair, 16).unwrap();
            }
            Header { raw }
        })
        .collect()
}

/// A header with valid Litecoin regtest work whose parent is no block.
pub fn forged_header() -> Header {
    let regtest = pow::params(Network::LitecoinRegtest).unwrap();
    let mut raw = [0u8; HEADER_LEN];
    raw[..4].copy_from_slice(&0x2000_0000u32.to_le_bytes());
    raw[4..36].copy_from_slice(&[0x42; 32]);
    raw[36..68].copy_from_slice(&[7u8; 32]);
    raw[68..72].copy_from_slice(&1_700_000_000u32.to_le_bytes());
    raw[72..76].copy_from_slice(&0x207f_ffffu32.to_le_bytes());
    for nonce in 0u32.. {
        raw[76..80].copy_from_slice(&nonce.to_le_bytes());
        if regtest.check_alone(0, &Header { raw }).is_ok() {
            break;
        }
    }
    Header { raw }
}
