//! The `status`, `quarantine`, `release`, `reload` and `upgrade` commands: requests to a running
//! instance's admin endpoint over plain HTTP/1.1, answers turned into
//! one-line confirmations, a table, or one-line errors. Which endpoint, and
//! why, is `admin_cli/instance.rs`; `status --watch` is `admin_cli/watch.rs`;
//! `connections`, `close` and `shed` are `admin_cli/connections.rs`.

mod connections;
mod instance;
mod table;
mod watch;

pub use connections::{Wanted, close, connections, shed};
pub use instance::{DEFAULT_ADMIN, Instance};
pub use watch::watch;

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
use crate::ops::control::{Reloaded, Upgraded};
use crate::ops::status::Status;

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
pub async fn status(admin: &Instance, json: bool) -> anyhow::Result<String> {
    let body = call(admin, Method::GET, "/status").await?;
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return Err(not_admin(
            admin,
            "answered /status with something that is not JSON",
        ));
    };
    if json {
        return Ok(serde_json::to_string_pretty(&value)? + "\n");
    }
    let status: Status =
        serde_json::from_value(value).context("the /status answer has an unexpected shape")?;
    Ok(table::render(&status, std::time::SystemTime::now()))
}

/// `POST /pools/{pool}/backends/{backend}/quarantine?for=...`.
///
/// # Errors
/// When the instance is unreachable or answers with an error.
pub async fn quarantine(
    admin: &Instance,
    pool: &str,
    backend: &str,
    window: Duration,
) -> anyhow::Result<String> {
    let human = crate::config::span(window).to_string();
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
    let mut out = format!(
        "{pool}/{backend} quarantined for {human}{until} (state: {})\n",
        answer.backend.state
    );
    if let Some(q) = &answer.replaced {
        out.push_str(&format!(
            "replaced its window: {} until {}\n",
            q.reason, q.until
        ));
    }
    if let Some(n) = answer.draining_connections.filter(|&n| n > 0) {
        out.push_str(&format!(
            "{} will drain (closed spread over health.drain_spread; clients redial elsewhere)\n",
            n_connections(n)
        ));
    }
    if let Some(kept) = answer.kept_connections {
        let (noun, verb) = if kept == 1 {
            ("connection", "is")
        } else {
            ("connections", "are")
        };
        out.push_str(&format!(
            "note: {backend} is the last usable backend of {pool}: its {kept} {noun} {verb} \
             kept (last leg) and will be drained once another backend is usable\n"
        ));
    }
    Ok(out)
}

/// `1 connection`, `3 connections`.
fn n_connections(n: usize) -> String {
    let noun = if n == 1 { "connection" } else { "connections" };
    format!("{n} {noun}")
}

/// `POST /pools/{pool}/backends/{backend}/release`.
///
/// # Errors
/// When the instance is unreachable or answers with an error.
pub async fn release(admin: &Instance, pool: &str, backend: &str) -> anyhow::Result<String> {
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

/// `POST /reload`: the instance re-reads its config file.
///
/// # Errors
/// When the instance is unreachable or refused the new config (the error
/// says why; the old config keeps running).
pub async fn reload(admin: &Instance) -> anyhow::Result<String> {
    let body = call(admin, Method::POST, "/reload").await?;
    let changes: Reloaded = decode(&body)?;
    Ok(format!("reloaded: {}\n", changes.summary()))
}

/// `POST /upgrade`: waits until the new process serves (or the upgrade
/// failed, which is an error).
///
/// # Errors
/// When the instance is unreachable or the upgrade failed.
pub async fn upgrade(admin: &Instance) -> anyhow::Result<String> {
    let body = call_within(admin, Method::POST, "/upgrade", UPGRADE_REQUEST_TIMEOUT).await?;
    let done: Upgraded = decode(&body)?;
    Ok(format!(
        "upgraded: pid {}, generation {}, {} handed over\n",
        done.pid,
        done.generation,
        n_connections(done.connections)
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
async fn call(admin: &Instance, method: Method, path: &str) -> anyhow::Result<Bytes> {
    call_within(admin, method, path, REQUEST_TIMEOUT).await
}

/// [`call`] with its own budget for the exchange.
async fn call_within(
    admin: &Instance,
    method: Method,
    path: &str,
    budget: Duration,
) -> anyhow::Result<Bytes> {
    let authority = authority(admin.addr())?;
    let unreachable = |why: String| {
        anyhow!(
            "cannot reach pin-proxy admin at {authority}{}: {why}{}",
            admin.origin(),
            admin.note()
        )
    };
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(authority)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(unreachable(describe(&e))),
        Err(_) => return Err(unreachable("connect timed out".to_owned())),
    };
    let exchange = exchange(stream, authority, method, path);
    let (status, body) = match tokio::time::timeout(budget, exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(Exchange::NotHttp(e))) => {
            return Err(not_admin(
                admin,
                &format!("answered with something that is not HTTP ({e})"),
            ));
        }
        Ok(Err(Exchange::Closed)) => {
            return Err(not_admin(
                admin,
                "closed the connection without an answer (or this host is not in its admin.allow)",
            ));
        }
        Ok(Err(Exchange::Other(e))) => return Err(unreachable(format!("{e:#}"))),
        Err(_) => return Err(unreachable("no answer in time".to_owned())),
    };
    if status.is_success() {
        return Ok(body);
    }
    match serde_json::from_slice::<ErrorAnswer>(&body) {
        Ok(e) => Err(anyhow!(e.error)),
        Err(_) => Err(not_admin(
            admin,
            &format!("answered {status}, without pin-proxy's JSON error"),
        )),
    }
}

/// The error for an address that answers, but not as pin-proxy's admin
/// endpoint does (a pool's listen port passes the request to a node).
fn not_admin(admin: &Instance, what: &str) -> anyhow::Error {
    anyhow!(
        "{}{} {what}: that is not pin-proxy's admin endpoint (a pool's listen port?){}",
        admin.addr(),
        admin.origin(),
        admin.note()
    )
}

/// How an exchange failed.
enum Exchange {
    /// Bytes came back that are not an HTTP answer.
    NotHttp(hyper::Error),
    /// The peer closed before any answer.
    Closed,
    /// Anything else (a reset, a failure to read the body).
    Other(anyhow::Error),
}

impl From<hyper::Error> for Exchange {
    fn from(e: hyper::Error) -> Exchange {
        // The cause may sit under another error (a send canceled because
        // the connection ended).
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(err) = cause {
            if let Some(h) = err.downcast_ref::<hyper::Error>() {
                if h.is_parse() || h.is_parse_status() || h.is_parse_too_large() {
                    return Exchange::NotHttp(e);
                }
                if h.is_incomplete_message() {
                    return Exchange::Closed;
                }
            }
            // A reset before any answer: a server that closes unread, as
            // pin-proxy does for a client outside `admin.allow`.
            if err
                .downcast_ref::<io::Error>()
                .is_some_and(|io| io.kind() == io::ErrorKind::ConnectionReset)
            {
                return Exchange::Closed;
            }
            cause = err.source();
        }
        Exchange::Other(e.into())
    }
}

/// Send one HTTP/1.1 request on `stream`, read the whole answer.
async fn exchange(
    stream: TcpStream,
    authority: &str,
    method: Method,
    path: &str,
) -> Result<(StatusCode, Bytes), Exchange> {
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
        .body(Empty::<Bytes>::new())
        .map_err(|e| Exchange::Other(e.into()))?;
    let answer = sender.send_request(req).await?;
    let status = answer.status();
    let body = Limited::new(answer.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| Exchange::Other(anyhow!("reading the answer: {e}")))?
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
