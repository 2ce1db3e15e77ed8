//! One non-blocking read-and-forward step of a splice direction: the
//! system calls themselves. A short read clears the readiness at once,
//! and bytes from a peer that has already closed leave with `MSG_MORE`
//! so the FIN rides with them (the module docs of `splice.rs` say why).

use std::cell::RefCell;
use std::io::{self, Read};

use rustix::net::SendFlags;
use socket2::SockRef;
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::{CHUNK, Fault};
use crate::net::ready;

/// One non-blocking read-and-forward step.
pub(super) enum Forwarded {
    /// `n` bytes read and written in full, and what the reader said after
    /// them (known only when it had already closed).
    Moved(usize, Then),
    /// Bytes read but only `written` of them written: `rest` waits for the
    /// receiver. An EOF after them is read again once `rest` is written;
    /// an error (which a read reports once) ends the direction now, as it
    /// would have on the next read.
    Partial {
        written: usize,
        rest: Vec<u8>,
        then: Then,
    },
    /// Nothing read (no data after all, or interrupted); readiness is
    /// cleared where it was stale.
    Nothing,
    /// The reader sent FIN.
    Eof,
}

thread_local! {
    /// Per-worker scratch buffer: a step reads into it and writes from it
    /// without awaiting, so no connection owns a buffer unless the other
    /// side is slow (then only the unwritten rest is copied out).
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; CHUNK].into_boxed_slice());
}

/// What follows the bytes of a [`Forwarded::Moved`].
pub(super) enum Then {
    /// More may come (or nothing is known yet).
    More,
    /// The reader's FIN: the direction is over.
    Eof,
    /// The reader's error (a reset) right after those bytes.
    Failed(io::Error),
}

/// Whether `from`'s peer has already closed its side (a FIN or a reset
/// seen by the event loop), read from the readiness the loop holds: no
/// syscall. Called only while `from` is readable (its readiness not yet
/// cleared), so the answer is there at once; asking costs the
/// registration's waiter lock, which is why a step asks only after a
/// short read.
fn read_closed(from: &TcpStream) -> bool {
    ready::seen(from, Interest::READABLE).is_some_and(|r| r.is_read_closed())
}

/// Read once from `from` and write what came straight to `to`.
///
/// When `from` has already closed, a short read is followed by one
/// more read, which tells whether the bytes were the last: then they are
/// sent with `MSG_MORE`, so the FIN of the half-close that follows rides
/// in the same segment (one packet less to `to`'s peer, and one ACK less
/// back), as a peer that writes and closes at once sends them. Without a
/// close pending nothing changes: one read, one write.
pub(super) fn step(from: &TcpStream, to: &TcpStream) -> Result<Forwarded, Fault> {
    SCRATCH.with_borrow_mut(|buf| {
        let (mut short, mut closed) = (0, false);
        // A short read drained the socket: report it as `WouldBlock` so
        // `try_io` clears the readiness now (see the module docs of
        // `splice.rs`).
        let read = from.try_io(Interest::READABLE, || {
            let n = (&*SockRef::from(from)).read(buf)?;
            if n > 0 && n < buf.len() {
                short = n;
                // Asked before `try_io` clears the readiness below.
                closed = read_closed(from);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let mut n = match read {
            Ok(0) => return Ok(Forwarded::Eof),
            Ok(n) => n,
            Err(_) if short > 0 => short,
            Err(e) if is_transient(&e) => return Ok(Forwarded::Nothing),
            Err(e) => return Err((true, e)),
        };
        let mut then = Then::More;
        if closed {
            match (&*SockRef::from(from)).read(&mut buf[n..]) {
                Ok(0) => then = Then::Eof,
                Ok(more) => n += more,
                Err(e) if is_transient(&e) => {}
                Err(e) => then = Then::Failed(e),
            }
        }
        let flags = if matches!(then, Then::Eof) {
            SendFlags::MORE
        } else {
            SendFlags::empty()
        };
        let mut done = 0;
        while done < n {
            let sent = to.try_io(Interest::WRITABLE, || {
                Ok(rustix::net::send(to, &buf[done..n], flags)?)
            });
            match sent {
                Ok(0) => return Err((false, io::ErrorKind::WriteZero.into())),
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let rest = buf[done..n].to_vec();
                    return Ok(Forwarded::Partial {
                        written: done,
                        rest,
                        then,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err((false, e)),
            }
        }
        Ok(Forwarded::Moved(n, then))
    })
}

pub(super) fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}
