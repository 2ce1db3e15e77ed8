//! What an admin request asks, read from its method and URI alone: the
//! route table, percent-decoded pool and backend names, and the query
//! values (`?for=`, and those `admin/conns.rs` reads). Pure: nothing is
//! read or changed before a request parses, and every bad value is a 400
//! (404 for an unknown path, 405 for a wrong method).

use std::time::Duration;

use hyper::{Method, StatusCode};
use percent_encoding::percent_decode_str;

use super::conns;
use super::routes::Fail;
use crate::ops::connections::ConnQuery;
use crate::pool::health::MAX_MANUAL_WINDOW;
use crate::pool::registry::ConnId;

/// Longest manual quarantine accepted, in days: far beyond any
/// maintenance, and keeps the window's end representable.
const MAX_WINDOW_DAYS: u64 = MAX_MANUAL_WINDOW.as_secs() / 86_400;

/// The admin routes.
#[derive(Debug)]
enum Route {
    Page,
    Status,
    Metrics,
    Healthz,
    Reload,
    Upgrade,
    Quarantine { pool: String, backend: String },
    Release { pool: String, backend: String },
    Shed { pool: String, backend: String },
    Connections,
    Close { conn: String },
}

impl Route {
    /// The route of `path`, or `None` for an unknown path.
    fn parse(path: &str) -> Result<Option<Route>, Fail> {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let route = match segments.as_slice() {
            [""] => Route::Page,
            ["status"] => Route::Status,
            ["metrics"] => Route::Metrics,
            ["healthz"] => Route::Healthz,
            ["reload"] => Route::Reload,
            ["upgrade"] => Route::Upgrade,
            ["connections"] => Route::Connections,
            ["connections", conn, "close"] => Route::Close {
                conn: decode(conn)?,
            },
            // A discovered backend's name holds a `/` (`ltc/10.0.0.1:9333`):
            // everything between `backends` and the action is the name,
            // sent as it is or percent-encoded.
            ["pools", pool, "backends", backend @ .., action] if !backend.is_empty() => {
                let (pool, backend) = (decode(pool)?, decode(&backend.join("/"))?);
                match *action {
                    "quarantine" => Route::Quarantine { pool, backend },
                    "release" => Route::Release { pool, backend },
                    "shed" => Route::Shed { pool, backend },
                    _ => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(route))
    }

    fn allow(&self) -> &'static str {
        match self {
            Route::Page | Route::Status | Route::Metrics | Route::Healthz | Route::Connections => {
                "GET, HEAD"
            }
            Route::Reload
            | Route::Upgrade
            | Route::Quarantine { .. }
            | Route::Release { .. }
            | Route::Shed { .. }
            | Route::Close { .. } => "POST",
        }
    }

    fn accepts(&self, method: &Method) -> bool {
        match self {
            Route::Page | Route::Status | Route::Metrics | Route::Healthz | Route::Connections => {
                method == Method::GET || method == Method::HEAD
            }
            _ => method == Method::POST,
        }
    }
}

/// An admin request as routed from its method and URI, before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminRequest {
    /// `GET /`: the status page.
    Page,
    /// `GET /status`.
    Status,
    /// `GET /metrics`.
    Metrics,
    /// `GET /healthz`.
    Healthz,
    /// `POST /reload`.
    Reload,
    /// `POST /upgrade`.
    Upgrade,
    /// `POST /pools/{pool}/backends/{backend}/quarantine?for=...`.
    Quarantine {
        /// Pool name (percent-decoded).
        pool: String,
        /// Backend name (percent-decoded).
        backend: String,
        /// The `for` window.
        window: Duration,
    },
    /// `POST /pools/{pool}/backends/{backend}/release`.
    Release {
        /// Pool name (percent-decoded).
        pool: String,
        /// Backend name (percent-decoded).
        backend: String,
    },
    /// `GET /connections?pool=&backend=&client=&limit=`.
    Connections(ConnQuery),
    /// `POST /connections/{conn}/close`.
    Close {
        /// The connection's id.
        conn: ConnId,
    },
    /// `POST /pools/{pool}/backends/{backend}/shed?count=N`.
    Shed {
        /// Pool name (percent-decoded).
        pool: String,
        /// Backend name (percent-decoded).
        backend: String,
        /// How many of its newest connections, at least 1.
        count: usize,
    },
}

/// Why a request is refused before it runs.
#[derive(Debug)]
pub struct RouteError {
    /// 400, 404 or 405.
    pub status: StatusCode,
    /// For the JSON `error` field.
    pub message: String,
    /// The `Allow` header of a 405.
    pub allow: Option<&'static str>,
}

/// Route a request: unknown path 404, bad path encoding, `?for=`,
/// `/connections` query, connection id or `?count=` 400, wrong method 405.
/// Pure: no state is read or changed.
///
/// # Errors
/// The [`RouteError`] to send.
pub fn parse_request(method: &Method, uri: &hyper::Uri) -> Result<AdminRequest, RouteError> {
    let refuse = |Fail(status, message): Fail| RouteError {
        status,
        message,
        allow: None,
    };
    let route = Route::parse(uri.path())
        .map_err(refuse)?
        .ok_or_else(|| refuse(Fail::new(StatusCode::NOT_FOUND, "no such admin route")))?;
    if !route.accepts(method) {
        let allow = route.allow();
        return Err(RouteError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!("method {method} not allowed; use {allow}"),
            allow: Some(allow),
        });
    }
    Ok(match route {
        Route::Page => AdminRequest::Page,
        Route::Status => AdminRequest::Status,
        Route::Metrics => AdminRequest::Metrics,
        Route::Healthz => AdminRequest::Healthz,
        Route::Reload => AdminRequest::Reload,
        Route::Upgrade => AdminRequest::Upgrade,
        Route::Quarantine { pool, backend } => AdminRequest::Quarantine {
            pool,
            backend,
            window: window(uri.query().unwrap_or("")).map_err(refuse)?,
        },
        Route::Release { pool, backend } => AdminRequest::Release { pool, backend },
        Route::Connections => {
            AdminRequest::Connections(conns::query(uri.query().unwrap_or("")).map_err(refuse)?)
        }
        Route::Close { conn } => AdminRequest::Close {
            conn: conns::conn_id(&conn).map_err(refuse)?,
        },
        Route::Shed { pool, backend } => AdminRequest::Shed {
            pool,
            backend,
            count: conns::count(uri.query().unwrap_or("")).map_err(refuse)?,
        },
    })
}

/// A percent-decoded path segment.
fn decode(segment: &str) -> Result<String, Fail> {
    percent_decode_str(segment)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| Fail::new(StatusCode::BAD_REQUEST, "path is not valid UTF-8"))
}

/// The `for` query parameter: a humantime duration, more than zero.
fn window(query: &str) -> Result<Duration, Fail> {
    let bad = |msg: String| Fail::new(StatusCode::BAD_REQUEST, msg);
    let value = url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "for")
        .map(|(_, v)| v.into_owned())
        .ok_or_else(|| bad("missing duration: add ?for=10m".to_owned()))?;
    let window = humantime::parse_duration(&value)
        .map_err(|e| bad(format!("bad duration {value:?}: {e}")))?;
    if window.is_zero() {
        return Err(bad("duration must be more than 0".to_owned()));
    }
    if window > MAX_MANUAL_WINDOW {
        return Err(bad(format!(
            "duration {value:?} is over the maximum of {MAX_WINDOW_DAYS} days"
        )));
    }
    Ok(window)
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
