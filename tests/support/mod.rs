//! Test helpers shared by the integration tests: run the binary, backend
//! nodes, data generators, bounded waits.
#![allow(dead_code)]

pub mod admin_http;
pub mod admin_pool;
pub mod admin_wait;
pub mod blockbook;
pub mod chromium;
pub mod cli;
pub mod connections;
pub mod discovery;
pub mod dns;
pub mod dnsmasq;
pub mod electrum_liar;
pub mod electrumx;
pub mod haproxy;
pub mod inproc;
pub mod liar;
pub mod litecoind;
pub mod netns;
pub mod nodes;
pub mod p2p_client;
pub mod proxy;
pub mod stall;
pub mod status_page;
pub mod upgrade;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Deterministic pseudo-random bytes (xorshift64*), `len` of them.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// SHA-256 of `data`, hex.
pub fn sha256(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Read to EOF, returning the SHA-256 (hex) and the byte count.
pub async fn hash_to_eof(r: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0u64;
    loop {
        let k = r.read(&mut buf).await?;
        if k == 0 {
            return Ok((hex(&h.finalize()), n));
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
}

/// Write `data` in chunks, then half-close.
pub async fn send_all(w: &mut (impl AsyncWriteExt + Unpin), data: &[u8]) -> std::io::Result<()> {
    for chunk in data.chunks(64 * 1024) {
        w.write_all(chunk).await?;
    }
    w.shutdown().await
}

/// Poll `cond` every 10 ms until true; panics with `what` after `timeout`.
pub async fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Run `fut` with a deadline; panics naming `what` if it is exceeded.
pub async fn within<T>(what: &str, timeout: Duration, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Client connections on `backend` as the proxy logged them: `connected`
/// and not yet `closed`.
pub fn live_on(events: &[Value], backend: &str) -> BTreeSet<u64> {
    let ids = |message: &str| -> BTreeSet<u64> {
        events
            .iter()
            .filter(|e| e["message"] == message && e["backend"] == backend)
            .filter_map(|e| e["conn"].as_u64())
            .collect()
    };
    &ids("connected") - &ids("closed")
}
