//! Lying Electrum servers beside two real ElectrumX servers at height 120:
//! one replays the real header of block 100 under height 2,000,000,000,
//! one announces a forged header with valid regtest work that links to
//! nothing. One header proves nothing about its height: the proxy asks
//! for the headers behind it, and the liar's own headers (the real chain,
//! ending at 120) contradict its claim. The honest servers stay healthy
//! and keep their clients; the liar is `unhealthy`, and its clients move.
//! Skips when litecoind or ElectrumX is not installed (unless
//! `PIN_PROXY_REQUIRE_PEERS=1`).

use crate::support::electrum_liar::{ElectrumLiar, forged_header, real_headers};
use crate::support::electrumx::ElectrumX;
use crate::support::liar::{
    Clients, T, about, admin_addr, assert_untouched, backend, config, judged_contradicted,
    status_of, wait_healthy_probes, wait_live,
};
use crate::support::litecoind::Litecoind;
use crate::support::proxy::Proxy;

const LIAR: u64 = 2_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_electrum_liar_with_a_replayed_or_forged_tip_drains_no_honest_server() {
    let Some(node) = Litecoind::start(None) else {
        return;
    };
    node.mine(120);
    let servers =
        tokio::task::block_in_place(|| Some((ElectrumX::start(&node)?, ElectrumX::start(&node)?)));
    let Some((x, y)) = servers else {
        return;
    };
    let real = tokio::task::block_in_place(|| real_headers(&x, 120));
    for tip in [real[100].clone(), forged_header()] {
        let liar = ElectrumLiar::start(LIAR, tip, real.clone()).await;
        let backends = [
            backend("x", x.tcp_addr()),
            backend("y", y.tcp_addr()),
            backend("liar", liar.addr),
        ];
        let yaml = config("127.0.0.1:0", "127.0.0.1:0", "electrum", &backends);
        let proxy = Proxy::start(&yaml).await;
        let admin = admin_addr(&proxy);
        let _clients = Clients::spawn(&proxy, 6).await;
        // It serves the real chain, which ends at 120 (the headers below
        // may be known already from the honest servers' proofs).
        let why = "claimed 2000000000";
        judged_contradicted(&proxy, "liar", &["x", "y"], why);
        proxy.wait_event(about("quarantined", "liar"), T).await;
        wait_live(&proxy, &[("x", 3), ("y", 3), ("liar", 0)]).await;
        wait_healthy_probes(admin, &["x", "y"], 4).await;
        assert_untouched(&proxy, &["x", "y"]);
        let status = status_of(admin, "liar").await;
        assert_eq!(status["state"], "unhealthy", "{status}");
        for h in ["x", "y"] {
            let status = status_of(admin, h).await;
            assert_eq!(
                (&status["state"], &status["height"]),
                (&"healthy".into(), &120.into())
            );
        }
    }
}
