//! HTTP(S) probes of a backend's REST twin (`probe_url`): `blockbook` and `http`.
//!
//! Each probe first TCP-connects to the node's own address, the socket clients
//! use: a refused, timed-out or unresolvable connect is `down`. Then it GETs
//! `probe_url`. Any failure there is `unknown`, never `down` or `unhealthy`:
//! the REST twin failing says nothing about the socket clients use. Only an
//! answer the probe understands (`inSync: false`) is `unhealthy`.
//!
//! Redirects are not followed, no proxy is taken from the environment, the
//! body is read up to [`MAX_BODY`] bytes, and the whole probe (node connect
//! included) ends within its timeout. `probe_url` userinfo goes out as HTTP
//! basic auth (reqwest moves it from the URL into an `Authorization` header);
//! no detail ever contains the URL's userinfo or query.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use reqwest::redirect::Policy;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use tokio::time::{Instant, timeout_at};

use crate::config::SecretUrl;
use crate::net::connect::{ConnectError, connect};
use crate::pool::node::NodeFacts;
use crate::pool::report::{Report, Verdict};

/// Most body bytes read from a `blockbook` answer; more is `unknown`.
pub const MAX_BODY: usize = 256 * 1024;

/// Longest detail built from text the server chose (JSON errors quote it).
const MAX_DETAIL: usize = 160;

/// Why an [`HttpProber`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpProberError {
    /// A root certificate was rejected, or rustls refused its settings.
    #[error("TLS setup: {0}")]
    Tls(#[from] rustls::Error),
    /// reqwest refused the client settings.
    #[error("HTTP client setup: {0}")]
    Client(#[from] reqwest::Error),
}

/// Runs `blockbook` and `http` probes with one reused HTTP client
/// (rustls with the `ring` provider; no OpenSSL).
///
/// Cloning is cheap and shares the client.
#[derive(Debug, Clone)]
pub struct HttpProber {
    client: reqwest::Client,
}

impl HttpProber {
    /// A prober trusting the system's root certificates, or Mozilla's
    /// (webpki-roots) where the system has none.
    ///
    /// # Errors
    /// [`HttpProberError`] if the TLS or HTTP client cannot be set up.
    pub fn new() -> Result<HttpProber, HttpProberError> {
        HttpProber::with_root_certificates(&[])
    }

    /// As [`HttpProber::new`], also trusting the given DER-encoded roots
    /// (a private CA, or a self-signed test server).
    ///
    /// # Errors
    /// [`HttpProberError::Tls`] if one of `ders` is not a usable certificate.
    pub fn with_root_certificates(ders: &[Vec<u8>]) -> Result<HttpProber, HttpProberError> {
        let mut roots = system_roots();
        for der in ders {
            roots.add(CertificateDer::from(der.clone()))?;
        }
        // The provider is passed explicitly rather than installed as the
        // process default: no global state, and nothing to panic about when
        // another part of the process installed one first.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let client = reqwest::Client::builder()
            // A rustls `ClientConfig` of the same rustls version reqwest
            // links; a mismatch makes `build` fail, never silently fall back.
            .tls_backend_preconfigured(tls)
            .redirect(Policy::none())
            .no_proxy()
            // Each probe opens a fresh connection: a pooled one could hide a
            // listener that stopped accepting.
            .pool_max_idle_per_host(0)
            .user_agent(concat!("pin-proxy/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(HttpProber { client })
    }

    /// `blockbook` probe: `down` if `node_addr` refuses the connect; else GET
    /// `url` and read `blockbook.inSync` and `blockbook.bestHeight`, and
    /// `blockbook.coin` and `blockbook.version` for the report's node facts.
    /// `inSync: true` is healthy and `false` unhealthy, both with the height;
    /// anything else is `unknown`.
    ///
    /// Never panics; returns within `timeout` (plus scheduling delay).
    pub async fn blockbook(&self, node_addr: &str, url: &SecretUrl, timeout: Duration) -> Report {
        self.probe(node_addr, url, timeout, true).await
    }

    /// `http` probe: `down` if `node_addr` refuses the connect; else GET
    /// `url`: any 2xx is healthy, anything else `unknown`. The body is not
    /// read.
    ///
    /// Never panics; returns within `timeout` (plus scheduling delay).
    pub async fn http(&self, node_addr: &str, url: &SecretUrl, timeout: Duration) -> Report {
        self.probe(node_addr, url, timeout, false).await
    }

    async fn probe(
        &self,
        node_addr: &str,
        url: &SecretUrl,
        timeout: Duration,
        blockbook: bool,
    ) -> Report {
        let now = Instant::now();
        // A timeout too large to add is as good as none; a day bounds it anyway.
        let deadline = now
            .checked_add(timeout)
            .unwrap_or_else(|| now + Duration::from_secs(86_400));
        match connect(node_addr, deadline.saturating_duration_since(now)).await {
            // Only reachability matters; dropping the stream closes it.
            Ok(_stream) => {}
            Err(err) => return Report::new(Verdict::Down, node_detail(&err)),
        }
        match timeout_at(deadline, self.fetch(url, blockbook)).await {
            Err(_) => Report::new(
                Verdict::Unknown,
                format!("no answer within {}", crate::config::span(timeout)),
            ),
            Ok(Err(detail)) => Report::new(Verdict::Unknown, redact(detail, url)),
            Ok(Ok((status, None))) => Report::new(Verdict::Healthy, format!("HTTP {status}")),
            Ok(Ok((_, Some(body)))) => judge_blockbook(&body),
        }
    }

    /// GET `url`; `Ok` only for a 2xx: its status code, and the body when
    /// `read_body`.
    async fn fetch(
        &self,
        url: &SecretUrl,
        read_body: bool,
    ) -> Result<(u16, Option<Vec<u8>>), String> {
        let mut response = self
            .client
            .get(url.expose().clone())
            .send()
            .await
            .map_err(|err| describe(&err))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(format!("HTTP {} (redirects not followed)", status.as_u16()));
        }
        if !status.is_success() {
            return Err(format!("HTTP {}", status.as_u16()));
        }
        if !read_body {
            return Ok((status.as_u16(), None));
        }
        let too_large = || format!("body too large (over {MAX_BODY} bytes)");
        if response
            .content_length()
            .is_some_and(|len| len > MAX_BODY as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|err| describe(&err))? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status.as_u16(), Some(body)))
    }
}

/// What a Blockbook `/api/` status says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockbookStatus {
    /// `blockbook.inSync`.
    pub in_sync: bool,
    /// `blockbook.bestHeight`.
    pub best_height: u64,
    /// `blockbook.coin`, if a string (`Litecoin`), as sent.
    pub coin: Option<String>,
    /// `blockbook.version`, if a string (`0.4.0`), as sent.
    pub version: Option<String>,
}

/// Parse a Blockbook `/api/` status body.
///
/// Pure and total: any input gives `Ok` or a short `Err`, never a panic.
///
/// # Errors
/// The body is not JSON, or lacks a boolean `blockbook.inSync` or a
/// non-negative integer `blockbook.bestHeight` that fits in a `u64`. A
/// missing `coin` or `version` is no error.
pub fn parse_blockbook(body: &[u8]) -> Result<BlockbookStatus, String> {
    // A `Value` walk rather than derived structs: serde would also accept a
    // JSON array in place of an object, which no Blockbook sends.
    let bad = |why: &str| format!("bad blockbook status: {why}");
    let status: serde_json::Value =
        serde_json::from_slice(body).map_err(|err| truncate(bad(&err.to_string())))?;
    let info = status
        .get("blockbook")
        .filter(|info| info.is_object())
        .ok_or_else(|| bad("no blockbook object"))?;
    let in_sync = info
        .get("inSync")
        .and_then(serde_json::Value::as_bool)
        .ok_or_else(|| bad("blockbook.inSync is not a boolean"))?;
    let best_height = info
        .get("bestHeight")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| bad("blockbook.bestHeight is not a block height"))?;
    let text = |key: &str| {
        info.get(key)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    Ok(BlockbookStatus {
        in_sync,
        best_height,
        coin: text("coin"),
        version: text("version"),
    })
}

/// The report of a Blockbook `/api/` status `body`: see [`HttpProber::blockbook`].
/// Pure and total.
pub fn judge_blockbook(body: &[u8]) -> Report {
    let status = match parse_blockbook(body) {
        Ok(status) => status,
        Err(detail) => return Report::new(Verdict::Unknown, detail),
    };
    let height = status.best_height;
    let report = match status.in_sync {
        true => Report::with_height(Verdict::Healthy, height, format!("height {height}")),
        false => Report::with_height(Verdict::Unhealthy, height, "inSync false"),
    };
    report.with_node(NodeFacts::blockbook(
        status.coin.as_deref(),
        status.version.as_deref(),
    ))
}

/// The system's roots; Mozilla's bundled ones when the system has none.
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    // Unreadable or unparsable system certificates are skipped, as a browser
    // would; the fallback below keeps public https working regardless.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if roots.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    roots
}

fn node_detail(err: &ConnectError) -> String {
    match err {
        ConnectError::Resolve { source, .. } => format!("resolve failed: {source}"),
        ConnectError::Timeout { .. } => "connect timed out".into(),
        ConnectError::Connect { source, .. }
            if source.kind() == std::io::ErrorKind::ConnectionRefused =>
        {
            "connect refused".into()
        }
        ConnectError::Connect { source, .. } => format!("connect failed: {source}"),
        ConnectError::SelfLoop { .. } => "a listener of this proxy".into(),
        // Probes connect from the proxy's own address: never seen.
        ConnectError::Source { source, .. } => format!("local address: {source}"),
    }
}

/// A detail for a failed request, built from the error's kind and causes.
/// reqwest's own `Display` names the URL (query included), so it is skipped.
fn describe(err: &reqwest::Error) -> String {
    let mut tls = None;
    let mut refused = false;
    let mut innermost = None;
    let mut cause = err.source();
    while let Some(current) = cause {
        // tokio-rustls wraps rustls errors in (possibly nested) io::Errors,
        // whose `source` skips the wrapped error itself.
        let mut wrapped = Some(current);
        while let Some(inner) = wrapped {
            if let Some(io) = inner.downcast_ref::<std::io::Error>() {
                refused |= io.kind() == std::io::ErrorKind::ConnectionRefused;
                wrapped = io
                    .get_ref()
                    .map(|e| e as &(dyn std::error::Error + 'static));
            } else {
                if let Some(rustls) = inner.downcast_ref::<rustls::Error>() {
                    tls = Some(rustls.to_string());
                }
                wrapped = None;
            }
        }
        innermost = Some(current.to_string());
        cause = current.source();
    }
    let cause = innermost.unwrap_or_else(|| "unknown error".into());
    if let Some(tls) = tls {
        format!("tls: {tls}")
    } else if err.is_timeout() {
        "timed out".into()
    } else if refused {
        "connect refused".into()
    } else if err.is_connect() {
        format!("connect failed: {cause}")
    } else if err.is_body() || err.is_decode() {
        format!("body read failed: {cause}")
    } else {
        format!("request failed: {cause}")
    }
}

/// Belt and braces over [`describe`]: blank out any secret part of `url`
/// that a cause might still quote.
fn redact(detail: String, url: &SecretUrl) -> String {
    let url = url.expose();
    let secrets = [Some(url.username()), url.password(), url.query()];
    let mut detail = detail;
    for secret in secrets.into_iter().flatten().filter(|s| !s.is_empty()) {
        detail = detail.replace(secret, "***");
    }
    truncate(detail)
}

fn truncate(mut text: String) -> String {
    if text.len() > MAX_DETAIL {
        let mut end = MAX_DETAIL;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
