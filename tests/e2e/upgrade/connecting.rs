//! A client still connecting when an upgrade begins finishes (or fails
//! over) in the old process, and meanwhile the spliced connections go on
//! moving bytes: nobody waits, frozen, for someone else's connect.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::nodes::{BlackHole, Node, echo_client};
use crate::support::proxy::Proxy;
use crate::support::upgrade::{Bin, T, echoes, upgrade};
use crate::support::within;

/// Upgrade, and once the old process waits to hand over
/// (`handover_waiting`, given to `during`), do `during`: the upgrade must
/// not end before it is done (named `what`), and must succeed after.
async fn upgrade_after<F: Future<Output = ()>>(
    proxy: &Proxy,
    what: &str,
    during: impl FnOnce(Value) -> F,
) {
    let up = upgrade(proxy);
    tokio::pin!(up);
    let waited = async {
        let waiting = proxy
            .wait_event(|e| e["message"] == "handover_waiting", T)
            .await;
        during(waiting).await;
    };
    tokio::select! {
        done = &mut up => panic!("the upgrade ended before {what}: {done:?}"),
        () = within(what, T, waited) => {}
    }
    let (code, out, err) = up.await;
    assert_eq!(code, Some(0), "upgrade failed: {out} {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spliced_connections_keep_moving_while_a_connect_finishes_in_the_old_process() {
    let node = Node::echo().await;
    let hole = BlackHole::new();
    // Pool `q`'s only backend takes no handshake: its client connects for
    // the whole connect_timeout (probes off, so nothing marks it down first).
    let yaml = format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  \
         - name: p\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
           health: {{ probe: connect, interval: 1h }}\n    \
           backends: [{{ name: n, addr: \"{}\" }}]\n  \
         - name: q\n    listen: 127.0.0.1:0\n    connect_timeout: 4s\n    \
           rebalance: {{ interval: 0s }}\n    health: {{ probe: connect, interval: 1h }}\n    \
           backends: [{{ name: h, addr: \"{}\" }}]\n",
        node.addr, hole.addr
    );
    let bin = Bin::new();
    let proxy = Proxy::start_from(bin.path(), &yaml, &[]).await;
    let mut spliced = echo_client(proxy.addr("p")).await;
    let mut connecting = TcpStream::connect(proxy.addr("q")).await.unwrap();
    proxy
        .wait_event(|e| e["message"] == "accepted" && e["pool"] == "q", T)
        .await;

    upgrade_after(&proxy, "the spliced client's echo", |_| async {
        spliced.write_all(b"during").await.unwrap();
        let mut back = [0u8; 6];
        spliced.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"during");
    })
    .await;

    // The spliced client went over to the new process and still echoes.
    spliced.write_all(b"after!").await.unwrap();
    let mut back = [0u8; 6];
    within(
        "an echo after the upgrade",
        T,
        spliced.read_exact(&mut back),
    )
    .await
    .unwrap();
    assert_eq!(&back, b"after!");
    // The pending one failed over in the old process (nowhere to go): closed.
    let mut buf = [0u8; 1];
    let read = within("the pending client closed", T, connecting.read(&mut buf)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}

/// A client from a trusted sender still sending its PROXY header when an
/// upgrade begins: the old process waits for the header, admits the
/// client and hands it over, instead of dropping it on its way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_header_still_arriving_is_waited_for_and_handed_over() {
    let node = Node::echo().await;
    let yaml = format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  \
         - name: p\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
           proxy_protocol: {{ from: [127.0.0.1/32], timeout: 20s }}\n    \
           health: {{ probe: connect, interval: 1h }}\n    \
           backends: [{{ name: n, addr: \"{}\" }}]\n",
        node.addr
    );
    let bin = Bin::new();
    let proxy = Proxy::start_from(bin.path(), &yaml, &[]).await;
    let mut c = TcpStream::connect(proxy.addr("p")).await.unwrap();
    c.write_all(b"PROXY TCP4 198.18.0.7 127.0.0.1 ")
        .await
        .unwrap();

    let rest = &mut c;
    upgrade_after(&proxy, "the rest of the header", |waiting| async move {
        assert_eq!(waiting["connections"], 1);
        rest.write_all(b"40000 8333\r\nhello").await.unwrap();
        let mut back = [0u8; 5];
        rest.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hello");
    })
    .await;
    let accepted = proxy
        .wait_event(|e| e["message"] == "accepted" && e["via"].is_string(), T)
        .await;
    assert_eq!(accepted["client"], "198.18.0.7:40000");

    echoes(&mut c, b"after").await;
}
