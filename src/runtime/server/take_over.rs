//! The new process of a live upgrade: take the running process's
//! listeners and state before serving, then its connections, each
//! resumed where its splice stood.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use anyhow::Context;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn};

use super::Server;
use super::listen::TakenListeners;
use crate::config::Config;
use crate::net::handover::{HandedConn, Held, Hold};
use crate::net::session;
use crate::pool::close::CloseReason;
use crate::runtime::handover::new_side::{LetGo, NewSide};
use crate::runtime::handover::protocol::Handover;
use crate::runtime::handover::{CONN_ID_GAP, ENV};
use crate::runtime::{limits, notify};

/// The longest the release of one batch of handed over connections waits
/// for its sessions to start before the next batch is let go.
const BATCH_START: Duration = Duration::from_millis(5);

/// What a process started by a live upgrade takes over: the channel to
/// the running process and what it sent so far.
#[derive(Debug)]
pub struct Takeover {
    new_side: NewSide,
    handover: Handover,
    fds: Vec<std::os::fd::OwnedFd>,
    started: StdInstant,
    /// Listen addresses taken over (set once the server is built).
    listeners: usize,
}

impl Takeover {
    /// When this process was started by a live upgrade
    /// (`PIN_PROXY_UPGRADE` names the running process), connect to it and
    /// take its handover; `None` for a cold start.
    ///
    /// # Errors
    /// The handover failed before anything moved (the running process
    /// carries on); this process should exit.
    pub async fn from_env() -> anyhow::Result<Option<Takeover>> {
        let Some(name) = std::env::var_os(ENV) else {
            return Ok(None);
        };
        // Left in the environment: a later upgrade's process gets its own value.
        let name = name.to_string_lossy().into_owned();
        let started = StdInstant::now();
        let (new_side, handover, fds) = NewSide::connect(&name)
            .await
            .with_context(|| format!("take over from the running process ({ENV}={name})"))?;
        Ok(Some(Takeover {
            new_side,
            handover,
            fds,
            started,
            listeners: 0,
        }))
    }

    /// Build the server of this process from `config`: the inherited
    /// listeners where the config still has them, new ones bound, the
    /// handed over counters restored. A failure is told to the running process.
    ///
    /// # Errors
    /// The listeners did not arrive whole, or a new one cannot be bound.
    pub async fn into_server(
        mut self,
        config: Config,
        path: PathBuf,
    ) -> anyhow::Result<(Server, Takeover)> {
        let handed = std::mem::take(&mut self.handover.listeners);
        let fds = std::mem::take(&mut self.fds);
        let built = TakenListeners::new(handed, fds)
            .map_err(anyhow::Error::msg)
            .and_then(|taken_listeners| {
                let listeners = taken_listeners.count();
                let generation = self.handover.generation + 1;
                let next_conn = self.handover.next_conn.saturating_add(CONN_ID_GAP);
                let server =
                    Server::start(config, Some(path), taken_listeners, generation, next_conn)?;
                Ok((server, listeners))
            });
        let (server, listeners) = match built {
            Ok(built) => built,
            Err(err) => {
                self.new_side.refuse(&format!("{err:#}")).await;
                return Err(err);
            }
        };
        for run in &server.pools {
            if let Some(c) = self.handover.pools.iter().find(|c| c.name == run.pool.name) {
                run.pool.upgrade().take(c);
            }
        }
        info!(listeners, rss_kib = limits::rss_kib(), "inherited");
        self.listeners = listeners;
        Ok((server, self))
    }
}

impl Server {
    /// [`Server::run`] for the new process of a live upgrade.
    pub async fn run_taken_over(
        self,
        shutdown: impl std::future::Future<Output = ()>,
        takeover: Takeover,
    ) {
        self.serve(shutdown, Some(takeover)).await;
    }

    /// This process serves: take the running process's connections, then
    /// tell systemd and the running process (which then exits) that it is
    /// done. A failure here leaves the running process to take them back.
    pub(super) async fn take_connections(&mut self, takeover: Takeover) {
        let Takeover {
            new_side,
            started,
            listeners,
            ..
        } = takeover;
        let mut adopted = 0;
        // One hold per batch, let go busiest first: the batches came idlest
        // first, each busiest first.
        let mut holds: Vec<Hold> = Vec::new();
        let result: std::io::Result<()> = async {
            new_side.ready().await?;
            loop {
                match new_side.next().await? {
                    Ok(batch) => {
                        let handed = batch.into_iter().map(|(meta, client, backend)| HandedConn {
                            meta,
                            client: client.into(),
                            backend_socket: backend.into(),
                        });
                        let hold = Hold::new();
                        adopted += self.resume_all(handed, &hold.held());
                        holds.push(hold);
                    }
                    Err(sent) => {
                        if sent.connections != adopted {
                            warn!(sent = sent.connections, adopted, "adopted_fewer");
                        }
                        for run in &self.pools {
                            run.pool.drains().recheck();
                        }
                        notify::main_pid();
                        return new_side.adopted(sent.connections).await;
                    }
                }
            }
        }
        .await;
        // Whatever happened, the running process decides: it lets go, or
        // stops this process and splices the connections on itself. Told
        // of a failure here, it does so at once, not at its deadline.
        if let Err(err) = &result {
            new_side
                .refuse(&format!("taking the connections over: {err}"))
                .await;
        }
        let let_go = new_side.let_go().await;
        // A batch at a time, each once the one before has had its first
        // poll: thousands of sessions woken at once would queue the busy
        // ones' next round trips behind every idle one's first poll.
        for hold in holds.iter().rev() {
            hold.let_go();
            hold.passed(BATCH_START).await;
        }
        match result {
            // A running process of a build before `LET_GO` just exits.
            Ok(()) => info!(
                generation = self.generation,
                listeners,
                connections = adopted,
                duration_ms = started.elapsed().as_millis() as u64,
                rss_kib = limits::rss_kib(),
                let_go = match &let_go {
                    LetGo::Said => "said",
                    LetGo::Gone => "exited",
                },
                "adopted"
            ),
            Err(err) => warn!(connections = adopted, err = %err, "adopt_failed"),
        }
    }

    /// Splice `handed` connections on, spread over the data workers, once
    /// `held` lets go; returns how many were resumed (one whose pool is
    /// gone is closed).
    pub(super) fn resume_all(
        &self,
        handed: impl IntoIterator<Item = HandedConn>,
        held: &Held,
    ) -> usize {
        let mut resumed = 0;
        for f in handed {
            let Some(run) = self.pools.iter().find(|run| run.pool.name == f.meta.pool) else {
                let m = &f.meta;
                let lived = m.started.elapsed().unwrap_or_default();
                info!(
                    pool = %m.pool, backend = %m.backend, conn = m.conn, client = %m.peer,
                    bytes_up = m.splice.up.moved, bytes_down = m.splice.down.moved,
                    duration_ms = u64::try_from(lived.as_millis()).unwrap_or(u64::MAX),
                    reason = CloseReason::PoolRemoved.as_str(), "closed"
                );
                continue;
            };
            let Some(slot) = handed_slot(&self.shared.slots) else {
                continue;
            };
            let handovers = self.shared.handovers.clone();
            let task = session::resume(run.pool.clone(), f, slot, handovers, held.clone());
            let worker = self.workers.handle(resumed);
            worker.spawn(self.shared.tracker.track_future(task));
            resumed += 1;
        }
        resumed
    }
}

/// A handed over connection's place in the descriptor budget: it held one
/// in the old process, so it must not be refused one here. Above the
/// budget (this process may have a lower open-file limit) it gets a place
/// of its own, and owes one: the first slot that comes free is held for
/// it until it ends, so the process comes back under its budget as soon
/// as it can and the budget is what it was once the connection is gone.
/// (`None` only if a fresh semaphore had no permit.)
fn handed_slot(slots: &Arc<Semaphore>) -> Option<OwnedSemaphorePermit> {
    if let Ok(slot) = slots.clone().try_acquire_owned() {
        return Some(slot);
    }
    let own = Arc::new(Semaphore::new(1));
    let slot = own.clone().try_acquire_owned().ok()?;
    let slots = slots.clone();
    tokio::spawn(async move {
        let owed = tokio::select! {
            biased;
            _ = own.acquire() => return,
            owed = slots.acquire_owned() => owed,
        };
        // Free once the connection's own place is given back.
        let _ = own.acquire().await;
        drop(owed);
    });
    Some(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Until `slots` has `free` permits (each owed slot's task runs on
    /// this test's one thread, at the yields).
    async fn settle(slots: &Semaphore, free: usize) {
        for _ in 0..100 {
            if slots.available_permits() == free {
                return;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(slots.available_permits(), free);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn connections_handed_over_above_the_budget_take_the_first_free_slots() {
        let slots = Arc::new(Semaphore::new(2));
        let within: Vec<_> = (0..2).map(|_| handed_slot(&slots).unwrap()).collect();
        let above: Vec<_> = (0..3).map(|_| handed_slot(&slots).unwrap()).collect();
        assert_eq!(slots.available_permits(), 0);
        drop(within);
        settle(&slots, 0).await;
        let waiting = slots.clone().try_acquire_owned();
        assert!(waiting.is_err(), "a slot came free while 3 were over 2");
        drop(above);
        settle(&slots, 2).await;
        assert_eq!(slots.available_permits(), 2, "the budget is two, as before");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_connection_above_the_budget_that_ends_first_owes_nothing() {
        let slots = Arc::new(Semaphore::new(1));
        let within = handed_slot(&slots).unwrap();
        let above = handed_slot(&slots).unwrap();
        drop(above);
        tokio::task::yield_now().await;
        drop(within);
        settle(&slots, 1).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(slots.available_permits(), 1, "a slot was taken for nothing");
    }
}
