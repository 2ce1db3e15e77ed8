//! The running process's live upgrade: start the binary it was started
//! from, hand it the listeners and state, and once it serves, let the
//! connections still connecting finish, then stop every connection,
//! idlest first and in waves, and hand each over as it stops. Until the
//! new process serves
//! nothing has changed here; after that, a failure takes every handed over
//! connection back and accepts again, so either way no client notices.

use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Waker};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::Server;
use super::listen::{handed, resume_accepting, stop_accepting};
use crate::net::handover::{HandedConn, Held};
use crate::ops::control::{UpgradeError, Upgraded};
use crate::pool::handed::{Movable, Waves};
use crate::runtime::handover::old_side::OldSide;
use crate::runtime::handover::protocol::{CONNS_PER_MESSAGE, HandedListener, Handover, Owner};
use crate::runtime::notify;

/// How often the wait for connections still connecting looks again.
const SETTLE_POLL: Duration = Duration::from_millis(10);

/// How many spliced connections a live upgrade stops at once: the longest
/// a connection in use waits for others to stop is about one wave's work.
const WAVE: usize = 200;

/// How often the wait for a wave to be done looks again between arrivals.
const WAVE_POLL: Duration = Duration::from_millis(1);

impl Server {
    /// Run one live upgrade; logs `upgrade_started`, then `upgraded` or
    /// `upgrade_failed`.
    pub(super) async fn upgrade(&mut self) -> Result<Upgraded, UpgradeError> {
        let started = Instant::now();
        info!(
            generation = self.generation,
            path = %self.exec.0.display(),
            "upgrade_started"
        );
        let result = self.try_upgrade().await;
        let duration_ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok(done) => info!(
                pid = done.pid,
                generation = done.generation,
                connections = done.connections,
                duration_ms,
                "upgraded"
            ),
            Err(err) => error!(
                reason = err.to_string().as_str(),
                duration_ms, "upgrade_failed"
            ),
        }
        result
    }

    async fn try_upgrade(&mut self) -> Result<Upgraded, UpgradeError> {
        if std::process::id() == 1 {
            return Err(UpgradeError::Pid1);
        }
        let timeout = self.config.upgrade_timeout;
        let (exe, args) = &self.exec;
        let mut next = OldSide::start(exe, args, timeout).await?;
        let (listeners, sockets) = self.handed_listeners();
        let handover = Handover {
            generation: self.generation,
            next_conn: self.shared.conn_ids.load(Ordering::Relaxed),
            pools: self
                .pools
                .iter()
                .map(|run| run.pool.upgrade().state())
                .collect(),
            listeners,
        };
        if let Err(err) = next.prepare(&handover, &sockets).await {
            next.abandon().await;
            return Err(err);
        }
        // It serves beside us now. From here the connections move.
        for run in &mut self.pools {
            stop_accepting(run).await;
        }
        self.admin_accepting.send_replace(false);
        // Each phase gets the whole budget: spliced connections stop in
        // milliseconds, however long the connects before took.
        let budget = self.longest_connect() + Duration::from_secs(1);
        self.settle(Instant::now() + budget).await;
        next.start_sending(timeout);
        let (handed, sent) = self.hand_over_all(&mut next, Instant::now() + budget).await;
        let finished = match sent {
            Ok(()) => next.finish(handed.len()).await,
            Err(err) => Err(err),
        };
        match finished {
            Ok(connections) => Ok(Upgraded {
                pid: next.pid(),
                generation: self.generation + 1,
                connections,
            }),
            Err(err) => {
                next.abandon().await;
                self.take_back(handed);
                self.admin_accepting.send_replace(true);
                Err(err)
            }
        }
    }

    /// Every listening socket (pools' and admin's), described and in order.
    fn handed_listeners(&self) -> (Vec<HandedListener>, Vec<BorrowedFd<'_>>) {
        let (mut listeners, sockets) = handed(&self.pools);
        let mut fds: Vec<BorrowedFd<'_>> = sockets.into_iter().map(AsFd::as_fd).collect();
        if let Some((configured, kept)) = &self.admin_kept
            && let Ok(local) = kept.local_addr()
        {
            listeners.push(HandedListener {
                owner: Owner::Admin,
                configured: *configured,
                local,
                sockets: 1,
            });
            fds.push(kept.as_fd());
        }
        (listeners, fds)
    }

    /// The longest a client connection may take to connect: to send its
    /// PROXY header where one is read, then to connect, failing over
    /// through every backend of its pool (discovered members included).
    fn longest_connect(&self) -> Duration {
        self.pools
            .iter()
            .map(|run| {
                let c = run.pool.config();
                let discovered: usize = run
                    .pool
                    .discovery()
                    .discovered_counts()
                    .iter()
                    .map(|(_, n)| n)
                    .sum();
                let backends = u32::try_from(c.backends.len() + discovered).unwrap_or(u32::MAX);
                let header = c
                    .proxy_protocol
                    .as_ref()
                    .map_or(Duration::ZERO, |pp| pp.timeout);
                let connect = c.connect_timeout.saturating_mul(backends.saturating_add(1));
                header.saturating_add(connect)
            })
            .max()
            .unwrap_or_default()
    }

    /// Let the connections still connecting (PROXY headers still being
    /// read among them) finish (or fail over) before
    /// anything is handed over, so the spliced ones keep moving bytes meanwhile
    /// instead of waiting, handed over, for someone else's connect; until
    /// `give_up`. Nothing new arrives: accepting has stopped.
    async fn settle(&self, give_up: Instant) {
        let connecting = || -> usize {
            self.pools
                .iter()
                .map(|run| run.pool.view().connecting())
                .sum()
        };
        let waiting = connecting();
        if waiting == 0 {
            return;
        }
        info!(connections = waiting, "handover_waiting");
        while connecting() > 0 && Instant::now() < give_up {
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    /// Stop every connection for the handover and send each to the new
    /// process as it comes. The spliced ones stop in waves of [`WAVE`],
    /// idlest first, each once the one before is done: a connection in use
    /// splices here until the last wave and then waits for that wave only,
    /// not for thousands of idle ones. Connecting ones stop once their
    /// connect is done (or has failed over). Until `give_up`. Returns every
    /// connection handed over, sent or not, and how the sending went: after
    /// a failure nothing more stops, and the rest splice on here.
    async fn hand_over_all(
        &mut self,
        next: &mut OldSide,
        give_up: Instant,
    ) -> (Vec<HandedConn>, Result<(), UpgradeError>) {
        let mut rx = self.shared.handovers.arm();
        let mut movable: Vec<Movable> = self
            .pools
            .iter()
            .flat_map(|run| run.pool.upgrade().begin())
            .collect();
        Movable::idlest_first(&mut movable);
        let mut out = Outbox::default();
        let mut waves = Waves::new(movable, WAVE);
        waves.stop_next(false);
        loop {
            while let Ok(f) = rx.try_recv() {
                out.handed.push(f);
            }
            out.send(next, false).await;
            let late = Instant::now() >= give_up;
            if waves.settled() || late {
                // A failed send stops no more: the wave already stopped
                // has been collected, to be taken back.
                if out.failed.is_some() || !waves.stop_next(late) || late {
                    break;
                }
                continue;
            }
            tokio::select! {
                Some(f) = rx.recv() => out.handed.push(f),
                () = tokio::time::sleep(WAVE_POLL) => {}
            }
        }
        // The rest: connections still connecting, and any a wave gave up on.
        // A session lets go of its admission after handing over.
        while out.failed.is_none() {
            while let Ok(f) = rx.try_recv() {
                out.handed.push(f);
            }
            out.send(next, false).await;
            if self.pools.iter().all(|run| run.pool.view().clients() == 0) {
                break;
            }
            tokio::select! {
                Some(f) = rx.recv() => out.handed.push(f),
                () = tokio::time::sleep(Duration::from_millis(5)) => {}
                () = tokio::time::sleep_until(give_up) => {
                    let left: usize = self.pools.iter().map(|run| run.pool.view().clients()).sum();
                    warn!(connections = left, "handover_incomplete");
                    break;
                }
            }
        }
        if out.failed.is_some() {
            // Splices go on here: a connection spliced from now on is not
            // stopped for a handover that no longer collects.
            for run in &self.pools {
                run.pool.upgrade().end();
            }
        }
        self.shared.handovers.disarm();
        while let Ok(f) = rx.try_recv() {
            out.handed.push(f);
        }
        out.send(next, true).await;
        let Outbox { handed, failed, .. } = out;
        (handed, failed.map_or(Ok(()), Err))
    }

    /// The upgrade failed after the connections were handed over: splice them
    /// here again and accept again. systemd is told this is still the
    /// main process, in case the new one had said otherwise.
    fn take_back(&mut self, handed: Vec<HandedConn>) {
        for run in &self.pools {
            run.pool.upgrade().end();
        }
        let n = self.resume_all(handed, &Held::free());
        for run in &mut self.pools {
            resume_accepting(run, &self.shared, &self.workers);
        }
        notify::main_pid();
        info!(connections = n, "upgrade_rolled_back");
    }
}

/// The connections handed over so far, how many of them went to the new
/// process, and the error that ended the sending, if one did.
#[derive(Default)]
struct Outbox {
    handed: Vec<HandedConn>,
    sent: usize,
    failed: Option<UpgradeError>,
}

impl Outbox {
    /// Send what is not sent yet, busiest first: full messages only, or
    /// `all` of it. Nothing once a send failed.
    async fn send(&mut self, next: &mut OldSide, all: bool) {
        if self.failed.is_some() {
            return;
        }
        let unsent = &mut self.handed[self.sent..];
        let n = if all {
            unsent.len()
        } else {
            unsent.len() - unsent.len() % CONNS_PER_MESSAGE
        };
        if n == 0 {
            return;
        }
        HandedConn::busiest_first(unsent);
        match next.send_conns(&unsent[..n]).await {
            Ok(()) => self.sent += n,
            Err(err) => self.failed = Some(err),
        }
    }
}

/// A stop (SIGTERM, SIGINT) that came while the upgrade ran, or since,
/// is passed on to the new process, which serves now: a supervisor that
/// signals only the pid it started still stops the service. Looked at
/// last, just before this process exits, so no stop is left behind.
pub(super) fn pass_stop_on(shutdown: Pin<&mut impl Future<Output = ()>>, next: u32) {
    let mut cx = Context::from_waker(Waker::noop());
    if shutdown.poll(&mut cx).is_pending() {
        return;
    }
    let sent = i32::try_from(next)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or(rustix::io::Errno::SRCH)
        .and_then(|pid| kill_process(pid, Signal::TERM));
    match sent {
        Ok(()) => info!(pid = next, "stop_passed_on"),
        Err(err) => error!(pid = next, err = %err, "stop_passed_on"),
    }
}
