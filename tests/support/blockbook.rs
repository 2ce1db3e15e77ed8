//! A Blockbook REST twin on loopback: answers every GET with a Blockbook
//! `/api/` status body (`coin`, `inSync` and `bestHeight` as set), or, once gone,
//! refuses connections.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What the twin reports.
struct Reply {
    in_sync: AtomicBool,
    height: AtomicU64,
    coin: Mutex<String>,
}

/// A twin; stops listening when dropped or [`RestTwin::go_away`] is called.
pub struct RestTwin {
    addr: SocketAddr,
    reply: Arc<Reply>,
    gone: CancellationToken,
}

impl RestTwin {
    /// In sync, at height 500.
    pub async fn start() -> RestTwin {
        RestTwin::start_at(500).await
    }

    /// In sync, at `height`.
    pub async fn start_at(height: u64) -> RestTwin {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        RestTwin::bind(any, height).await.unwrap()
    }

    /// In sync, at `height`, on `addr`.
    ///
    /// # Errors
    /// The bind error.
    pub async fn bind(addr: SocketAddr, height: u64) -> std::io::Result<RestTwin> {
        let listener = TcpListener::bind(addr).await?;
        let twin = RestTwin {
            addr: listener.local_addr()?,
            reply: Arc::new(Reply {
                in_sync: AtomicBool::new(true),
                height: AtomicU64::new(height),
                coin: Mutex::new("Litecoin".to_owned()),
            }),
            gone: CancellationToken::new(),
        };
        let (reply, gone) = (twin.reply.clone(), twin.gone.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    () = gone.cancelled() => return,
                    r = listener.accept() => match r { Ok((s, _)) => s, Err(_) => continue },
                };
                let status = Status {
                    in_sync: reply.in_sync.load(Ordering::Relaxed),
                    height: reply.height.load(Ordering::Relaxed),
                    coin: reply.coin.lock().unwrap().clone(),
                };
                tokio::spawn(answer(stream, status));
            }
        });
        Ok(twin)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its `/api/` URL.
    pub fn url(&self) -> String {
        format!("http://{}/api/", self.addr)
    }

    /// Report `inSync` as `in_sync` from now on.
    pub fn set_in_sync(&self, in_sync: bool) {
        self.reply.in_sync.store(in_sync, Ordering::Relaxed);
    }

    /// Name `coin` as the coin it indexes from now on (`Litecoin` at start).
    pub fn set_coin(&self, coin: &str) {
        *self.reply.coin.lock().unwrap() = coin.to_owned();
    }

    /// Close the listener: the URL is unreachable from now on.
    pub fn go_away(&self) {
        self.gone.cancel();
    }
}

impl Drop for RestTwin {
    fn drop(&mut self) {
        self.gone.cancel();
    }
}

/// What one answer says.
struct Status {
    in_sync: bool,
    height: u64,
    coin: String,
}

/// Read one request head, answer with a Blockbook `/api/` status, close.
async fn answer(mut stream: TcpStream, status: Status) {
    let Status {
        in_sync,
        height,
        coin,
    } = status;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => return,
        }
    }
    let body = format!(
        "{{\"blockbook\":{{\"coin\":\"{coin}\",\"version\":\"0.4.0\",\"inSync\":{in_sync},\"bestHeight\":{height}}},\
         \"backend\":{{\"chain\":\"main\",\"blocks\":{height}}}}}"
    );
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    // The prober may have given up already; nothing to do about it here.
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
