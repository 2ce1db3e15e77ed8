//! The `status`, `quarantine`, `release` and `upgrade` commands: requests to a running
//! instance's admin endpoint over plain HTTP/1.1, answers turned into
//! one-line confirmations, a table, or one-line errors.

mod table;

use std::io;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::net::TcpStream;

use crate::ops::admin::{BackendAnswer, ErrorAnswer, UPGRADE_REQUEST_TIMEOUT};
use crate::ops::control::Upgraded;
use crate::pool::status::Status;

/// Budget for the TCP connect to the admin endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Budget for the whole exchange once connected.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read.
const MAX_ANSWER: usize = 16 * 1024 * 1024;
/// Path-segment characters sent as they are; everything else is escaped.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `GET /status`, as a table per pool or (with `json`) the raw JSON,
/// pretty-printed.
///
/// # Errors
/// When the instance is unreachable or answers with an error.
pub async fn status(admin: &str, json: bool) -> anyhow::Result<String> {
    let body = call(admin, Method::GET, "/status").await?;
    if json {
        let value: serde_json::Value =
            serde_json::from_slice(&body).context("the /status answer is not JSON")?;
        return Ok(serde_json::to_string_pretty(&value)? + "\n");
    }
    let status: Status =
        serde_json::from_slice(&body).context("the /status answer has an unexpected shape")?;
    Ok(table::render(&status, std::time::SystemTime::now()))
}

/// `POST /pools/{pool}/backends/{backend}/quarantine?for=...`.
///
/// # Errors
/// When the instance is unreachable or answers with an error.
pub async fn quarantine(
    admin: &str,
    pool: &str,
    backend: &str,
    window: Duration,
) -> anyhow::Result<String> {
    let human = humantime::format_duration(window).to_string();
    let query = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("for", &human)
        .finish();
    let path = format!("{}/quarantine?{query}", backend_path(pool, backend));
    let answer: BackendAnswer = decode(&call(admin, Method::POST, &path).await?)?;
    let until = answer
        .backend
        .quarantine
        .as_ref()
        .map_or_else(String::new, |q| format!(" until {}", q.until));
    Ok(format!(
        "{pool}/{backend} quarantined for {human}{until} (state: {})\n",
        answer.backend.state
    ))
}

/// `POST /pools/{pool}/backends/{backend}/release`.
///
/// # Errors
/// When the instance is unreachable or answers with an error.
pub async fn release(admin: &str, pool: &str, backend: &str) -> anyhow::Result<String> {
    let path = format!("{}/release", backend_path(pool, backend));
    let answer: BackendAnswer = decode(&call(admin, Method::POST, &path).await?)?;
    let state = &answer.backend.state;
    Ok(if answer.released == Some(false) {
        format!("{pool}/{backend} was not quarantined; nothing changed (state: {state})\n")
    } else {
        format!(
            "{pool}/{backend} released; it takes clients again once its probes pass (state: {state})\n"
        )
    })
}

/// `POST /upgrade`: waits until the new process serves (or the upgrade
/// failed, which is an error).
///
/// # Errors
/// When the instance is unreachable or the upgrade failed.
pub async fn upgrade(admin: &str) -> anyhow::Result<String> {
    let body = call_within(admin, Method::POST, "/upgrade", UPGRADE_REQUEST_TIMEOUT).await?;
    let done: Upgraded = decode(&body)?;
    Ok(format!(
        "upgraded: pid {}, generation {}, {} connections handed over\n",
        done.pid, done.generation, done.connections
    ))
}

fn backend_path(pool: &str, backend: &str) -> String {
    format!(
        "/pools/{}/backends/{}",
        utf8_percent_encode(pool, SEGMENT),
        utf8_percent_encode(backend, SEGMENT)
    )
}

fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> anyhow::Result<T> {
    serde_json::from_slice(body).context("unexpected answer from the admin endpoint")
}

/// The `host:port` of `admin`, given as `host:port` or `http://host:port`.
///
/// # Errors
/// For another scheme, a path, or an empty address.
pub fn authority(admin: &str) -> anyhow::Result<&str> {
    let rest = match admin.split_once("://") {
        Some(("http", rest)) => rest,
        Some((scheme, _)) => {
            bail!("admin address {admin}: only http:// is supported, not {scheme}://")
        }
        None => admin,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains('/') {
        bail!("admin address {admin:?} is not host:port or http://host:port");
    }
    Ok(rest)
}

/// One request; the answer's body when it is a success.
async fn call(admin: &str, method: Method, path: &str) -> anyhow::Result<Bytes> {
    call_within(admin, method, path, REQUEST_TIMEOUT).await
}

/// [`call`] with its own budget for the exchange.
async fn call_within(
    admin: &str,
    method: Method,
    path: &str,
    budget: Duration,
) -> anyhow::Result<Bytes> {
    let authority = authority(admin)?;
    let unreachable = |why: String| anyhow!("cannot reach pin-proxy admin at {authority}: {why}");
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(authority)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(unreachable(describe(&e))),
        Err(_) => return Err(unreachable("connect timed out".to_owned())),
    };
    let exchange = exchange(stream, authority, method, path);
    let (status, body) = match tokio::time::timeout(budget, exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return Err(unreachable(format!("{e:#}"))),
        Err(_) => return Err(unreachable("no answer in time".to_owned())),
    };
    if status.is_success() {
        return Ok(body);
    }
    match serde_json::from_slice::<ErrorAnswer>(&body) {
        Ok(e) => Err(anyhow!(e.error)),
        Err(_) => Err(anyhow!("pin-proxy admin at {authority} answered {status}")),
    }
}

/// Send one HTTP/1.1 request on `stream`, read the whole answer.
async fn exchange(
    stream: TcpStream,
    authority: &str,
    method: Method,
    path: &str,
) -> anyhow::Result<(StatusCode, Bytes)> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    // The connection task ends with the exchange; its errors surface
    // through `send_request` and the body.
    let conn = tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, authority)
        .header(
            header::USER_AGENT,
            concat!("pin-proxy/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty::<Bytes>::new())?;
    let answer = sender.send_request(req).await?;
    let status = answer.status();
    let body = Limited::new(answer.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| anyhow!("reading the answer: {e}"))?
        .to_bytes();
    conn.abort();
    Ok((status, body))
}

/// An io error in the few words an operator expects.
fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        io::ErrorKind::ConnectionReset => "connection reset".to_owned(),
        io::ErrorKind::TimedOut => "connect timed out".to_owned(),
        io::ErrorKind::HostUnreachable => "host unreachable".to_owned(),
        io::ErrorKind::NetworkUnreachable => "network unreachable".to_owned(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_addresses_with_and_without_scheme() {
        assert_eq!(authority("127.0.0.1:9900").ok(), Some("127.0.0.1:9900"));
        assert_eq!(
            authority("http://127.0.0.1:9900").ok(),
            Some("127.0.0.1:9900")
        );
        assert_eq!(authority("http://[::1]:9900/").ok(), Some("[::1]:9900"));
        assert!(authority("https://127.0.0.1:9900").is_err());
        assert!(authority("http://h:1/status").is_err());
        assert!(authority("").is_err());
    }

    #[test]
    fn names_are_escaped_in_paths() {
        assert_eq!(
            backend_path("ltc-p2p", "[::1]:9333"),
            "/pools/ltc-p2p/backends/%5B%3A%3A1%5D%3A9333"
        );
    }
}
