//! The new process's side of a live upgrade, at the channel level: find
//! the running process, read its offer (refusing a format this build
//! cannot read before anything moves), take the handover, and later
//! receive the connections in batches.

use std::io;
use std::os::fd::OwnedFd;

use crate::runtime::handover::protocol::{self, ConnMeta, Count, FORMAT, Handover, tag};
use crate::runtime::handover::wire::{Channel, Packet};

/// The channel to the running process.
#[derive(Debug)]
pub struct NewSide {
    chan: Channel,
}

/// One received batch: each connection with its client and backend socket.
pub type Batch = Vec<(ConnMeta, OwnedFd, OwnedFd)>;

/// How the running process let go of the connections.
#[derive(Debug)]
pub enum LetGo {
    /// It said so: it has given them up and exits.
    Said,
    /// The channel closed first: it is gone.
    Gone,
}

impl NewSide {
    /// Connect to the running process's rendezvous `name`, read its offer
    /// and accept it, then receive the handover and its sockets.
    ///
    /// # Errors
    /// The channel failed, the offer was not one, or its format is not
    /// this build's (the refusal is sent first).
    pub async fn connect(name: &str) -> io::Result<(NewSide, Handover, Vec<OwnedFd>)> {
        let new_side = NewSide {
            chan: Channel::connect(name)?,
        };
        let offer = new_side.chan.recv().await?;
        let format = (offer.tag == tag::OFFER)
            .then(|| protocol::read_offer(&offer.body))
            .flatten();
        let Some(format) = format else {
            new_side
                .refuse("the first message was not a handover offer")
                .await;
            return Err(invalid(
                "the first message was not a handover offer".to_owned(),
            ));
        };
        if let Err(reason) = protocol::readable(format) {
            new_side.refuse(&reason).await;
            return Err(invalid(reason));
        }
        new_side
            .chan
            .send(tag::ACCEPT, &protocol::accept(FORMAT), &[])
            .await?;
        let Packet { body, fds, .. } = new_side.expect(tag::HANDOVER).await?;
        let handover = serde_json::from_slice(&body).map_err(|e| invalid(e.to_string()))?;
        Ok((new_side, handover, fds))
    }

    /// Tell the running process why this one will not take over; it
    /// carries on. Best effort: it learns the same from this process's exit.
    pub async fn refuse(&self, reason: &str) {
        // Failing to say why changes nothing: the exit says no.
        let _ = self.chan.send(tag::REFUSE, reason.as_bytes(), &[]).await;
    }

    /// This process serves: send the connections.
    ///
    /// # Errors
    /// The channel failed.
    pub async fn ready(&self) -> io::Result<()> {
        self.chan.send(tag::READY, &[], &[]).await
    }

    /// The next batch of connections, or the count sent once all came.
    ///
    /// # Errors
    /// The channel failed, or a message did not parse or came without
    /// its sockets.
    pub async fn next(&self) -> io::Result<Result<Batch, Count>> {
        let m = self.chan.recv().await?;
        match m.tag {
            tag::CONNS => {
                let conns: Vec<ConnMeta> =
                    serde_json::from_slice(&m.body).map_err(|e| invalid(e.to_string()))?;
                if m.fds.len() != conns.len() * 2 {
                    return Err(invalid(format!(
                        "{} connections came with {} sockets",
                        conns.len(),
                        m.fds.len()
                    )));
                }
                let mut fds = m.fds.into_iter();
                let mut batch = Vec::with_capacity(conns.len());
                for c in conns {
                    if let (Some(client), Some(backend)) = (fds.next(), fds.next()) {
                        batch.push((c, client, backend));
                    }
                }
                Ok(Ok(batch))
            }
            tag::END => serde_json::from_slice(&m.body)
                .map(Err)
                .map_err(|e| invalid(e.to_string())),
            other => Err(invalid(format!(
                "unexpected message {:?}",
                char::from(other)
            ))),
        }
    }

    /// Every connection is adopted: the running process may exit.
    ///
    /// # Errors
    /// The channel failed.
    pub async fn adopted(&self, connections: usize) -> io::Result<()> {
        let body = serde_json::to_vec(&Count { connections }).map_err(io::Error::from)?;
        self.chan.send(tag::ADOPTED, &body, &[]).await
    }

    /// Wait until the running process lets go of the connections sent:
    /// it says so (`LET_GO`, once it heard they were all adopted), or it
    /// is gone (the channel closed). Until then it may still take them
    /// back, so none of them may move a byte here. Anything else it sends
    /// meanwhile is not an answer: it either lets go or stops this process.
    pub async fn let_go(&self) -> LetGo {
        loop {
            match self.chan.recv().await {
                Ok(m) if m.tag == tag::LET_GO => return LetGo::Said,
                Ok(_) => {}
                Err(e) if is_gone(&e) => return LetGo::Gone,
                // Not a sign that it is gone: look again, unhurried.
                Err(_) => tokio::time::sleep(RECV_RETRY).await,
            }
        }
    }

    async fn expect(&self, want: u8) -> io::Result<Packet> {
        let m = self.chan.recv().await?;
        if m.tag == want {
            Ok(m)
        } else {
            Err(invalid(format!(
                "expected message {:?}, got {:?}",
                char::from(want),
                char::from(m.tag)
            )))
        }
    }
}

/// The pause before reading the channel again after an error that does
/// not say the running process is gone.
const RECV_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// The channel closed: the running process exited or was stopped (a
/// process gone with our messages unread resets it).
fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
    )
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::handover::wire::Rendezvous;

    /// A build that cannot read the offered format says so and takes nothing.
    #[tokio::test]
    async fn an_unknown_format_is_refused_before_anything_moves() {
        let rendezvous = Rendezvous::bind().unwrap();
        let name = rendezvous.name().to_owned();
        let new_side = tokio::spawn(async move { NewSide::connect(&name).await });
        let old = rendezvous.accept_from(std::process::id()).await.unwrap();
        old.send(tag::OFFER, &protocol::offer(FORMAT + 1), &[])
            .await
            .unwrap();
        let answer = old.recv().await.unwrap();
        assert_eq!(answer.tag, tag::REFUSE);
        let reason = String::from_utf8(answer.body).unwrap();
        assert!(
            reason.contains(&format!("format {}", FORMAT + 1)),
            "{reason}"
        );
        let err = new_side.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn this_builds_format_is_accepted_and_the_inheritance_read() {
        let rendezvous = Rendezvous::bind().unwrap();
        let name = rendezvous.name().to_owned();
        let new_side = tokio::spawn(async move { NewSide::connect(&name).await });
        let old = rendezvous.accept_from(std::process::id()).await.unwrap();
        old.send(tag::OFFER, &protocol::offer(FORMAT), &[])
            .await
            .unwrap();
        let answer = old.recv().await.unwrap();
        assert_eq!(answer.tag, tag::ACCEPT);
        assert_eq!(protocol::read_accept(&answer.body), Some(FORMAT));
        let handover = Handover {
            generation: 3,
            next_conn: 77,
            pools: Vec::new(),
            listeners: Vec::new(),
        };
        old.send(tag::HANDOVER, &serde_json::to_vec(&handover).unwrap(), &[])
            .await
            .unwrap();
        let (_heir, got, fds) = new_side.await.unwrap().unwrap();
        assert_eq!(got, handover);
        assert!(fds.is_empty());
    }
}
