//! The running process's side of a live upgrade: start the new binary,
//! offer the handover, give it the listeners and state, wait until it
//! serves, then give it the connections. Every wait is bounded and also
//! watches the new process, so one that exits or hangs fails the upgrade
//! instead of stalling it.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::net::handover::HandedConn;
use crate::ops::control::UpgradeError;
use crate::runtime::handover::ENV;
use crate::runtime::handover::protocol::{
    self, CONNS_PER_MESSAGE, ConnMeta, Count, FORMAT, Handover, tag,
};
use crate::runtime::handover::wire::{Channel, Packet, Rendezvous};

/// Starts of a binary that is busy being written before giving up, and
/// the pause between them.
const SPAWN_TRIES: u32 = 20;
const SPAWN_PAUSE: Duration = Duration::from_millis(50);

/// A started new process and the channel to it.
pub struct OldSide {
    child: Child,
    chan: Channel,
    pid: u32,
    /// How long the current step may take, for its error.
    budget: Duration,
    /// When it must be done.
    deadline: Instant,
    /// It holds the connections it is sent until `LET_GO` (a build from
    /// before that step splices each as it arrives).
    holds: bool,
}

impl OldSide {
    /// Start `exe` with `args` and wait (at most `budget`) for it to
    /// connect.
    ///
    /// # Errors
    /// It could not be started, exited, or did not connect in time.
    pub async fn start(
        exe: &Path,
        args: &[OsString],
        budget: Duration,
    ) -> Result<OldSide, UpgradeError> {
        let deadline = Instant::now() + budget;
        let rendezvous = Rendezvous::bind().map_err(UpgradeError::Channel)?;
        let mut tries = 0;
        let mut child = loop {
            let spawned = Command::new(exe)
                .args(args)
                .env(ENV, rendezvous.name())
                // sd_notify's watchdog is for the pid systemd named; the new
                // process takes it over with MAINPID=.
                .env_remove("WATCHDOG_PID")
                .stdin(Stdio::null())
                .spawn();
            match spawned {
                // The file was just installed and is still open for writing
                // somewhere (an installer's child between fork and exec).
                Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && tries < SPAWN_TRIES => {
                    tries += 1;
                    tokio::time::sleep(SPAWN_PAUSE).await;
                }
                Err(err) => {
                    return Err(UpgradeError::Spawn {
                        path: exe.display().to_string(),
                        err,
                    });
                }
                Ok(child) => break child,
            }
        };
        let Some(pid) = child.id() else {
            return Err(exited(child.wait().await));
        };
        let accepted = tokio::select! {
            r = rendezvous.accept_from(pid) => r,
            status = child.wait() => return Err(exited(status)),
            () = tokio::time::sleep_until(deadline) => {
                kill(&mut child).await;
                return Err(UpgradeError::Timeout("connected", budget));
            }
        };
        match accepted {
            Ok(chan) => Ok(OldSide {
                child,
                chan,
                pid,
                budget,
                deadline,
                holds: false,
            }),
            Err(e) => {
                kill(&mut child).await;
                Err(UpgradeError::Channel(e))
            }
        }
    }

    /// The new process's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Offer the handover, send `handover` with the listening `sockets`,
    /// and wait until the new process serves, within the budget of
    /// [`OldSide::start`]. Nothing moves before this returns Ok: on an
    /// error the caller abandons the new process and carries on.
    ///
    /// # Errors
    /// The new process refused, exited, hung, or the channel failed.
    pub async fn prepare(
        &mut self,
        handover: &Handover,
        sockets: &[BorrowedFd<'_>],
    ) -> Result<(), UpgradeError> {
        self.send(tag::OFFER, &protocol::offer(FORMAT), &[]).await?;
        let answer = self.expect(tag::ACCEPT, "accepting").await?;
        self.holds = protocol::accept_holds(&answer.body);
        match protocol::read_accept(&answer.body) {
            Some(FORMAT) => {}
            other => {
                return Err(UpgradeError::Refused(format!(
                    "it answered format {other:?} to format {FORMAT}"
                )));
            }
        }
        let body = serde_json::to_vec(handover).map_err(|e| UpgradeError::Channel(e.into()))?;
        self.send(tag::HANDOVER, &body, sockets).await?;
        self.expect(tag::READY, "ready").await?;
        Ok(())
    }

    /// The connections start moving: from now on sending them and the new
    /// process's confirmation get `budget` in all.
    pub fn start_sending(&mut self, budget: Duration) {
        self.budget = budget;
        self.deadline = Instant::now() + budget;
    }

    /// Send `conns`, handed over, in messages of at most
    /// [`CONNS_PER_MESSAGE`]; the new process resumes each as it arrives.
    ///
    /// # Errors
    /// The new process exited or hung; the channel failed.
    pub async fn send_conns(&mut self, conns: &[HandedConn]) -> Result<(), UpgradeError> {
        for batch in conns.chunks(CONNS_PER_MESSAGE) {
            let handed: Vec<&ConnMeta> = batch.iter().map(|f| &f.meta).collect();
            let body = serde_json::to_vec(&handed).map_err(|e| UpgradeError::Channel(e.into()))?;
            let fds: Vec<BorrowedFd<'_>> = batch
                .iter()
                .flat_map(|f| [f.client.as_fd(), f.backend_socket.as_fd()])
                .collect();
            self.send(tag::CONNS, &body, &fds).await?;
        }
        Ok(())
    }

    /// Say that all `sent` connections went, wait for the new process to
    /// say it adopted them all, and let go of them: on `Ok` they are the
    /// new process's, which splices them from now on. On an error a new
    /// process that holds them (this build and later) has moved no byte on
    /// any of them: they are still this process's to splice on (once it
    /// is stopped). One of a build before may have.
    ///
    /// # Errors
    /// The new process exited, hung or miscounted; the channel failed.
    pub async fn finish(&mut self, sent: usize) -> Result<usize, UpgradeError> {
        let count = Count { connections: sent };
        let body = serde_json::to_vec(&count).map_err(|e| UpgradeError::Channel(e.into()))?;
        self.send(tag::END, &body, &[]).await?;
        let answer = self.expect(tag::ADOPTED, "done adopting").await?;
        match serde_json::from_slice::<Count>(&answer.body) {
            Ok(adopted) if adopted == count => {}
            _ => {
                return Err(UpgradeError::Refused(format!(
                    "it did not confirm the {sent} connections sent"
                )));
            }
        }
        // One datagram: either it went whole, and the connections are the
        // new process's, or it did not, and they are still ours. A build
        // that does not hold them splices them already (and closes the
        // channel now): they are its own since `ADOPTED`.
        if self.holds {
            self.send(tag::LET_GO, &[], &[]).await?;
        }
        Ok(sent)
    }

    /// Stop the new process (SIGKILL) and reap it: the upgrade failed.
    pub async fn abandon(mut self) {
        kill(&mut self.child).await;
    }

    async fn send(
        &mut self,
        tag: u8,
        body: &[u8],
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), UpgradeError> {
        tokio::select! {
            r = self.chan.send(tag, body, fds) => r.map_err(UpgradeError::Channel),
            status = self.child.wait() => Err(exited(status)),
            () = tokio::time::sleep_until(self.deadline) => {
                Err(UpgradeError::Timeout("taking the handover", self.budget))
            }
        }
    }

    /// The next message, which must be `want`: a refusal, an exit, the
    /// channel closing or the deadline fail the upgrade.
    async fn expect(&mut self, want: u8, what: &'static str) -> Result<Packet, UpgradeError> {
        let received = tokio::select! {
            r = self.chan.recv() => r,
            status = self.child.wait() => return Err(exited(status)),
            () = tokio::time::sleep_until(self.deadline) => {
                return Err(UpgradeError::Timeout(what, self.budget));
            }
        };
        match received {
            Ok(m) if m.tag == want => Ok(m),
            Ok(m) if m.tag == tag::REFUSE => Err(UpgradeError::Refused(
                String::from_utf8_lossy(&m.body).into_owned(),
            )),
            Ok(m) => Err(UpgradeError::Refused(format!(
                "unexpected message {:?} instead of {:?}",
                char::from(m.tag),
                char::from(want)
            ))),
            // It closed the channel: it is exiting; say how, if it does so soon.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                let soon = std::time::Duration::from_secs(2);
                match tokio::time::timeout(soon, self.child.wait()).await {
                    Ok(status) => Err(exited(status)),
                    Err(_) => Err(UpgradeError::Channel(e)),
                }
            }
            Err(e) => Err(UpgradeError::Channel(e)),
        }
    }
}

fn exited(status: io::Result<std::process::ExitStatus>) -> UpgradeError {
    UpgradeError::Exited(match status {
        // `run` exits 2 on an invalid config (its error is on its stderr).
        Ok(s) if s.code() == Some(2) => format!("{s}: it found the config invalid"),
        Ok(s) => s.to_string(),
        Err(e) => format!("wait: {e}"),
    })
}

async fn kill(child: &mut Child) {
    // Already gone is fine: either way it is reaped below.
    let _ = child.start_kill();
    let _ = child.wait().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::handover::wire::Rendezvous;

    /// An old side talking to a new side played by the test, with a
    /// stand-in child that lives until abandoned.
    async fn old_side(holds: bool) -> (OldSide, Channel) {
        let rendezvous = Rendezvous::bind().unwrap();
        let new = Channel::connect(rendezvous.name()).unwrap();
        let chan = rendezvous.accept_from(std::process::id()).await.unwrap();
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let pid = child.id().unwrap();
        let budget = Duration::from_secs(10);
        let old = OldSide {
            child,
            chan,
            pid,
            budget,
            deadline: Instant::now() + budget,
            holds,
        };
        (old, new)
    }

    /// A new process of a build from before `LET_GO` splices at once and
    /// closes the channel once it has adopted (a send to it then fails):
    /// the upgrade succeeded at `ADOPTED`, and nothing is sent after it.
    #[tokio::test]
    async fn a_new_process_that_does_not_hold_owns_the_connections_once_adopted() {
        let (mut old, new) = old_side(false).await;
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let fake = tokio::spawn(async move {
            let end = new.recv().await.unwrap();
            assert_eq!(end.tag, tag::END);
            new.send(tag::ADOPTED, &end.body, &[]).await.unwrap();
            finished.await.unwrap();
            // Whatever `finish` sent is here by now.
            let after = tokio::time::timeout(Duration::from_millis(100), new.recv()).await;
            assert!(after.is_err(), "sent after ADOPTED: {after:?}");
        });
        assert_eq!(old.finish(0).await.unwrap(), 0);
        done.send(()).unwrap();
        fake.await.unwrap();
        old.abandon().await;
    }

    /// One that holds gets `LET_GO` after `ADOPTED`; had it gone before
    /// that, the connections would still be the old process's.
    #[tokio::test]
    async fn a_new_process_that_holds_is_let_go_after_it_adopted() {
        let (mut old, new) = old_side(true).await;
        let fake = tokio::spawn(async move {
            let end = new.recv().await.unwrap();
            new.send(tag::ADOPTED, &end.body, &[]).await.unwrap();
            new.recv().await.unwrap().tag
        });
        assert_eq!(old.finish(0).await.unwrap(), 0);
        assert_eq!(fake.await.unwrap(), tag::LET_GO);
        old.abandon().await;

        let (mut old, new) = old_side(true).await;
        let fake = tokio::spawn(async move {
            let end = new.recv().await.unwrap();
            new.send(tag::REFUSE, b"taking the connections over: broken", &[])
                .await
                .unwrap();
            drop(end);
            new
        });
        let err = old.finish(0).await.unwrap_err();
        assert!(err.to_string().contains("broken"), "{err}");
        drop(fake.await.unwrap());
        old.abandon().await;
    }
}
