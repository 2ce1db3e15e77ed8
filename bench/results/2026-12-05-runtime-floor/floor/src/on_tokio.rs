//! The same proxy on tokio: one current-thread runtime per core, a task per
//! client, `copy_bidirectional` between the legs (it forwards each
//! half-close with `shutdown`, as the mio loop does). The distance between
//! the two is the cost of the runtime; between this and pin-proxy, the cost
//! of what pin-proxy does for each connection.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

pub fn serve(routes: &[(SocketAddr, SocketAddr)]) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(async {
        let mut accepting = Vec::new();
        for (l, b) in routes {
            let lst = TcpListener::from_std(crate::listener_std(*l)?)?;
            let backend = *b;
            accepting.push(tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = lst.accept().await else {
                        continue;
                    };
                    tokio::spawn(splice(client, backend));
                }
            }));
        }
        for a in accepting {
            let _ = a.await;
        }
        Ok(())
    })
}

async fn splice(mut client: TcpStream, backend: SocketAddr) {
    let Ok(mut back) = connect(backend).await else {
        return;
    };
    let _ = tokio::io::copy_bidirectional(&mut client, &mut back).await;
}

async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::from_std(crate::dial(addr)?)?;
    stream.writable().await?;
    Ok(stream)
}
