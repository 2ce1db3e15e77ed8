//! The admin HTTP endpoint (`admin.listen`): accept loop, allow-list, and the
//! bounds that keep a slow or hostile admin client from stalling the proxy or
//! other admin clients. The routes themselves live in `admin/routes.rs`
//! (those of `/connections`, close and shed in `admin/conns.rs`), what a
//! request asks is parsed in `admin/request.rs`, the
//! status page at `/` in `admin/page.rs`, the refusal of cross-site
//! commands in `admin/origin.rs`, and of a `Host` the endpoint does not
//! answer to (DNS rebinding) in `admin/host.rs`.
//!
//! Bounds: a client outside `admin.allow` is closed at once, unread, and
//! takes nothing. An allowed one takes one of [`MAX_CONNECTIONS`] slots, at
//! most [`MAX_PER_SOURCE`] per source address (`admin/slots.rs`). Its request
//! heads must arrive within [`HEAD_TIMEOUT`] (which also ends an idle
//! keep-alive) and [`MAX_HEAD`] bytes, bodies within `routes::MAX_BODY` bytes, each
//! request is answered within a fixed budget, and the connection is closed
//! (gracefully) after [`CONNECTION_LIFETIME`]. When its slots are taken, a
//! connection is served by the reserve instead: up to [`RESERVE`] at once,
//! one request within [`RESERVE_HEAD_TIMEOUT`], `/healthz` answered and
//! anything else refused with a quick 503 (or 429 for the per-source share),
//! so a monitor always gets an answer and nothing is closed silently.

mod conns;
mod host;
mod origin;
mod page;
mod request;
mod routes;
mod slots;

pub use conns::{CloseAnswer, ShedAnswer};
pub use request::{AdminRequest, parse_request};
pub use routes::{BackendAnswer, ErrorAnswer, REQUEST_TIMEOUT, UPGRADE_REQUEST_TIMEOUT};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::config::{AdminConfig, IpNet};
use crate::ops::control::Control;
use crate::pool::admission::Refusal;
use slots::Slots;

/// Admin connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Of those, the most one source address (IPv4, or IPv6 /64) may hold.
pub const MAX_PER_SOURCE: usize = 16;
/// Time a client gets to send a complete request head, and the longest a
/// keep-alive connection may sit idle between requests. A head on a
/// working network arrives in well under this.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest request head (request line and headers), in bytes.
pub const MAX_HEAD: usize = 16 * 1024;
/// A connection is asked to close (after its current request) this long
/// after it was accepted.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// Connections answered by the reserve at once, when the slots are taken;
/// beyond this they are closed at once.
pub const RESERVE: usize = 256;
/// Time a reserve connection gets to send its one request head.
pub const RESERVE_HEAD_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a closing connection may take to finish its request.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// Accept errors back off from this...
const BACKOFF_MIN: Duration = Duration::from_millis(5);
/// ...up to this.
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Serve admin requests on `listener` until `token` is cancelled; then stop
/// accepting, let open requests finish (briefly) and return. While
/// `accepting` says false (a live upgrade's new process accepts on the same
/// socket), new clients are left to the other process.
///
/// Clients outside `admin.allow` (IPv4-mapped IPv6 addresses matched as
/// IPv4; an empty list allows nobody) are closed at once, before anything
/// is read. Requests under a `Host` that is not the endpoint's own nor in
/// `admin.hosts` are refused (421).
pub async fn serve(
    listener: TcpListener,
    admin: AdminConfig,
    control: Control,
    mut accepting: watch::Receiver<bool>,
    token: CancellationToken,
) {
    let AdminConfig {
        listen,
        allow,
        hosts,
    } = admin;
    let hosts = host::Hosts {
        listen: listen.ip(),
        names: hosts,
    };
    let slots = Slots::new(MAX_CONNECTIONS, MAX_PER_SOURCE);
    let reserve = Arc::new(Semaphore::new(RESERVE));
    let tracker = TaskTracker::new();
    let ctx = Arc::new(routes::Ctx {
        control,
        token: token.clone(),
        page: page::Page::new(),
        hosts: hosts.clone(),
    });
    let hosts = Arc::new(hosts);
    let mut backoff = BACKOFF_MIN;
    loop {
        let on = *accepting.borrow_and_update();
        let accepted = tokio::select! {
            () = token.cancelled() => break,
            // Paused or resumed (a failed upgrade): look again.
            Ok(()) = accepting.changed() => continue,
            r = listener.accept(), if on => r,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => {
                backoff = BACKOFF_MIN;
                conn
            }
            Err(err) => {
                // Usually fd exhaustion: wait for it to pass, never give up.
                warn!(err = %err, "admin_accept_failed");
                tokio::select! {
                    () = token.cancelled() => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        if !allowed(&allow, peer) {
            debug!(client = %peer, reason = "allow", "admin_rejected");
            continue; // dropping the stream closes it, unread
        }
        let token = token.clone();
        match slots.take(peer.ip()) {
            Ok(slot) => {
                let ctx = ctx.clone();
                tracker.spawn(async move {
                    connection(stream, peer, ctx, token).await;
                    drop(slot);
                });
            }
            Err(full) => {
                let Ok(permit) = reserve.clone().try_acquire_owned() else {
                    debug!(client = %peer, reason = "reserve_full", "admin_rejected");
                    continue;
                };
                debug!(client = %peer, reason = full.as_str(), "admin_busy");
                let hosts = hosts.clone();
                tracker.spawn(async move {
                    reserved(stream, peer, full, &hosts, token).await;
                    drop(permit);
                });
            }
        }
    }
    tracker.close();
    if tokio::time::timeout(CLOSE_GRACE * 2, tracker.wait())
        .await
        .is_err()
    {
        warn!(connections = tracker.len(), "admin_shutdown_timeout");
    }
    info!("admin_stopped");
}

/// True if `peer` may use the admin endpoint. Unlike a pool's allow-list, an
/// empty list allows nobody: the endpoint has no other authentication.
pub fn allowed(allow: &[IpNet], peer: SocketAddr) -> bool {
    // Same matching as a pool's allow-list, except that empty means nobody.
    !allow.is_empty() && crate::net::listener::allowed(allow, peer)
}

/// The HTTP/1.1 settings every admin connection shares.
fn builder(head_timeout: Duration, keep_alive: bool) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_buf_size(MAX_HEAD)
        .max_headers(64)
        .keep_alive(keep_alive);
    builder
}

/// Serve one admin connection (HTTP/1.1, keep-alive) within its bounds.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<routes::Ctx>,
    token: CancellationToken,
) {
    let Ok(local) = stream.local_addr() else {
        return; // gone already
    };
    let control = ctx.control.clone();
    let service = service_fn(move |req| {
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(routes::respond(req, peer, local, &ctx).await) }
    });
    let conn = builder(HEAD_TIMEOUT, true).serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let done = tokio::select! {
        r = conn.as_mut() => Some(r),
        () = token.cancelled() => None,
        () = tokio::time::sleep(CONNECTION_LIFETIME) => None,
    };
    let result = match done {
        Some(r) => r,
        None => {
            // Finish the request in flight (if any), then close. An
            // upgrade running may be this connection's request: it gets
            // the upgrade's budget.
            conn.as_mut().graceful_shutdown();
            let budget = if control.upgrading() {
                UPGRADE_REQUEST_TIMEOUT
            } else {
                REQUEST_TIMEOUT
            };
            match tokio::time::timeout(budget + CLOSE_GRACE, conn).await {
                Ok(r) => r,
                Err(_) => {
                    debug!(client = %peer, "admin_connection_timeout");
                    return;
                }
            }
        }
    };
    if let Err(err) = result {
        // Timeouts, malformed requests, peers that went away: theirs to fix.
        debug!(client = %peer, err = %err, "admin_connection_error");
    }
}

/// Answer one request on a connection that found no slot (`full` says
/// why): `/healthz` as usual, anything else a quick refusal; then close.
async fn reserved(
    stream: TcpStream,
    peer: SocketAddr,
    full: Refusal,
    hosts: &host::Hosts,
    token: CancellationToken,
) {
    let Ok(local) = stream.local_addr() else {
        return; // gone already
    };
    let service = service_fn(move |req| {
        let answer = routes::reserved(&req, peer, local, hosts, full);
        async move { Ok::<_, Infallible>(answer) }
    });
    let conn = builder(RESERVE_HEAD_TIMEOUT, false).serve_connection(TokioIo::new(stream), service);
    let result = tokio::select! {
        r = tokio::time::timeout(RESERVE_HEAD_TIMEOUT + CLOSE_GRACE, conn) => r,
        () = token.cancelled() => return,
    };
    match result {
        Ok(Ok(())) => {}
        Ok(Err(err)) => debug!(client = %peer, err = %err, "admin_connection_error"),
        Err(_) => debug!(client = %peer, "admin_connection_timeout"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_admin_allow_list_allows_nobody() {
        let allow: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        assert!(allowed(&allow, "[::ffff:127.0.0.1]:5".parse().unwrap()));
        assert!(!allowed(&allow, "127.0.0.2:5".parse().unwrap()));
        assert!(!allowed(&[], "127.0.0.1:4".parse().unwrap()));
    }

    /// While paused (a live upgrade's new process accepts on the same
    /// socket) a client waits in the backlog, unanswered; once resumed (the
    /// upgrade failed) it is answered.
    #[tokio::test]
    async fn a_paused_endpoint_leaves_new_clients_to_the_other_process() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let listen = listener.local_addr().unwrap();
        let admin = AdminConfig {
            listen,
            allow: vec!["127.0.0.0/8".parse().unwrap()],
            hosts: Vec::new(),
        };
        let (reload, _reloads) = tokio::sync::mpsc::channel(1);
        let (upgrade, _upgrades) = tokio::sync::mpsc::channel(1);
        let control = Control::new(Vec::new(), reload, upgrade, 0);
        let (accepting, watched) = watch::channel(false);
        let token = CancellationToken::new();
        let served = tokio::spawn(serve(listener, admin, control, watched, token.clone()));
        let mut client = TcpStream::connect(listen).await.unwrap();
        let ask = format!("GET /healthz HTTP/1.1\r\nHost: {listen}\r\nConnection: close\r\n\r\n");
        client.write_all(ask.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let early = Duration::from_millis(300);
        assert!(
            tokio::time::timeout(early, client.read_to_end(&mut answer))
                .await
                .is_err(),
            "answered while paused: {}",
            String::from_utf8_lossy(&answer)
        );
        accepting.send_replace(true);
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer))
            .await
            .expect("answered once resumed")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        token.cancel();
        served.await.unwrap();
    }
}
