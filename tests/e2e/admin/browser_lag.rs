//! The status page in a real browser through a lag quarantine that ends in
//! a catch-up: simulated regtest nodes that prove their heights (as a pool
//! with a `network` needs before it judges lag), one left 9 blocks behind
//! and then brought level while its window still runs.

use crate::support::admin_http::{admin_addr, backend, status as st_now};
use crate::support::admin_pool::T;
use crate::support::admin_wait::wait_status;
use crate::support::chromium::Chromium;
use crate::support::cli::cli;
use crate::support::proxy::Proxy;
use crate::support::status_page::{REGTEST, p2p_pool, seen_until};
use pin_proxy::sim::simnode::SimNode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lag_quarantine_shows_its_cause_then_when_the_caught_up_backend_returns() {
    let Some(browser) = Chromium::start().await else {
        return;
    };
    let sim = |h| SimNode::start("127.0.0.1:0".parse().unwrap(), REGTEST, h);
    let (a, b) = (sim(100).await.unwrap(), sim(100).await.unwrap());
    // The default quarantine window (5m) outlasts the test: the catch-up
    // is seen while the window runs.
    let yaml = format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n{}",
        p2p_pool(&[("a", a.addr(), false), ("b", b.addr(), false)])
    );
    let proxy = Proxy::start(&yaml).await;
    let admin = admin_addr(&proxy);
    let of = |st: &serde_json::Value, name: &str| backend(st, "ltc-p2p", name).clone();
    wait_status(admin, "both nodes healthy at 100", T, |st| {
        let at_100 = |n: &&str| of(st, n)["state"] == "healthy" && of(st, n)["height"] == 100;
        ["a", "b"].iter().all(at_100).then_some(())
    })
    .await;
    let mut tab = browser.tab().await;
    tab.navigate(&format!("http://{admin}/")).await;
    let r = seen_until(&mut tab, "ltc-p2p", "a", "r.state === 'healthy'").await;
    // What the node told its probe, by name, under the backend's name.
    let node = r["node"].as_str().unwrap();
    assert!(node.starts_with("/pin-proxy-simnode:"), "{r}");
    assert!(node.contains("services 0x1 (network)"), "{r}");
    let protocol = of(&st_now(admin).await, "a")["node"]["protocol"].clone();
    assert!(node.contains(&format!("protocol {protocol}")), "{r}");

    // B moves 9 blocks on, with max_lag_blocks 3: A lags.
    b.set_height(109);
    let st = wait_status(admin, "a quarantined for lagging", T, |st| {
        (of(st, "a")["quarantine"]["reason"] == "lagging").then(|| st.clone())
    })
    .await;
    assert_eq!(of(&st, "a")["state"], "lagging", "{st}");
    let r = seen_until(
        &mut tab,
        "ltc-p2p",
        "a",
        "r.state === 'lagging' && r.probe.includes('9 behind')",
    )
    .await;
    let probe = r["probe"].as_str().unwrap();
    assert!(probe.starts_with("lagging"), "{r}");
    assert!(
        probe.contains("height 100, 9 behind 109 (max 3)"),
        "the cause: {r}"
    );
    assert!(
        r["quarantine"]
            .as_str()
            .unwrap()
            .starts_with("lagging · until"),
        "{r}"
    );

    // A catches up: its probes pass while its window runs.
    a.set_height(109);
    let st = wait_status(admin, "a's probe passed inside its window", T, |st| {
        let a = of(st, "a");
        (a["last_probe"]["outcome"] == "healthy" && a["quarantine"]["reason"] == "lagging")
            .then(|| st.clone())
    })
    .await;
    let until = of(&st, "a")["quarantine"]["until"].clone();
    let until = until.as_str().unwrap();
    let r = seen_until(
        &mut tab,
        "ltc-p2p",
        "a",
        "r.state.startsWith('caught up, returns at ')",
    )
    .await;
    // The time is the window's end, in the browser's own clock format.
    let shown = tab
        .eval(&format!("new Date({until:?}).toLocaleTimeString()"))
        .await;
    let shown = shown.as_str().unwrap();
    assert!(
        shown.chars().filter(|c| *c == ':').count() == 2,
        "a time: {shown}"
    );
    assert_eq!(
        r["state"],
        format!("caught up, returns at {shown}"),
        "not a bare `lagging`: {r}"
    );
    assert!(r["probe"].as_str().unwrap().starts_with("healthy"), "{r}");
    assert!(
        r["quarantine"]
            .as_str()
            .unwrap()
            .starts_with("lagging · until"),
        "still in its window: {r}"
    );
    // So does `pin-proxy status`'s table, with the same window end.
    let (code, out, err) = cli(&["status", "--admin", &admin.to_string()]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("node a: /pin-proxy-simnode:") && out.contains("services 0x1 (network)"),
        "{out}"
    );
    assert!(
        out.contains(&format!("lagging, caught up, returns at {until}")),
        "{out}"
    );
}
