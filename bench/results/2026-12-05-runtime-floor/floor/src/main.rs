//! floor: the least a byte-splicing TCP proxy does per connection.
//!
//! `floor LISTEN=BACKEND...` (`FLOOR_TOKIO=1`: the same on tokio, `on_tokio.rs`;
//! `FLOOR_KEEPALIVE=1`: clients get pin-proxy's default TCP keepalive): one thread per CPU, each with its own epoll
//! (mio) and its own `SO_REUSEPORT` listener per route, as pin-proxy's
//! workers have. Per client it makes the same socket choices as pin-proxy
//! (listener: `TCP_NODELAY` inherited, `TCP_QUICKACK` off; backend leg:
//! `TCP_NODELAY`, `TCP_QUICKACK` off before the connect, on again when the
//! client has sent nothing by the time it is connected), forwards each
//! half-close with `shutdown` and closes both sockets when both directions
//! have ended. What it leaves out is everything pin-proxy is for (choice of
//! backend, registry, counters, logs, timers, drains, upgrades) and the
//! runtime: no tasks, no wakers, no timer wheel, no `EPOLL_CTL_DEL` before
//! `close`. Its CPU per churned connection is a floor under any proxy on
//! this kernel that makes the same exchange.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

mod on_tokio;
use socket2::{Domain, Socket, Type};

// As pin-proxy: what tokio and `copy_bidirectional` allocate per
// connection costs what it costs there.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SCRATCH: usize = 16 * 1024;

fn main() {
    let routes: Vec<(SocketAddr, SocketAddr)> = std::env::args()
        .skip(1)
        .map(|a| {
            let (l, b) = a.split_once('=').expect("LISTEN=BACKEND");
            (
                l.parse().expect("listen address"),
                b.parse().expect("backend address"),
            )
        })
        .collect();
    assert!(!routes.is_empty(), "usage: floor LISTEN=BACKEND...");
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let routes = routes.clone();
            std::thread::spawn(move || {
                let served = if std::env::var_os("FLOOR_TOKIO").is_some() {
                    on_tokio::serve(&routes)
                } else {
                    serve(&routes)
                };
                if let Err(e) = served {
                    eprintln!("floor: {e}");
                    std::process::exit(1);
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

fn listener(addr: SocketAddr) -> io::Result<TcpListener> {
    listener_std(addr).map(TcpListener::from_std)
}

/// A `SO_REUSEPORT` listener, non-blocking, whose clients start with
/// `TCP_NODELAY` on and `TCP_QUICKACK` off.
fn listener_std(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking(), None)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_tcp_nodelay(true)?;
    if std::env::var_os("FLOOR_KEEPALIVE").is_some() {
        // pin-proxy's defaults (idle 60s, interval 10s, count 6), inherited
        // by every client as from pin-proxy's listeners.
        let ka = socket2::TcpKeepalive::new()
            .with_time(std::time::Duration::from_secs(60))
            .with_interval(std::time::Duration::from_secs(10))
            .with_retries(6);
        s.set_tcp_keepalive(&ka)?;
        s.set_tcp_user_timeout(Some(std::time::Duration::from_secs(120)))?;
    }
    s.bind(&addr.into())?;
    s.listen(1024)?;
    s.set_tcp_quickack(false)?;
    Ok(s.into())
}

fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    dial(addr).map(TcpStream::from_std)
}

/// A non-blocking connect to `addr` under way, made as pin-proxy makes a
/// backend leg: `TCP_NODELAY`, the handshake's last ACK held for the
/// first bytes.
fn dial(addr: SocketAddr) -> io::Result<std::net::TcpStream> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking(), None)?;
    s.set_tcp_nodelay(true)?;
    s.set_tcp_quickack(false)?;
    match s.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(115) => {} // EINPROGRESS
        Err(e) => return Err(e),
    }
    Ok(s.into())
}

/// One direction: bytes read from one leg and not yet written to the other.
#[derive(Default)]
struct Dir {
    pending: Vec<u8>,
    moved: u64,
    eof: bool,
    shut: bool,
}

struct Conn {
    legs: [TcpStream; 2],
    readable: [bool; 2],
    /// The peer's FIN (or an error) has been seen: readable for good.
    closed: [bool; 2],
    writable: [bool; 2],
    connected: bool,
    dirs: [Dir; 2], // 0: client to backend, 1: backend to client
}

const CLIENT: usize = 0;
const BACKEND: usize = 1;

enum Step {
    Go,
    Close,
}

impl Conn {
    /// Moves what can be moved in both directions; `Close` when done or broken.
    fn drive(&mut self, scratch: &mut [u8]) -> Step {
        for d in 0..2 {
            let (src, dst) = if d == 0 {
                (CLIENT, BACKEND)
            } else {
                (BACKEND, CLIENT)
            };
            if let Err(()) = self.pump(d, src, dst, scratch) {
                return Step::Close;
            }
        }
        if self.dirs[0].shut && self.dirs[1].shut {
            Step::Close
        } else {
            Step::Go
        }
    }

    fn pump(&mut self, d: usize, src: usize, dst: usize, scratch: &mut [u8]) -> Result<(), ()> {
        let dst_ready = dst == CLIENT || self.connected;
        // What waits for the destination first.
        if dst_ready && self.writable[dst] && !self.dirs[d].pending.is_empty() {
            match (&self.legs[dst]).write(&self.dirs[d].pending) {
                Ok(n) => {
                    self.dirs[d].pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable[dst] = false,
                Err(_) => return Err(()),
            }
        }
        while self.dirs[d].pending.is_empty() && self.readable[src] && !self.dirs[d].eof {
            match (&self.legs[src]).read(scratch) {
                Ok(0) => self.dirs[d].eof = true,
                Ok(n) => {
                    self.dirs[d].moved += n as u64;
                    if n < scratch.len() && !self.closed[src] {
                        self.readable[src] = false;
                    }
                    let mut off = 0;
                    if dst_ready && self.writable[dst] {
                        match (&self.legs[dst]).write(&scratch[..n]) {
                            Ok(w) => off = w,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                self.writable[dst] = false
                            }
                            Err(_) => return Err(()),
                        }
                    }
                    self.dirs[d].pending.extend_from_slice(&scratch[off..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable[src] = false,
                Err(_) => return Err(()),
            }
        }
        let other = 1 - d;
        if self.dirs[d].eof && self.dirs[d].pending.is_empty() && !self.dirs[d].shut && dst_ready {
            self.dirs[d].shut = true;
            // The other way ended already: closing sends this FIN.
            if !self.dirs[other].shut {
                self.legs[dst].shutdown(Shutdown::Write).map_err(|_| ())?;
            }
        }
        Ok(())
    }
}

fn serve(routes: &[(SocketAddr, SocketAddr)]) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut listeners = Vec::new();
    for (i, (l, b)) in routes.iter().enumerate() {
        let mut lst = listener(*l)?;
        poll.registry()
            .register(&mut lst, Token(usize::MAX - i), Interest::READABLE)?;
        listeners.push((lst, *b));
    }
    let mut conns: Slab<Conn> = Slab::with_capacity(4096);
    let mut scratch = vec![0u8; SCRATCH];
    let deregister = std::env::var_os("FLOOR_DEREGISTER").is_some();
    loop {
        match poll.poll(&mut events, None) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            let t = ev.token().0;
            if t > usize::MAX - listeners.len() {
                let (lst, backend) = &listeners[usize::MAX - t];
                loop {
                    let (client, _) = match lst.accept() {
                        Ok(c) => c,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => break,
                    };
                    let Ok(back) = connect(*backend) else {
                        continue;
                    };
                    let entry = conns.vacant_entry();
                    let key = entry.key();
                    let conn = entry.insert(Conn {
                        legs: [client, back],
                        readable: [false; 2],
                        closed: [false; 2],
                        writable: [true, false],
                        connected: false,
                        dirs: Default::default(),
                    });
                    let both = Interest::READABLE | Interest::WRITABLE;
                    let r = poll.registry();
                    if r.register(&mut conn.legs[CLIENT], Token(key * 2), both)
                        .is_err()
                        || r.register(&mut conn.legs[BACKEND], Token(key * 2 + 1), both)
                            .is_err()
                    {
                        conns.remove(key);
                    }
                }
                continue;
            }
            let (key, side) = (t / 2, t % 2);
            let Some(conn) = conns.get_mut(key) else {
                continue;
            };
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                conn.readable[side] = true;
            }
            if ev.is_read_closed() || ev.is_error() {
                conn.closed[side] = true;
            }
            if ev.is_writable() || ev.is_error() {
                conn.writable[side] = true;
                if side == BACKEND && !conn.connected {
                    conn.connected = true;
                    // A node that speaks first sees the connection at once.
                    if conn.dirs[0].moved == 0 && !conn.readable[CLIENT] {
                        let _ = socket2::SockRef::from(&conn.legs[BACKEND]).set_tcp_quickack(true);
                    }
                }
            }
            if let Step::Close = conn.drive(&mut scratch) {
                // Dropping closes both; the kernel takes them out of epoll
                // (FLOOR_DEREGISTER=1: taken out first, as tokio does).
                let mut conn = conns.remove(key);
                if deregister {
                    let _ = poll.registry().deregister(&mut conn.legs[CLIENT]);
                    let _ = poll.registry().deregister(&mut conn.legs[BACKEND]);
                }
            }
        }
    }
}
