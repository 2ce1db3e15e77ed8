//! Fuzz harness: the admin request path's routing (`admin::parse_request`).
//!
//! Input: an HTTP request line, `METHOD SP request-target [SP version]`. The
//! method and target go through the same `http` types hyper hands the router
//! (what they refuse, hyper answers 400 before routing), then through
//! `parse_request`, the pure half of the router: path, percent-decoding,
//! method, the `?for=` window, the `/connections` query, connection ids
//! and the shed's `?count=`.

use std::time::Duration;

use hyper::{Method, Uri};
use pin_proxy::inspect::{AdminRequest, parse_request};

/// A manual quarantine lasts at most a year (`admin/routes.rs` says 365
/// days; 366 leaves it room for a leap year).
const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

/// Route `data` as a request line; refusals must be client errors.
pub fn run(data: &[u8]) {
    let mut parts = data.splitn(3, |&b| b == b' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return;
    };
    let (Ok(method), Ok(uri)) = (Method::from_bytes(method), Uri::try_from(target)) else {
        return;
    };
    match parse_request(&method, &uri) {
        Ok(
            AdminRequest::Page
            | AdminRequest::Status
            | AdminRequest::Metrics
            | AdminRequest::Healthz,
        ) => {
            assert!(
                method == Method::GET || method == Method::HEAD,
                "read-only route served to {method}"
            );
        }
        Ok(AdminRequest::Quarantine { window, .. }) => {
            assert_eq!(method, Method::POST, "quarantine served to {method}");
            assert!(
                !window.is_zero() && window <= MAX_WINDOW,
                "window {window:?} out of bounds"
            );
        }
        Ok(AdminRequest::Connections(query)) => {
            assert!(
                method == Method::GET || method == Method::HEAD,
                "listing served to {method}"
            );
            assert!(
                (1..=10_000).contains(&query.limit),
                "limit {} out of bounds",
                query.limit
            );
        }
        Ok(AdminRequest::Shed { count, .. }) => {
            assert_eq!(method, Method::POST, "shed served to {method}");
            assert!((1..=10_000).contains(&count), "count {count} out of bounds");
        }
        Ok(
            AdminRequest::Reload
            | AdminRequest::Upgrade
            | AdminRequest::Release { .. }
            | AdminRequest::Close { .. },
        ) => {
            assert_eq!(method, Method::POST, "command served to {method}");
        }
        Err(refusal) => {
            assert!(
                refusal.status.is_client_error(),
                "refused with {}",
                refusal.status
            );
        }
    }
}
