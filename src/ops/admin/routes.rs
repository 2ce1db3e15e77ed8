//! The admin routes: one request in, one response out. Every failure is a
//! JSON `{"error": "..."}` answer with its status code; nothing here panics.
//! What a request asks (its route, names and query) is read in
//! `admin/request.rs` before anything here runs.

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::conns;
use super::host;
use super::origin;
use super::page::Page;
use super::request::{AdminRequest, RouteError, parse_request};
use super::{MAX_CONNECTIONS, MAX_PER_SOURCE};
use crate::ops::control::{Control, Reloaded};
use crate::ops::metrics;
use crate::ops::status::{BackendStatus, QuarantineStatus};
use crate::pool::admission::Refusal;

/// Largest request body accepted (bodies are ignored, but must end).
pub const MAX_BODY: usize = 64 * 1024;
/// Time a client gets to send its request body (bodies are small or empty,
/// and a slow one holds a slot).
const BODY_TIMEOUT: Duration = Duration::from_secs(2);
/// Budget for answering one request, body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Budget for answering `POST /upgrade`: beyond any `upgrade_timeout`
/// (the upgrade itself gives up first and answers 422).
pub const UPGRADE_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// What every request handler shares.
pub struct Ctx {
    /// The instance.
    pub control: Control,
    /// Cancelled at shutdown.
    pub token: CancellationToken,
    /// The status page.
    pub page: Page,
    /// The names `Host` may carry.
    pub hosts: host::Hosts,
}

/// The answer to `POST .../quarantine` and `POST .../release`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendAnswer {
    /// The pool.
    pub pool: String,
    /// The backend's status after the command.
    pub backend: BackendStatus,
    /// For a release: whether a quarantine was ended (false: it was not
    /// quarantined, and nothing changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released: Option<bool>,
    /// For a quarantine of the pool's last usable backend: its connections
    /// kept by the last-leg rule (drained once another backend is usable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_connections: Option<usize>,
    /// For a quarantine: the connections it drains (spread over
    /// `health.drain_spread`), none of them kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining_connections: Option<usize>,
    /// For a quarantine: the window it replaced, when the backend was
    /// quarantined already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<QuarantineStatus>,
}

/// An error answer's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    /// What went wrong, in one line.
    pub error: String,
}

pub(super) type Answer = Response<Full<Bytes>>;

/// A request that could not be served, as an HTTP status and a message.
#[derive(Debug)]
pub(super) struct Fail(pub(super) StatusCode, pub(super) String);

impl Fail {
    pub(super) fn new(status: StatusCode, msg: impl Into<String>) -> Fail {
        Fail(status, msg.into())
    }
}

/// How long a request may take: an upgrade waits for the new process,
/// within its own timeouts; the budget follows the route as parsed, so
/// every path that reaches the upgrade gets it.
fn budget(request: &Result<AdminRequest, RouteError>) -> Duration {
    match request {
        Ok(AdminRequest::Upgrade) => UPGRADE_REQUEST_TIMEOUT,
        _ => REQUEST_TIMEOUT,
    }
}

/// Answer one request from `peer` (an allowed client holding a slot),
/// connected to `local`.
pub async fn respond(
    req: Request<Incoming>,
    peer: SocketAddr,
    local: SocketAddr,
    ctx: &Ctx,
) -> Answer {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    if let Some(refused) = misdirected(&req, local, &ctx.hosts) {
        log(peer, &method, &path, &refused);
        return refused;
    }
    let request = parse_request(req.method(), req.uri());
    let answer = match tokio::time::timeout(budget(&request), route(req, request, ctx)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(fail)) => error(fail),
        Err(_) => error(Fail::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "request timed out",
        )),
    };
    log(peer, &method, &path, &answer);
    answer
}

/// Answer a request from `peer` that found no slot (`full` says why):
/// `/healthz` as usual, since it needs nothing and a monitor must not see a
/// live process as dead; anything else 503 (every slot taken) or 429 (the
/// client's address holds its share), with `Retry-After`. The body is not
/// read.
pub fn reserved(
    req: &Request<Incoming>,
    peer: SocketAddr,
    local: SocketAddr,
    hosts: &host::Hosts,
    full: Refusal,
) -> Answer {
    if let Some(refused) = misdirected(req, local, hosts) {
        log(peer, req.method(), req.uri().path(), &refused);
        return refused;
    }
    let answer = match parse_request(req.method(), req.uri()) {
        Ok(AdminRequest::Healthz) => healthz(),
        _ => {
            let fail = match full {
                Refusal::MaxConnections => Fail::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("admin endpoint busy: all {MAX_CONNECTIONS} connections in use"),
                ),
                // The endpoint's slots refuse by number only; its
                // `admin.allow` is checked before a slot is asked for.
                Refusal::AllowList => Fail::new(
                    StatusCode::FORBIDDEN,
                    "client address not in admin.allow".to_owned(),
                ),
                Refusal::PerSource => Fail::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "too many admin connections from {} (at most {MAX_PER_SOURCE})",
                        peer.ip().to_canonical()
                    ),
                ),
                // Neither is the admin endpoint's: its slots never say so.
                Refusal::NoSuitableBackend | Refusal::ProxyProtocol => Fail::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "admin endpoint busy".to_owned(),
                ),
            };
            let mut answer = error(fail);
            answer
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            answer
        }
    };
    log(peer, req.method(), req.uri().path(), &answer);
    answer
}

/// A 421 for a request under a `Host` this endpoint does not answer to
/// (`admin/host.rs`), on every route: the body is not read. `None` when
/// the request may go on.
fn misdirected<B>(req: &Request<B>, local: SocketAddr, hosts: &host::Hosts) -> Option<Answer> {
    let refused = hosts.check(req.headers(), req.uri(), local.ip()).err()?;
    Some(error(Fail::new(
        StatusCode::MISDIRECTED_REQUEST,
        refused.to_string(),
    )))
}

fn log(peer: SocketAddr, method: &Method, path: &str, answer: &Answer) {
    debug!(
        client = %peer, method = %method, path = %path,
        status = answer.status().as_u16(), "admin_request"
    );
}

fn healthz() -> Answer {
    answer(
        StatusCode::OK,
        "text/plain; charset=utf-8",
        Bytes::from_static(b"ok\n"),
    )
}

async fn route(
    req: Request<Incoming>,
    request: Result<AdminRequest, RouteError>,
    ctx: &Ctx,
) -> Result<Answer, Fail> {
    // Every POST, before anything about it is judged: a page elsewhere
    // cannot read what the GET routes answer (no CORS headers), but it can
    // make a browser send a POST, and it learns nothing from a 403 alone.
    if req.method() == Method::POST {
        origin::check(req.headers())
            .map_err(|e| Fail::new(StatusCode::FORBIDDEN, e.to_string()))?;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let request = match request {
        Ok(request) => request,
        Err(refusal) => {
            let mut answer = error(Fail(refusal.status, refusal.message));
            if let Some(allow) = refusal.allow {
                answer
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            return Ok(answer);
        }
    };
    read_body(req.into_body()).await?;
    match request {
        AdminRequest::Page => Ok(ctx.page.answer()),
        AdminRequest::Status => json(StatusCode::OK, &ctx.control.status()),
        AdminRequest::Metrics => {
            let text =
                metrics::render(&ctx.control.pools(), &ctx.control.process()).map_err(|_| {
                    Fail::new(StatusCode::INTERNAL_SERVER_ERROR, "metrics encoding failed")
                })?;
            Ok(answer(StatusCode::OK, metrics::CONTENT_TYPE, text.into()))
        }
        AdminRequest::Healthz => Ok(healthz()),
        AdminRequest::Reload => reload(ctx).await,
        AdminRequest::Upgrade => upgrade(ctx).await,
        AdminRequest::Quarantine {
            pool,
            backend,
            window,
        } => {
            let p = find_pool(ctx, &pool)?;
            let before = crate::ops::status::of_pool(&p)
                .backends
                .into_iter()
                .find(|b| b.name == backend);
            let kept = p
                .operator()
                .quarantine(&backend, window)
                .map_err(not_found)?;
            let mut answer = backend_answer(ctx, pool, &backend)?;
            answer.kept_connections = (kept > 0).then_some(kept);
            if let Some(before) = before {
                answer.draining_connections = Some(before.connections.saturating_sub(kept));
                answer.replaced = before.quarantine;
            }
            json(StatusCode::OK, &answer)
        }
        AdminRequest::Release { pool, backend } => {
            let p = find_pool(ctx, &pool)?;
            let released = p.operator().release(&backend).map_err(not_found)?;
            let mut answer = backend_answer(ctx, pool, &backend)?;
            answer.released = Some(released);
            json(StatusCode::OK, &answer)
        }
        AdminRequest::Connections(query) => conns::list(&ctx.control, &query),
        AdminRequest::Close { conn } => conns::close(&ctx.control, conn),
        AdminRequest::Shed {
            pool,
            backend,
            count,
        } => conns::shed(&ctx.control, &pool, &backend, count),
    }
}

/// Read (and drop) the body, within [`MAX_BODY`] and [`BODY_TIMEOUT`].
async fn read_body(body: Incoming) -> Result<(), Fail> {
    let read = Limited::new(body, MAX_BODY).collect();
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(Fail::new(
            StatusCode::BAD_REQUEST,
            format!("reading the request body: {e}"),
        )),
        Err(_) => Err(Fail::new(
            StatusCode::REQUEST_TIMEOUT,
            "request body not received in time",
        )),
    }
}

fn too_large() -> Fail {
    Fail::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body over {MAX_BODY} bytes"),
    )
}

async fn reload(ctx: &Ctx) -> Result<Answer, Fail> {
    match ctx.control.reload().await {
        Ok(changes) => {
            /// `{"reloaded": true}` and what changed.
            #[derive(Serialize)]
            struct Done {
                reloaded: bool,
                #[serde(flatten)]
                changes: Reloaded,
            }
            let done = Done {
                reloaded: true,
                changes,
            };
            json(StatusCode::OK, &done)
        }
        Err(_) if ctx.token.is_cancelled() => Err(Fail::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server is shutting down",
        )),
        Err(err) => Err(Fail::new(StatusCode::UNPROCESSABLE_ENTITY, err.to_string())),
    }
}

async fn upgrade(ctx: &Ctx) -> Result<Answer, Fail> {
    match ctx.control.upgrade().await {
        Ok(done) => json(StatusCode::OK, &done),
        Err(err) => Err(Fail::new(StatusCode::UNPROCESSABLE_ENTITY, err.to_string())),
    }
}

fn find_pool(ctx: &Ctx, name: &str) -> Result<std::sync::Arc<crate::pool::registry::Pool>, Fail> {
    ctx.control
        .pool(name)
        .ok_or_else(|| Fail::new(StatusCode::NOT_FOUND, format!("no pool {name}")))
}

pub(super) fn not_found(e: impl std::fmt::Display) -> Fail {
    Fail::new(StatusCode::NOT_FOUND, e.to_string())
}

/// The backend's status now, in a [`BackendAnswer`].
fn backend_answer(ctx: &Ctx, pool: String, backend: &str) -> Result<BackendAnswer, Fail> {
    // The pool may have been removed by a reload in between: then it is gone.
    let status = ctx
        .control
        .pool(&pool)
        .and_then(|p| {
            crate::ops::status::of_pool(&p)
                .backends
                .into_iter()
                .find(|b| b.name == backend)
        })
        .ok_or_else(|| {
            Fail::new(
                StatusCode::NOT_FOUND,
                format!("pool {pool} has no backend {backend}"),
            )
        })?;
    Ok(BackendAnswer {
        pool,
        backend: status,
        released: None,
        kept_connections: None,
        draining_connections: None,
        replaced: None,
    })
}

pub(super) fn json(status: StatusCode, value: &impl Serialize) -> Result<Answer, Fail> {
    let mut body = serde_json::to_vec_pretty(value).map_err(|e| {
        Fail::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding JSON: {e}"),
        )
    })?;
    body.push(b'\n');
    Ok(answer(status, "application/json", body.into()))
}

fn error(Fail(status, msg): Fail) -> Answer {
    let body = serde_json::to_vec(&ErrorAnswer { error: msg })
        .unwrap_or_else(|_| br#"{"error":"unknown error"}"#.to_vec());
    answer(status, "application/json", body.into())
}

pub(super) fn answer(status: StatusCode, content_type: &'static str, body: Bytes) -> Answer {
    let mut answer = Response::new(Full::new(body));
    *answer.status_mut() = status;
    answer
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    answer
}

#[cfg(test)]
mod budget_tests {
    use hyper::{Method, Uri};

    use super::*;

    /// Every path the router sends to the upgrade gets the upgrade's
    /// budget (`//upgrade` got 15 s and a 503 when it was read from the
    /// raw path), and nothing else does.
    #[test]
    fn the_upgrades_budget_follows_the_parsed_route() {
        let of = |method: Method, path: &str| {
            let uri: Uri = path.parse().unwrap();
            budget(&parse_request(&method, &uri))
        };
        assert_eq!(of(Method::POST, "/upgrade"), UPGRADE_REQUEST_TIMEOUT);
        assert_eq!(of(Method::POST, "//upgrade"), UPGRADE_REQUEST_TIMEOUT);
        assert_eq!(of(Method::POST, "/reload"), REQUEST_TIMEOUT);
        assert_eq!(of(Method::GET, "/upgrade"), REQUEST_TIMEOUT);
    }
}
