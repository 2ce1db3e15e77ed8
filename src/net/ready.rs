//! What a socket's event loop already knows about it, asked without a
//! system call: the readiness tokio holds from the events it last read
//! and has not cleared since.

use std::task::{Context, Poll, Waker};

use tokio::io::{Interest, Ready};
use tokio::net::TcpStream;

/// The readiness for `interest` the loop has seen and not yet cleared, or
/// `None` when it has seen none. Never waits: the readiness future is
/// polled once, with a waker that does nothing, and dropped. Dropping a
/// future that had to register takes the registration's waiter lock once,
/// uncontended.
///
/// Only events count for a socket registered with `from_std`, as every
/// client is; one from tokio's own `accept` starts out assumed readable
/// and writable, whatever its peer did.
pub fn seen(stream: &TcpStream, interest: Interest) -> Option<Ready> {
    let ready = std::pin::pin!(stream.ready(interest));
    match ready.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(Ok(ready)) => Some(ready),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Nothing is seen before the peer sends; once its bytes are in and
    /// the loop has read the event, they are.
    #[tokio::test]
    async fn sees_only_what_the_loop_has_read() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (ours, _) = listener.accept().unwrap();
        ours.set_nonblocking(true).unwrap();
        // Registered as the listener registers every client.
        let ours = TcpStream::from_std(ours).unwrap();
        assert!(seen(&ours, Interest::READABLE).is_none());
        peer.write_all(b"x").await.unwrap();
        // Wait for the event itself, then ask without waiting.
        ours.readable().await.unwrap();
        let ready = seen(&ours, Interest::READABLE).expect("readable once seen");
        assert!(ready.is_readable());
    }
}
