//! In-test backend nodes on loopback: echo, custom handlers, black holes.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

type Handler = Arc<dyn Fn(TcpStream) -> futures_boxed::BoxFuture + Send + Sync>;

mod futures_boxed {
    use std::future::Future;
    use std::pin::Pin;
    pub type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// A backend node: a listener whose connections run `handler`. Counts accepts
/// and live connections; can be stopped (listener and connections closed)
/// and started again on the same address.
pub struct Node {
    /// Its address.
    pub addr: SocketAddr,
    handler: Handler,
    accepted: Arc<AtomicUsize>,
    live: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl Node {
    /// A node whose connections each run `handler`.
    pub async fn start<F, Fut>(handler: F) -> Node
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Node::on(listener, handler)
    }

    /// A node on `addr` (a loopback address and a port chosen by the
    /// test) whose connections each run `handler`.
    ///
    /// # Errors
    /// The bind error, e.g. `AddrInUse`.
    pub async fn bind<F, Fut>(addr: SocketAddr, handler: F) -> std::io::Result<Node>
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Ok(Node::on(TcpListener::bind(addr).await?, handler))
    }

    fn on<F, Fut>(listener: TcpListener, handler: F) -> Node
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |s| Box::pin(handler(s)));
        let mut node = Node {
            addr: listener.local_addr().unwrap(),
            handler,
            accepted: Arc::default(),
            live: Arc::default(),
            stop: CancellationToken::new(),
        };
        node.serve(listener);
        node
    }

    /// A node that echoes every byte and half-closes after the client's EOF.
    pub async fn echo() -> Node {
        Node::start(echo).await
    }

    /// A node that accepts and holds connections, reading and discarding.
    pub async fn hold() -> Node {
        Node::start(|mut s: TcpStream| async move {
            let mut buf = [0u8; 4096];
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
        })
        .await
    }

    /// A node that holds connections as [`Node::hold`] does and counts
    /// apart the ones that sent a byte: clients that greet, not a probe's
    /// bare connect (a `blockbook` probe connects to the node too).
    pub async fn hold_greeted() -> (Node, Greeted) {
        let greeted = Greeted::default();
        let counts = greeted.clone();
        let node = Node::start(move |mut s: TcpStream| {
            let counts = counts.clone();
            async move {
                let mut buf = [0u8; 4096];
                if !matches!(s.read(&mut buf).await, Ok(n) if n > 0) {
                    return;
                }
                counts.ever.fetch_add(1, Ordering::SeqCst);
                let _live = Counted::up(&counts.live);
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            }
        })
        .await;
        (node, greeted)
    }

    fn serve(&mut self, listener: TcpListener) {
        let (handler, accepted, live) = (
            self.handler.clone(),
            self.accepted.clone(),
            self.live.clone(),
        );
        let stop = self.stop.clone();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    () = stop.cancelled() => return,
                    r = listener.accept() => match r { Ok((s, _)) => s, Err(_) => continue },
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                live.fetch_add(1, Ordering::SeqCst);
                let (handler, live, stop) = (handler.clone(), live.clone(), stop.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        () = stop.cancelled() => {}
                        () = handler(stream) => {}
                    }
                    live.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
    }

    /// Connections accepted since start.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Close the listener and every connection.
    pub fn stop(&mut self) {
        self.stop.cancel();
    }

    /// Listen again on the same address.
    pub async fn restart(&mut self) {
        self.stop = CancellationToken::new();
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The connections of a [`Node::hold_greeted`] node that sent a byte.
#[derive(Clone, Default)]
pub struct Greeted {
    live: Arc<AtomicUsize>,
    ever: Arc<AtomicUsize>,
}

impl Greeted {
    /// Greeted connections open now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Greeted connections since start.
    pub fn ever(&self) -> usize {
        self.ever.load(Ordering::SeqCst)
    }
}

/// One in a count while it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn up(count: &Arc<AtomicUsize>) -> Counted {
        count.fetch_add(1, Ordering::SeqCst);
        Counted(count.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A client of `addr` (a proxy in front of echo nodes) once a `ping` came
/// back through it: its backend leg is up.
pub async fn echo_client(addr: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"ping").await.unwrap();
    let mut b = [0u8; 4];
    let echoed = c.read_exact(&mut b);
    crate::support::within("echo through the proxy", Duration::from_secs(20), echoed)
        .await
        .unwrap();
    assert_eq!(&b, b"ping");
    c
}

/// Echo until EOF, then half-close.
pub async fn echo(mut s: TcpStream) {
    let (mut r, mut w) = s.split();
    if tokio::io::copy(&mut r, &mut w).await.is_ok() {
        let _ = w.shutdown().await;
    }
}

/// A loopback address that accepts no TCP handshake: a listener whose accept
/// queue is full, so the kernel drops further SYNs. Keep it alive while used.
pub struct BlackHole {
    /// Its address.
    pub addr: SocketAddr,
    _listener: socket2::Socket,
    _fillers: Vec<std::net::TcpStream>,
}

impl BlackHole {
    /// Make one and check that a connect to it really hangs.
    pub fn new() -> BlackHole {
        BlackHole::at("127.0.0.1:0".parse().unwrap())
    }

    /// As [`BlackHole::new`], on `addr` (port 0: any).
    pub fn at(addr: SocketAddr) -> BlackHole {
        use socket2::{Domain, Socket, Type};
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None).unwrap();
        sock.bind(&addr.into())
            .unwrap_or_else(|e| panic!("bind a black hole on {addr}: {e}"));
        sock.listen(0).unwrap();
        let addr = sock.local_addr().unwrap().as_socket().unwrap();
        let mut fillers = Vec::new();
        // Fill the accept queue; stop once a connect no longer completes.
        for _ in 0..8 {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(s) => fillers.push(s),
                Err(_) => {
                    return BlackHole {
                        addr,
                        _listener: sock,
                        _fillers: fillers,
                    };
                }
            }
        }
        panic!("could not fill the accept queue of {addr}");
    }
}

/// A loopback address with nothing listening (connects are refused).
pub fn refused_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Echo nodes on each of `ips` (loopback addresses), all on one port, as
/// the members of a DNS name that share a port; returns the port and the
/// nodes in the order of `ips`. `reserve` addresses get the same port bound
/// but not listening, so connects to them are refused and nothing else can
/// take them.
pub async fn echo_on_shared_port(
    ips: &[std::net::IpAddr],
    reserve: &[std::net::IpAddr],
) -> (u16, Vec<Node>, Vec<socket2::Socket>) {
    let first = *ips.first().expect("at least one address");
    for _ in 0..20 {
        let Ok(node) = Node::bind(SocketAddr::new(first, 0), echo).await else {
            continue;
        };
        let port = node.addr.port();
        let mut nodes = vec![node];
        for ip in &ips[1..] {
            match Node::bind(SocketAddr::new(*ip, port), echo).await {
                Ok(node) => nodes.push(node),
                Err(_) => break,
            }
        }
        if nodes.len() < ips.len() {
            continue;
        }
        let held: Vec<socket2::Socket> = reserve
            .iter()
            .filter_map(|ip| bound_not_listening(SocketAddr::new(*ip, port)))
            .collect();
        if held.len() == reserve.len() {
            return (port, nodes, held);
        }
    }
    panic!("no port free on all of {ips:?} and {reserve:?}");
}

/// A TCP socket bound to `addr` that never listens: connects to `addr` are
/// refused for as long as it is kept.
pub fn bound_not_listening(addr: SocketAddr) -> Option<socket2::Socket> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None).ok()?;
    sock.bind(&addr.into()).ok()?;
    Some(sock)
}
