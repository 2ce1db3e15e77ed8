//! One direction of a splice: bytes from one socket to the other, through
//! the worker's scratch buffer or, while whole buffers move, a lent pipe;
//! the unwritten rest held while the receiver is slow; done at EOF (the
//! half-close that passes it on is `splice.rs`'s). Its state is what a
//! live upgrade carries ([`DirState`]).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use tokio::net::TcpStream;

use super::step::{Forwarded, Then, is_transient, step};
use super::{CHUNK, DirState, Fault, STEPS_PER_WAKE};
use crate::net::pipe::{self, Pipe};

/// The shared counters one direction adds its bytes to: the backend's
/// and the connection's own (read by pool snapshots), and whether the
/// connection owes an answer once it moved bytes (up: it does; down: no).
#[derive(Clone, Copy)]
pub(super) struct Totals<'a> {
    pub(super) backend: &'a AtomicU64,
    pub(super) conn: &'a AtomicU64,
    pub(super) owes: (&'a AtomicBool, bool),
}

/// One direction's state.
#[derive(Default)]
pub(super) struct Dir {
    /// Bytes written to the receiver so far.
    pub(super) moved: u64,
    /// Bytes read but not yet written while the receiver is slow; none
    /// (and no allocation) otherwise.
    pub(super) held: Option<Box<Unwritten>>,
    /// EOF read and everything before it written.
    pub(super) done: bool,
    /// Its last busy spell moved whole buffers: the next one starts
    /// through a pipe at once, without a copied buffer to find out.
    bulk: bool,
    /// Lent while the direction moves whole buffers: bytes then go
    /// socket → pipe → socket in the kernel (`splice(2)`). Given back
    /// when it goes quiet with the pipe empty.
    pub(super) pipe: Option<Box<Pipe>>,
}

impl Drop for Dir {
    fn drop(&mut self) {
        if let Some(pipe) = self.pipe.take() {
            pipe::give(*pipe);
        }
    }
}

/// The unwritten rest of one chunk.
pub(super) struct Unwritten {
    data: Vec<u8>,
    /// How much of `data` has been written.
    sent: usize,
}

impl From<DirState> for Dir {
    fn from(s: DirState) -> Dir {
        Dir {
            moved: s.moved,
            held: (!s.held.is_empty()).then(|| {
                Box::new(Unwritten {
                    data: s.held,
                    sent: 0,
                })
            }),
            done: s.done,
            bulk: false,
            pipe: None,
        }
    }
}

impl Dir {
    pub(super) fn hand_over(&mut self) -> DirState {
        let mut held = self
            .held
            .take()
            .map(|h| h.data[h.sent..].to_vec())
            .unwrap_or_default();
        if let Some(mut pipe) = self.pipe.take() {
            // Bytes in a pipe are in this process only: carried as data.
            // A pipe holding bytes can always be read, so this is whole.
            match pipe.take_bytes() {
                Ok(bytes) => held.extend_from_slice(&bytes),
                Err(e) => tracing::error!(err = %e, "pipe_read_failed"),
            }
            pipe::give(*pipe);
        }
        DirState {
            moved: self.moved,
            held,
            done: self.done,
        }
    }
}

impl Dir {
    /// Move bytes `from` → `to` until `from` would block (Pending, with the
    /// task registered on whichever socket it waits for), EOF with nothing
    /// left to write (Ready(Ok)), or an error.
    pub(super) fn pump(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
        totals: Totals<'_>,
    ) -> Poll<Result<(), Fault>> {
        if self.bulk && self.held.is_none() && self.pipe.is_none() {
            self.pipe = pipe::take().map(Box::new);
        }
        if self.pipe.is_some() {
            return self.pump_piped(cx, from, to, totals);
        }
        for _ in 0..STEPS_PER_WAKE {
            // Whatever the receiver did not take last time goes first.
            if let Some(held) = &mut self.held {
                while held.sent < held.data.len() {
                    ready!(to.poll_write_ready(cx)).map_err(|e| (false, e))?;
                    match to.try_write(&held.data[held.sent..]) {
                        Ok(0) => return Poll::Ready(Err((false, io::ErrorKind::WriteZero.into()))),
                        Ok(n) => {
                            held.sent += n;
                            Dir::add(&mut self.moved, n, totals);
                        }
                        // Readiness is cleared: the next round waits for it.
                        Err(e) if is_transient(&e) => {}
                        Err(e) => return Poll::Ready(Err((false, e))),
                    }
                }
                // Give the buffer back: an idle connection holds none.
                self.held = None;
            }
            ready!(from.poll_read_ready(cx)).map_err(|e| (true, e))?;
            match step(from, to)? {
                Forwarded::Moved(n, last) => {
                    Dir::add(&mut self.moved, n, totals);
                    match last {
                        Then::More => {}
                        Then::Eof => return Poll::Ready(Ok(())),
                        Then::Failed(e) => return Poll::Ready(Err((true, e))),
                    }
                    // A whole buffer: a bulk transfer; go on in the kernel.
                    if n == CHUNK
                        && let Some(pipe) = pipe::take()
                    {
                        self.pipe = Some(Box::new(pipe));
                        self.bulk = true;
                        return self.pump_piped(cx, from, to, totals);
                    }
                }
                Forwarded::Partial {
                    written,
                    rest,
                    then,
                } => {
                    Dir::add(&mut self.moved, written, totals);
                    if let Then::Failed(e) = then {
                        return Poll::Ready(Err((true, e)));
                    }
                    self.held = Some(Box::new(Unwritten {
                        data: rest,
                        sent: 0,
                    }));
                }
                Forwarded::Nothing => {}
                Forwarded::Eof => return Poll::Ready(Ok(())),
            }
        }
        // Busy: let the other tasks run, then carry on.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// [`Dir::pump`] through the lent pipe: empty it into `to`, fill it
    /// from `from`, again. Gives the pipe back whenever `from` has
    /// nothing and the pipe is empty, so a connection between bursts
    /// holds none; when this wake moved less than one buffer the transfer
    /// is over, and the direction copies again.
    fn pump_piped(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
        totals: Totals<'_>,
    ) -> Poll<Result<(), Fault>> {
        let Some(pipe) = self.pipe.as_mut() else {
            return Poll::Pending;
        };
        let mut woke_with = 0;
        for _ in 0..STEPS_PER_WAKE {
            while pipe.held() > 0 {
                ready!(to.poll_write_ready(cx)).map_err(|e| (false, e))?;
                match pipe.drain(to) {
                    Ok(0) => return Poll::Ready(Err((false, io::ErrorKind::WriteZero.into()))),
                    Ok(n) => {
                        woke_with += n;
                        Dir::add(&mut self.moved, n, totals);
                    }
                    Err(e) if is_transient(&e) => {}
                    Err(e) => return Poll::Ready(Err((false, e))),
                }
            }
            match from.poll_read_ready(cx) {
                Poll::Pending => {
                    self.bulk = woke_with >= CHUNK;
                    if let Some(pipe) = self.pipe.take() {
                        pipe::give(*pipe);
                    }
                    return Poll::Pending;
                }
                Poll::Ready(ready) => ready.map_err(|e| (true, e))?,
            }
            match pipe.fill(from) {
                Ok(0) => {
                    if let Some(pipe) = self.pipe.take() {
                        pipe::give(*pipe);
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(_) => {}
                Err(e) if is_transient(&e) => {}
                Err(e) => return Poll::Ready(Err((true, e))),
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Count `n` forwarded bytes: in `moved` (this direction's own) and
    /// in both shared totals.
    fn add(moved: &mut u64, n: usize, totals: Totals<'_>) {
        *moved += n as u64;
        totals.backend.fetch_add(n as u64, Ordering::Relaxed);
        totals.conn.fetch_add(n as u64, Ordering::Relaxed);
        // Written only when it flips: a bulk transfer one way stores nothing.
        let (owes, now) = totals.owes;
        if owes.load(Ordering::Relaxed) != now {
            owes.store(now, Ordering::Relaxed);
        }
    }
}
