//! `/metrics` goes on from where it stood across a live upgrade: how
//! connections ended (`pin_proxy_closed_total`) and the clients refused
//! (`pin_proxy_rejected_total`), as every backend counter does.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::admin_http::{Kind, Metrics, metrics};
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::upgrade::{Bin, T, config, upgrade_ok};

const CLOSED: (&str, &[(&str, &str)]) = (
    "pin_proxy_closed_total",
    &[
        ("pool", "p"),
        ("backend", "n0"),
        ("reason", "client_closed"),
    ],
);
const REJECTED: (&str, &[(&str, &str)]) = (
    "pin_proxy_rejected_total",
    &[("pool", "p"), ("reason", "per_source")],
);

fn counts(m: &Metrics) -> (f64, f64) {
    (
        m.value(CLOSED.0, Kind::Counter, CLOSED.1),
        m.value(REJECTED.0, Kind::Counter, REJECTED.1),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_and_rejected_counts_go_on_across_an_upgrade() {
    let node = Node::echo().await;
    let bin = Bin::new();
    let yaml = config(
        &[node.addr],
        "defaults: { max_connections_per_source: 1 }\n",
    );
    let proxy = Proxy::start_from(bin.path(), &yaml, &[]).await;
    // One client holds the address's one place; a second is refused.
    let mut held = TcpStream::connect(proxy.addr("p")).await.unwrap();
    held.write_all(b"x").await.unwrap();
    let mut got = [0u8; 1];
    held.read_exact(&mut got).await.unwrap();
    let _refused = TcpStream::connect(proxy.addr("p")).await.unwrap();
    proxy
        .wait_count(
            |e| e["message"] == "rejected" && e["reason"] == "per_source",
            1,
            T,
        )
        .await;
    drop(held);
    proxy
        .wait_count(
            |e| e["message"] == "closed" && e["reason"] == "client_closed",
            1,
            T,
        )
        .await;
    let before = counts(&metrics(proxy.admin()).await);
    assert_eq!(before, (1.0, 1.0));

    upgrade_ok(&proxy).await;
    let after = counts(&metrics(proxy.admin()).await);
    assert_eq!(
        after, before,
        "the new process counts on from the old one's"
    );
}
