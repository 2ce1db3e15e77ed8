//! The proxy's admin endpoint as the load tool uses it (one HTTP/1.1
//! request per connection, the answer's JSON), and free loopback ports for
//! the configs it writes.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `METHOD path` on the admin endpoint at `admin`; the answer's JSON, or an
/// error with its text when the status is not 200. The whole exchange
/// waits at most `timeout`.
pub async fn request(
    admin: SocketAddr,
    method: &str,
    path: &str,
    timeout: Duration,
) -> anyhow::Result<Value> {
    let exchange = async {
        let mut s = TcpStream::connect(admin)
            .await
            .with_context(|| format!("connect to the admin endpoint {admin}"))?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).await?;
        anyhow::Ok(answer)
    };
    let answer = tokio::time::timeout(timeout, exchange)
        .await
        .with_context(|| format!("{method} {path}: no answer within {timeout:?}"))??;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("{method} {path}: not an HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("{method} {path} failed: {head} {body}");
    }
    serde_json::from_str(body).with_context(|| format!("{method} {path}: JSON body"))
}

/// A loopback address whose TCP port was free a moment ago.
pub fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}
