//! systemd readiness protocol: READY, RELOADING, STOPPING and watchdog
//! pings. Every call is a no-op outside systemd (no `NOTIFY_SOCKET`).

use std::time::Duration;

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;
use tracing::debug;

fn send(states: &[NotifyState]) {
    // The service manager is optional; failing to reach it must not stop us.
    if let Err(err) = sd_notify::notify(states) {
        debug!(err = %err, "sd_notify_failed");
    }
}

/// Every listener is bound.
pub fn ready() {
    send(&[NotifyState::Ready]);
}

/// A reload starts (`RELOADING=1` with the `MONOTONIC_USEC` systemd wants).
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// Shutting down.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// Ping the watchdog at half its period until `token` is cancelled; returns
/// at once when no watchdog is configured.
pub async fn watchdog(token: CancellationToken) {
    let Some(period) = sd_notify::watchdog_enabled() else {
        return;
    };
    let every = (period / 2).max(Duration::from_millis(100));
    loop {
        send(&[NotifyState::Watchdog]);
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// This process is the service's main process (again): `MAINPID=` and
/// `READY=1`, for the new process of a live upgrade, or for the old one
/// taking back after a failed one.
pub fn main_pid() {
    send(&[NotifyState::MainPid(std::process::id()), NotifyState::Ready]);
}
