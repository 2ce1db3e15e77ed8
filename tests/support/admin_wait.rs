//! Waits on the admin documents: `/status`, `/metrics` or `/connections` read again every
//! [`POLL`] until a condition holds. The timeout panic shows the last
//! answer, so a failed wait says what the proxy reported instead.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use super::admin_http::{self, Metrics};
use super::inproc::Running;

/// Time between two reads.
const POLL: Duration = Duration::from_millis(20);

/// Where a `/status` document comes from.
pub trait StatusSource {
    /// The document now.
    fn status(&self) -> impl Future<Output = Value>;
}

/// `GET /status` from the admin endpoint at this address.
impl StatusSource for SocketAddr {
    fn status(&self) -> impl Future<Output = Value> {
        admin_http::status(*self)
    }
}

/// The document the admin endpoint would serve, from a server in the
/// test's own runtime (which needs no admin endpoint).
impl StatusSource for &Running {
    fn status(&self) -> impl Future<Output = Value> {
        let status = serde_json::to_value(self.control().status()).expect("status as JSON");
        std::future::ready(status)
    }
}

/// Read `/status` from `source` until `f` gives an answer; that answer.
/// Panics naming `what`, with the last document, after `timeout`.
pub async fn wait_status<R>(
    source: impl StatusSource,
    what: &str,
    timeout: Duration,
    f: impl FnMut(&Value) -> Option<R>,
) -> R {
    poll(|| source.status(), "/status", what, timeout, f).await
}

/// Read `/metrics` from the admin endpoint at `admin` until `f` gives an
/// answer; that answer. Panics naming `what`, with the last scrape, after
/// `timeout`.
pub async fn wait_metrics<R>(
    admin: SocketAddr,
    what: &str,
    timeout: Duration,
    f: impl FnMut(&Metrics) -> Option<R>,
) -> R {
    poll(|| admin_http::metrics(admin), "/metrics", what, timeout, f).await
}

/// Read `GET /connections?query` from the admin endpoint at `admin` until
/// `f` gives an answer; that answer. Panics naming `what`, with the last
/// listing, after `timeout`.
pub async fn wait_connections<R>(
    admin: SocketAddr,
    query: &str,
    what: &str,
    timeout: Duration,
    f: impl FnMut(&Value) -> Option<R>,
) -> R {
    let read = || async move {
        let answer = admin_http::request(admin, "GET", &format!("/connections?{query}")).await;
        assert_eq!(answer.status, 200, "{query}: {}", answer.body);
        answer.json()
    };
    poll(read, "/connections", what, timeout, f).await
}

/// Read a `document` with `read` every [`POLL`] until `f` gives an answer.
/// The admin documents have no change feed, so a wait reads them again.
async fn poll<D: std::fmt::Display, R, Fut: Future<Output = D>>(
    read: impl Fn() -> Fut,
    document: &str,
    what: &str,
    timeout: Duration,
    mut f: impl FnMut(&D) -> Option<R>,
) -> R {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let answer = read().await;
        if let Some(found) = f(&answer) {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; the last {document}:\n{answer}"
        );
        tokio::time::sleep(POLL).await;
    }
}
