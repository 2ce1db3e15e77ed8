//! The new process of a live upgrade: take the running process's
//! listeners and state before serving, then its connections, each
//! resumed where its splice stood.

use std::path::PathBuf;
use std::time::Instant as StdInstant;

use anyhow::Context;
use tracing::{info, warn};

use super::Server;
use super::listen::Inherited;
use crate::config::Config;
use crate::net::freeze::Frozen;
use crate::net::session;
use crate::pool::close::CloseReason;
use crate::runtime::handover::heir::Heir;
use crate::runtime::handover::protocol::Inheritance;
use crate::runtime::handover::{CONN_ID_GAP, ENV};
use crate::runtime::{limits, notify};

/// What a process started by a live upgrade takes over: the channel to
/// the running process and what it sent so far.
#[derive(Debug)]
pub struct Heritage {
    heir: Heir,
    inheritance: Inheritance,
    fds: Vec<std::os::fd::OwnedFd>,
    started: StdInstant,
    /// Listen addresses taken over (set once the server is built).
    listeners: usize,
}

impl Heritage {
    /// When this process was started by a live upgrade
    /// (`PIN_PROXY_UPGRADE` names the running process), connect to it and
    /// take its inheritance; `None` for a cold start.
    ///
    /// # Errors
    /// The handover failed before anything moved (the running process
    /// carries on); this process should exit.
    pub async fn from_env() -> anyhow::Result<Option<Heritage>> {
        let Some(name) = std::env::var_os(ENV) else {
            return Ok(None);
        };
        // Left in the environment: a later upgrade's process gets its own value.
        let name = name.to_string_lossy().into_owned();
        let started = StdInstant::now();
        let (heir, inheritance, fds) = Heir::connect(&name)
            .await
            .with_context(|| format!("take over from the running process ({ENV}={name})"))?;
        Ok(Some(Heritage {
            heir,
            inheritance,
            fds,
            started,
            listeners: 0,
        }))
    }

    /// Build the server of this process from `config`: the inherited
    /// listeners where the config still has them, new ones bound, the
    /// carried counters restored. A failure is told to the running process.
    ///
    /// # Errors
    /// The listeners did not arrive whole, or a new one cannot be bound.
    pub async fn into_server(
        mut self,
        config: Config,
        path: PathBuf,
    ) -> anyhow::Result<(Server, Heritage)> {
        let carried = std::mem::take(&mut self.inheritance.listeners);
        let fds = std::mem::take(&mut self.fds);
        let built = Inherited::new(carried, fds)
            .map_err(anyhow::Error::msg)
            .and_then(|inherited| {
                let listeners = inherited.count();
                let generation = self.inheritance.generation + 1;
                let next_conn = self.inheritance.next_conn.saturating_add(CONN_ID_GAP);
                let server = Server::start(config, Some(path), inherited, generation, next_conn)?;
                Ok((server, listeners))
            });
        let (server, listeners) = match built {
            Ok(built) => built,
            Err(err) => {
                self.heir.refuse(&format!("{err:#}")).await;
                return Err(err);
            }
        };
        for run in &server.pools {
            if let Some(c) = self
                .inheritance
                .pools
                .iter()
                .find(|c| c.name == run.pool.name)
            {
                run.pool.take_carried(c);
            }
        }
        info!(listeners, rss_kib = limits::rss_kib(), "inherited");
        self.listeners = listeners;
        Ok((server, self))
    }
}

impl Server {
    /// [`Server::run`] for the new process of a live upgrade.
    pub async fn run_inherited(
        self,
        shutdown: impl std::future::Future<Output = ()>,
        heritage: Heritage,
    ) {
        self.serve(shutdown, Some(heritage)).await;
    }

    /// This process serves: take the running process's connections, then
    /// tell systemd and the running process (which then exits) that it is
    /// done. A failure here leaves the running process to take them back.
    pub(super) async fn take_connections(&mut self, heritage: Heritage) {
        let Heritage {
            heir,
            started,
            listeners,
            ..
        } = heritage;
        let mut adopted = 0;
        let result: std::io::Result<()> = async {
            heir.ready().await?;
            loop {
                match heir.next().await? {
                    Ok(batch) => {
                        let frozen = batch.into_iter().map(|(meta, client, backend)| Frozen {
                            meta,
                            client: client.into(),
                            backend_socket: backend.into(),
                        });
                        adopted += self.resume_all(frozen);
                    }
                    Err(sent) => {
                        if sent.connections != adopted {
                            warn!(sent = sent.connections, adopted, "adopted_fewer");
                        }
                        for run in &self.pools {
                            run.pool.recheck_drains();
                        }
                        notify::main_pid();
                        return heir.adopted(sent.connections).await;
                    }
                }
            }
        }
        .await;
        match result {
            Ok(()) => info!(
                generation = self.generation,
                listeners,
                connections = adopted,
                duration_ms = started.elapsed().as_millis() as u64,
                rss_kib = limits::rss_kib(),
                "adopted"
            ),
            Err(err) => warn!(connections = adopted, err = %err, "adopt_failed"),
        }
    }

    /// Splice `frozen` connections on, spread over the data workers;
    /// returns how many were resumed (one whose pool is gone is closed).
    pub(super) fn resume_all(&self, frozen: impl IntoIterator<Item = Frozen>) -> usize {
        let mut resumed = 0;
        for f in frozen {
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
            let slots = &self.shared.slots;
            // It held a slot in the old process: it must not be refused one here.
            let slot = match slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    slots.add_permits(1);
                    match slots.clone().try_acquire_owned() {
                        Ok(slot) => slot,
                        Err(_) => continue,
                    }
                }
            };
            let freezer = self.shared.freezer.clone();
            let Some(task) = session::resume(run.pool.clone(), f, slot, freezer) else {
                continue;
            };
            let worker = self.workers.handle(resumed);
            worker.spawn(self.shared.tracker.track_future(task));
            resumed += 1;
        }
        resumed
    }
}
