//! The clocks a splice may run besides its sockets: the backend leg's
//! keepalive, set once the leg has lived long enough for it to matter, and
//! the idle timeout, reset by any byte either way.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::config::KeepaliveConfig;
use crate::net::sockopt;
use crate::pool::registry::ConnId;

pin_project! {
    /// What a young backend leg still owes itself: [`sockopt::keep_alive`],
    /// set after [`sockopt::keep_alive_after`]. A churned connection ends
    /// before that and never makes those system calls; one that lives is
    /// found half-open within the same budget (see `keep_alive`).
    pub struct KeepAliveLater<'a> {
        #[pin]
        due: Sleep,
        keepalive: KeepaliveConfig,
        // Who to name if the kernel refuses (`sockopt_failed`).
        pool: &'a str,
        backend: &'a str,
        conn: ConnId,
    }
}

impl<'a> KeepAliveLater<'a> {
    /// `keepalive` for the backend leg of `conn` (on `backend` of `pool`,
    /// whose `idle_timeout` is given), connected now.
    pub fn new(
        (keepalive, idle_timeout): (KeepaliveConfig, Option<Duration>),
        pool: &'a str,
        backend: &'a str,
        conn: ConnId,
    ) -> Self {
        let after = sockopt::keep_alive_after(&keepalive, idle_timeout);
        KeepAliveLater {
            due: tokio::time::sleep(after),
            keepalive,
            pool,
            backend,
            conn,
        }
    }

    /// Ready once they are due.
    pub(super) fn poll_due(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.project().due.poll(cx)
    }

    /// Set them on `socket` now.
    pub(super) fn apply(&self, socket: &TcpStream) {
        if let Err(err) = sockopt::keep_alive(socket, &self.keepalive) {
            tracing::debug!(
                pool = %self.pool, conn = self.conn, backend = %self.backend, leg = "backend",
                %err, "sockopt_failed"
            );
        }
    }
}

/// The idle timeout's clock.
pub(super) struct Idle {
    timeout: Duration,
    /// When a byte last moved either way (read once per poll that moved any).
    last: Instant,
    sleep: Pin<Box<Sleep>>,
}

impl Idle {
    /// Counting from the last byte, `silent` ago (zero for a new splice).
    pub(super) fn since(timeout: Duration, silent: Duration) -> Idle {
        let now = Instant::now();
        let last = now.checked_sub(silent).unwrap_or(now);
        Idle {
            timeout,
            last,
            sleep: Box::pin(tokio::time::sleep_until(last + timeout)),
        }
    }

    /// Bytes moved just now.
    pub(super) fn moved(&mut self) {
        self.last = Instant::now();
    }

    /// Ready once no byte has moved for the timeout.
    pub(super) fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            ready!(self.sleep.as_mut().poll(cx));
            let deadline = self.last + self.timeout;
            if Instant::now() >= deadline {
                return Poll::Ready(());
            }
            // Bytes moved since the timer was set: wait from the last one.
            self.sleep.as_mut().reset(deadline);
        }
    }
}
