//! Kernel pipes for `splice(2)`: a bulk direction of a splice moves its
//! bytes socket → pipe → socket inside the kernel, never copying them
//! through user space.
//!
//! A pipe is two descriptors, so they are few and lent, not owned: a
//! direction takes one when it starts moving whole buffers and gives it
//! back as soon as it goes quiet with the pipe empty, so an idle
//! connection holds none. At most [`MAX_PIPES`] exist in the process (the
//! descriptor budget counts two per connection; pipes come out of its
//! reserve); beyond that, or when the kernel refuses one, the direction
//! just keeps copying. A pipe given back is closed, not kept: an idle
//! proxy holds exactly two descriptors per connection, and a pipe costs
//! two syscalls per bulk transfer, not per buffer.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Pipes that may exist at once in the process: each is two descriptors
/// and up to [`PIPE_BYTES`] of kernel memory while full, so 64 descriptors
/// and 32 MiB at most (half the kernel's default per-user pipe quota).
pub const MAX_PIPES: usize = 32;

/// A pipe's capacity, so the most one `splice` call moves: 1 MiB, 16
/// times fewer calls than the default 64 KiB (bench/README.md, "Bulk").
pub const PIPE_BYTES: usize = 1024 * 1024;

/// Pipes that exist now.
static LIVE: AtomicUsize = AtomicUsize::new(0);

#[cfg(test)]
thread_local! {
    /// Tests of the copying path turn lending off for their thread.
    static LENDING: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
    /// Pipes lent on this thread so far.
    static LENT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Pipes lent on this thread so far (tests, on a current-thread runtime).
#[cfg(test)]
pub fn lent_here() -> usize {
    LENT.get()
}

/// Lend no pipes on this thread (`false`) or lend again: for tests of the
/// copying path, on a current-thread runtime.
#[cfg(test)]
pub fn lend_on_this_thread(on: bool) {
    LENDING.set(on);
}

/// Whether splicing is on: `PIN_PROXY_SPLICE=off` turns it off for the
/// process (every direction then copies through user space), to compare.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("PIN_PROXY_SPLICE").is_none_or(|v| v != "off"))
}

/// A pipe lent to one direction, and how many bytes sit in it.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes moved in and not yet out.
    held: usize,
    /// Its capacity.
    bytes: usize,
}

/// Make the pipe hold [`PIPE_BYTES`] if the kernel allows (an
/// unprivileged user past `/proc/sys/fs/pipe-user-pages-soft` keeps the
/// default); its capacity.
fn sized(pipe: &OwnedFd) -> usize {
    rustix::pipe::fcntl_setpipe_size(pipe, PIPE_BYTES)
        .or_else(|_| rustix::pipe::fcntl_getpipe_size(pipe))
        .unwrap_or(64 * 1024)
}

/// Lend a new pipe, within [`MAX_PIPES`]. None when splicing is off, the
/// cap is reached or the kernel refused.
pub fn take() -> Option<Pipe> {
    #[cfg(test)]
    if !LENDING.get() {
        return None;
    }
    if !enabled() {
        return None;
    }
    if LIVE.fetch_add(1, Ordering::Relaxed) >= MAX_PIPES {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    match rustix::pipe::pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC) {
        Ok((read, write)) => {
            #[cfg(test)]
            LENT.set(LENT.get() + 1);
            Some(Pipe {
                bytes: sized(&write),
                read,
                write,
                held: 0,
            })
        }
        Err(_) => {
            LIVE.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }
}

/// Give a pipe back (it is closed; bytes still in it are dropped with
/// the connection that held them).
pub fn give(pipe: Pipe) {
    drop(pipe);
}

impl Drop for Pipe {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pipe {
    /// Bytes in the pipe, read from the sender and not yet written.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Move what `from` has (up to the pipe's capacity) into the empty
    /// pipe: the bytes moved, 0 at EOF, `WouldBlock` (readiness cleared)
    /// when `from` has nothing.
    pub fn fill(&mut self, from: &TcpStream) -> io::Result<usize> {
        debug_assert_eq!(self.held, 0, "filled only when empty");
        let n = from.try_io(Interest::READABLE, || {
            Ok(rustix::pipe::splice(
                from,
                None,
                &self.write,
                None,
                self.bytes,
                SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
            )?)
        })?;
        self.held += n;
        Ok(n)
    }

    /// Write what the pipe holds to `to`: the bytes written, `WouldBlock`
    /// (readiness cleared) when `to` is full.
    pub fn drain(&mut self, to: &TcpStream) -> io::Result<usize> {
        let n = to.try_io(Interest::WRITABLE, || {
            Ok(rustix::pipe::splice(
                &self.read,
                None,
                to,
                None,
                self.held,
                SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
            )?)
        })?;
        self.held -= n.min(self.held);
        Ok(n)
    }

    /// Read what the pipe holds back into memory (for a handover, which
    /// carries unwritten bytes as data), leaving it empty.
    pub fn take_bytes(&mut self) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; self.held];
        let mut got = 0;
        while got < out.len() {
            match rustix::io::read(&self.read, &mut out[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    out.truncate(got);
                    self.held -= got;
                    return Err(e.into());
                }
            }
        }
        out.truncate(got);
        self.held -= got;
        Ok(out)
    }
}
