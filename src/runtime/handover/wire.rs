//! The handover channel between a running process and the new process: a
//! Unix `SOCK_SEQPACKET` connection on an abstract address (no file to
//! clean up, nothing inherited), accepted only from the new process's pid.
//! A message is a tag, a body of any length and any number of file
//! descriptors (`SCM_RIGHTS`); it travels as datagrams of at most
//! [`DATAGRAM`] bytes and [`FDS_PER_DATAGRAM`] descriptors, each
//! `[tag, more]` + a slice of the body, `more` = 0 on the last.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Largest datagram, header included: well inside the default socket
/// buffer, which a datagram must fit.
pub const DATAGRAM: usize = 60 * 1024;
/// Descriptors per datagram (the kernel takes at most 253).
pub const FDS_PER_DATAGRAM: usize = 240;
/// A datagram's head: its message's tag, and whether more follow.
pub const HEAD: usize = 2;
/// Largest message body taken, so a peer that never ends its message
/// cannot make this process grow without end. Above the biggest batch of
/// connections: every pipe of the process full and a chunk held each way
/// by each of its connections, as JSON (up to 4 bytes a byte); see the
/// protocol's test.
pub const MAX_MESSAGE: usize = 256 << 20;

/// One received message.
#[derive(Debug)]
pub struct Packet {
    /// What it is.
    pub tag: u8,
    /// Its body, reassembled.
    pub body: Vec<u8>,
    /// Its descriptors, in the order sent (close-on-exec).
    pub fds: Vec<OwnedFd>,
}

/// The running process's end before the new process connects.
#[derive(Debug)]
pub struct Rendezvous {
    fd: AsyncFd<OwnedFd>,
    name: String,
}

impl Rendezvous {
    /// Listen on a fresh abstract address.
    ///
    /// # Errors
    /// The socket calls' errors.
    pub fn bind() -> io::Result<Rendezvous> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("pin-proxy-upgrade-{}-{nanos:x}", std::process::id());
        let fd = seqpacket()?;
        rustix::net::bind(&fd, &SocketAddrUnix::new_abstract_name(name.as_bytes())?)?;
        rustix::net::listen(&fd, 4)?;
        // Accepts must never block the runtime (a stranger's connection
        // is taken and dropped, then the wait goes on).
        rustix::io::ioctl_fionbio(&fd, true)?;
        Ok(Rendezvous {
            fd: register(fd, Interest::READABLE)?,
            name,
        })
    }

    /// The address to give the new process.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The first connection from process `pid`; others are closed unread.
    ///
    /// # Errors
    /// The socket calls' errors.
    pub async fn accept_from(&self, pid: u32) -> io::Result<Channel> {
        loop {
            let conn = self
                .fd
                .async_io(Interest::READABLE, |fd| {
                    Ok(rustix::net::accept_with(
                        fd,
                        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
                    )?)
                })
                .await?;
            let peer = rustix::net::sockopt::socket_peercred(&conn)?;
            if peer.pid.as_raw_nonzero().get().unsigned_abs() == pid {
                return Channel::new(conn);
            }
        }
    }
}

/// A connected handover channel.
#[derive(Debug)]
pub struct Channel {
    fd: AsyncFd<OwnedFd>,
}

impl Channel {
    /// Connect to the running process's rendezvous `name`.
    ///
    /// # Errors
    /// The socket calls' errors.
    pub fn connect(name: &str) -> io::Result<Channel> {
        let fd = seqpacket()?;
        rustix::net::connect(&fd, &SocketAddrUnix::new_abstract_name(name.as_bytes())?)?;
        Channel::new(fd)
    }

    fn new(fd: OwnedFd) -> io::Result<Channel> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        Ok(Channel {
            fd: register(fd, Interest::READABLE | Interest::WRITABLE)?,
        })
    }

    /// Send one message.
    ///
    /// # Errors
    /// The socket's errors (the peer gone: `BrokenPipe`).
    pub async fn send(&self, tag: u8, body: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let mut space =
            vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_DATAGRAM))];
        for (head, part, these) in datagrams(tag, body, fds.len()) {
            let these = &fds[these];
            let iov = [IoSlice::new(&head), IoSlice::new(part)];
            self.fd
                .async_io(Interest::WRITABLE, |fd| {
                    let mut control = SendAncillaryBuffer::new(&mut space);
                    if !these.is_empty() && !control.push(SendAncillaryMessage::ScmRights(these)) {
                        return Err(io::Error::other("descriptor batch too large"));
                    }
                    Ok(rustix::net::sendmsg(
                        fd,
                        &iov,
                        &mut control,
                        SendFlags::NOSIGNAL,
                    )?)
                })
                .await?;
        }
        Ok(())
    }

    /// Receive one message.
    ///
    /// # Errors
    /// `UnexpectedEof` when the peer has gone; `InvalidData` for a
    /// truncated or mistagged datagram; the socket's errors.
    pub async fn recv(&self) -> io::Result<Packet> {
        self.recv_within(MAX_MESSAGE).await
    }

    /// [`Channel::recv`] with a message body of at most `max` bytes.
    async fn recv_within(&self, max: usize) -> io::Result<Packet> {
        let mut buf = vec![0u8; DATAGRAM];
        let mut space =
            vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_DATAGRAM))];
        let mut assembly = Assembly::new(max);
        loop {
            let mut fds = Vec::new();
            let n = self
                .fd
                .async_io(Interest::READABLE, |fd| {
                    let mut control = RecvAncillaryBuffer::new(&mut space);
                    let mut iov = [IoSliceMut::new(&mut buf)];
                    let got =
                        rustix::net::recvmsg(fd, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
                    for msg in control.drain() {
                        if let RecvAncillaryMessage::ScmRights(received) = msg {
                            fds.extend(received);
                        }
                    }
                    if got
                        .flags
                        .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC)
                    {
                        return Err(invalid("truncated handover datagram"));
                    }
                    Ok(got.bytes)
                })
                .await?;
            if let Some(packet) = assembly.push(&buf[..n], fds)? {
                return Ok(packet);
            }
        }
    }
}

/// The datagrams of a message with `tag`, `body` and `fds` descriptors:
/// each its head (`[tag, more]`), its slice of the body and its range of
/// the descriptors. At least one, however empty the message.
pub fn datagrams(
    tag: u8,
    body: &[u8],
    fds: usize,
) -> impl Iterator<Item = ([u8; HEAD], &[u8], Range<usize>)> {
    let chunk = DATAGRAM - HEAD;
    let count = body
        .len()
        .div_ceil(chunk)
        .max(fds.div_ceil(FDS_PER_DATAGRAM))
        .max(1);
    (0..count).map(move |i| {
        let part = body.get(i * chunk..).unwrap_or_default();
        let part = &part[..part.len().min(chunk)];
        let first = (i * FDS_PER_DATAGRAM).min(fds);
        let these = first..(first + FDS_PER_DATAGRAM).min(fds);
        ([tag, u8::from(i + 1 < count)], part, these)
    })
}

/// A message being put together from its datagrams, as they arrive.
#[derive(Debug)]
pub struct Assembly {
    message: Option<Packet>,
    /// Most body bytes taken.
    max: usize,
}

impl Assembly {
    /// A message of at most `max` body bytes.
    pub fn new(max: usize) -> Assembly {
        Assembly { message: None, max }
    }

    /// Add one received datagram (its bytes, head included) and the
    /// descriptors that came with it; the message, once this was its last.
    ///
    /// # Errors
    /// `UnexpectedEof` for no bytes (the peer has gone); `InvalidData` for
    /// a datagram shorter than its head, one of another message, or a body
    /// over the limit.
    pub fn push(&mut self, datagram: &[u8], mut fds: Vec<OwnedFd>) -> io::Result<Option<Packet>> {
        let [tag, more, ref part @ ..] = *datagram else {
            return Err(match datagram.is_empty() {
                true => io::ErrorKind::UnexpectedEof.into(),
                false => invalid("short handover datagram"),
            });
        };
        let m = self.message.get_or_insert_with(|| Packet {
            tag,
            body: Vec::new(),
            fds: Vec::new(),
        });
        if m.tag != tag {
            return Err(invalid("handover message interleaved with another"));
        }
        if m.body.len() + part.len() > self.max {
            return Err(invalid("handover message larger than its limit"));
        }
        m.body.extend_from_slice(part);
        m.fds.append(&mut fds);
        if more != 0 {
            return Ok(None);
        }
        Ok(self.message.take())
    }
}

/// Register `fd` with the event loop. tokio marks its safe constructor
/// deprecated because a generic `AsRawFd` owner might close the
/// descriptor while it is registered; an `OwnedFd` moved into the
/// `AsyncFd` cannot be, and is deregistered before it is closed.
#[allow(deprecated)]
fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(fd, interest)
}

fn seqpacket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    #[tokio::test]
    async fn a_message_of_many_datagrams_arrives_whole_with_its_descriptors() {
        let rendezvous = Rendezvous::bind().unwrap();
        let client = Channel::connect(rendezvous.name()).unwrap();
        let server = rendezvous.accept_from(std::process::id()).await.unwrap();
        // 3.5 datagrams of body, 600 descriptors (three datagrams' worth).
        let body: Vec<u8> = (0..DATAGRAM * 7 / 2).map(|i| (i % 251) as u8).collect();
        let files: Vec<std::fs::File> = (0..600).map(|_| tempfile::tempfile().unwrap()).collect();
        let fds: Vec<BorrowedFd<'_>> = files.iter().map(AsFd::as_fd).collect();
        let send = client.send(b'C', &body, &fds);
        let (sent, got) = tokio::join!(send, server.recv());
        sent.unwrap();
        let got = got.unwrap();
        assert_eq!(got.tag, b'C');
        assert_eq!(got.body, body);
        assert_eq!(got.fds.len(), 600);
        // The same open files, in order: write through one, read the length of the other.
        use std::io::Write;
        let mut first = std::fs::File::from(got.fds.into_iter().next().unwrap());
        first.write_all(b"abc").unwrap();
        assert_eq!(files[0].metadata().unwrap().len(), 3);

        client.send(b'E', &[], &[]).await.unwrap();
        let end = server.recv().await.unwrap();
        assert_eq!((end.tag, end.body.len(), end.fds.len()), (b'E', 0, 0));
        drop(client);
        let gone = server.recv().await.unwrap_err();
        assert_eq!(gone.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn a_message_that_never_ends_is_refused_at_its_limit() {
        let rendezvous = Rendezvous::bind().unwrap();
        let client = Channel::connect(rendezvous.name()).unwrap();
        let server = rendezvous.accept_from(std::process::id()).await.unwrap();
        let limit = DATAGRAM * 3;
        let body = vec![7u8; limit + 1];
        let (sent, got) = tokio::join!(client.send(b'C', &body, &[]), server.recv_within(limit));
        let err = got.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert!(err.to_string().contains("larger than its limit"), "{err}");
        // The sender is left with a reader that stopped: it may or may not
        // have finished writing; either way nothing grew past the limit.
        drop(sent);
        let exact = vec![7u8; limit];
        let (sent, got) = tokio::join!(client.send(b'D', &exact, &[]), server.recv_within(limit));
        sent.unwrap();
        assert_eq!(got.unwrap().body.len(), limit);
    }

    #[tokio::test]
    async fn a_connection_from_another_process_is_not_taken() {
        let rendezvous = Rendezvous::bind().unwrap();
        let _ours = Channel::connect(rendezvous.name()).unwrap();
        let wrong_pid = std::process::id() + 1;
        let accepted = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            rendezvous.accept_from(wrong_pid),
        )
        .await;
        assert!(accepted.is_err(), "no connection of that pid arrived");
    }
}
