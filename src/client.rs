//! The `status`, `quarantine` and `release` commands: requests to a running
//! instance's admin endpoint.

use std::time::Duration;

/// `GET /status`, as a table or raw JSON.
///
/// # Errors
/// When the instance is unreachable or answers with an error.
pub async fn status(admin: &str, json: bool) -> anyhow::Result<String> {
    anyhow::bail!("status from {admin} (json {json}): not available yet")
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
    anyhow::bail!("quarantine {pool}/{backend} for {window:?} via {admin}: not available yet")
}

/// `POST /pools/{pool}/backends/{backend}/release`.
///
/// # Errors
/// When the instance is unreachable or answers with an error.
pub async fn release(admin: &str, pool: &str, backend: &str) -> anyhow::Result<String> {
    anyhow::bail!("release {pool}/{backend} via {admin}: not available yet")
}
