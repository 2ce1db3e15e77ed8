//! The pool snapshot as readers outside the pool see it, with real traffic
//! through the data path: each live connection's client, start time, byte
//! counts and state, next to the backend's own counters.

use std::time::{Duration, SystemTime};

use crate::support::inproc::{Running, T};
use crate::support::nodes::Node;
use crate::support::wait_until;
use pin_proxy::inspect::ConnState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spliced_connection_shows_its_client_start_and_bytes() {
    let node = Node::echo().await;
    let proxy = Running::start(&format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    health: {{ interval: 1h }}\n    \
         backends: [{{ name: a, addr: \"{}\" }}]\n",
        node.addr
    ));
    let before = SystemTime::now();
    let mut client = proxy.client().await;
    let local = client.local_addr().unwrap();
    client.write_all(&[7u8; 1000]).await.unwrap();
    let mut echoed = [0u8; 1000];
    client.read_exact(&mut echoed).await.unwrap();

    // The proxy counts a chunk just after writing it on: wait for the count.
    let counted = || {
        let a = proxy.backend_snapshot("a");
        a.conns
            .first()
            .is_some_and(|c| (c.bytes_up, c.bytes_down) == (1000, 1000))
    };
    wait_until("bytes counted", T, counted).await;
    let a = proxy.backend_snapshot("a");
    assert_eq!(a.connections, 1);
    let conn = &a.conns[0];
    assert_eq!(conn.client, local);
    assert_eq!(conn.state, ConnState::Spliced);
    let slack = Duration::from_secs(1);
    assert!(conn.started + slack >= before, "{conn:?}");
    assert!(conn.started <= SystemTime::now(), "{conn:?}");
    assert_eq!((a.counters.bytes_up, a.counters.bytes_down), (1000, 1000));
    assert_eq!(a.counters.connections_total, 1);

    drop(client);
    wait_until("connection gone", T, || {
        proxy.backend_snapshot("a").conns.is_empty()
    })
    .await;
    let a = proxy.backend_snapshot("a");
    assert_eq!(a.connections, 0);
    assert_eq!(
        (a.counters.bytes_up, a.counters.bytes_down),
        (1000, 1000),
        "the backend keeps what its connections moved"
    );
    proxy.stop().await;
}
