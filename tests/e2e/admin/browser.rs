//! The status page in a real browser: headless Chromium ([`Chromium`])
//! loads `/` from the real binary, and the tests read what a person sees
//! (`innerText`, which leaves hidden things out) and press its buttons.
//! Skipped, after a notice, when Chromium is not installed (an error with
//! `PIN_PROXY_REQUIRE_PEERS=1`).
//!
//! The screenshot test leaves `status-page.png` (wide) and
//! `status-page-phone.png` in `$PIN_PROXY_SCREENSHOTS` when that is set;
//! `docs/status-page.png` is the wide one. A lag quarantine that ends in a
//! catch-up is in `browser_lag.rs`.

#[path = "browser_lag.rs"]
mod lag;

use std::time::SystemTime;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::admin_http::{admin_addr, backend, request, status};
use crate::support::admin_pool::T;
use crate::support::admin_wait::wait_status;
use crate::support::chromium::{Chromium, screenshot_dir};
use crate::support::dnsmasq::Dnsmasq;
use crate::support::nodes::{Node, echo_on_shared_port, refused_addr};
use crate::support::proxy::Proxy;
use crate::support::status_page::{
    PAGE, REGTEST, p2p_pool, press, result_with, row, seen, seen_until,
};
use crate::support::{pattern, within};
use pin_proxy::sim::simnode::SimNode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_every_backend_and_its_buttons_quarantine_and_release() {
    let Some(browser) = Chromium::start().await else {
        return;
    };
    let (a, spare, s) = (Node::echo().await, Node::echo().await, Node::echo().await);
    let (gone, flaky) = (refused_addr(), refused_addr());
    // Pool `slow` probes once, at start-up: what it shows stays until the
    // test changes it.
    let yaml = format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  \
         - name: p\n    listen: 127.0.0.1:0\n    \
           health: {{ interval: 200ms, timeout: 300ms, fall: 1, rise: 1 }}\n    backends:\n      \
           - {{ name: a, addr: \"{}\" }}\n      \
           - {{ name: spare, addr: \"{}\", backup: true }}\n      \
           - {{ name: gone, addr: \"{gone}\" }}\n  \
         - name: slow\n    listen: 127.0.0.1:0\n    \
           health: {{ interval: 1h, timeout: 300ms, fall: 2, rise: 1 }}\n    backends:\n      \
           - {{ name: s, addr: \"{}\" }}\n      \
           - {{ name: flaky, addr: \"{flaky}\" }}\n",
        a.addr, spare.addr, s.addr
    );
    let proxy = Proxy::start(&yaml).await;
    let admin = admin_addr(&proxy);
    // One client through `p`, 2 KiB each way.
    let mut client = TcpStream::connect(proxy.addr("p")).await.unwrap();
    let data = pattern(7, 2048);
    client.write_all(&data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    within("echo", PAGE, client.read_exact(&mut back))
        .await
        .unwrap();
    wait_status(admin, "gone down and flaky probed", T, |st| {
        let seen = backend(st, "p", "gone")["state"] == "down"
            && backend(st, "slow", "flaky")["bad_probes"] == 1
            && backend(st, "slow", "s")["state"] == "healthy"
            && backend(st, "p", "a")["bytes_down"] == 2048;
        seen.then_some(())
    })
    .await;

    let mut tab = browser.tab().await;
    tab.navigate(&format!("http://{admin}/")).await;
    tab.wait_for(
        "five rows",
        "document.querySelectorAll('tr.backend').length === 5",
        PAGE,
    )
    .await;
    let header = tab.eval("document.querySelector('header').innerText").await;
    let header = header.as_str().unwrap_or_default();
    assert!(
        header.contains("pid ") && header.contains("generation 0"),
        "{header}"
    );

    let r = seen_until(&mut tab, "p", "a", "r.cells.includes('2.0 KiB')").await;
    assert_eq!(r["state"], "healthy", "{r}");
    assert!(r["probe"].as_str().unwrap().starts_with("healthy"), "{r}");
    let r = seen(&mut tab, "p", "spare").await;
    assert_eq!(
        (&r["name"], &r["backup"]),
        (&json!("spare"), &json!(true)),
        "{r}"
    );
    let r = seen(&mut tab, "p", "a").await;
    assert_eq!(
        (&r["name"], &r["backup"]),
        (&json!("a"), &json!(false)),
        "{r}"
    );
    let r = seen_until(&mut tab, "p", "gone", "r.state === 'down'").await;
    assert!(r["probe"].as_str().unwrap().starts_with("down"), "{r}");
    assert!(
        r["quarantine"]
            .as_str()
            .unwrap()
            .starts_with("down · until"),
        "{r}"
    );
    // A bad verdict short of `fall` shows as such, not as plain unknown.
    let r = seen(&mut tab, "slow", "flaky").await;
    assert_eq!(r["state"], "unknown (1 of 2 failed probes)", "{r}");

    // Quarantine `a` for 5m from the page.
    let before = SystemTime::now();
    press(&mut tab, "p", "a", "quarantine", Some("5m")).await;
    let shown = result_with(&mut tab, "→ 200").await;
    assert!(shown.contains("\"reason\": \"manual\""), "{shown}");
    let r = seen_until(
        &mut tab,
        "p",
        "a",
        "r.state === 'quarantined' && /^(4m [0-9]+s|5m 0s) left$/.test(r.countdown)",
    )
    .await;
    assert!(
        r["quarantine"]
            .as_str()
            .unwrap()
            .starts_with("manual · until"),
        "{r}"
    );
    let st = status(admin).await;
    let q = &backend(&st, "p", "a")["quarantine"];
    assert_eq!(q["reason"], "manual");
    let until = humantime::parse_rfc3339(q["until"].as_str().unwrap()).unwrap();
    let window = until.duration_since(before).unwrap().as_secs();
    assert!(window.abs_diff(300) <= 2, "window {window}s");
    // The countdown runs between refreshes.
    let first = r["countdown"].as_str().unwrap().to_owned();
    seen_until(&mut tab, "p", "a", &format!("r.countdown !== {first:?}")).await;

    // A duration the endpoint refuses: its error shows.
    press(&mut tab, "p", "spare", "quarantine", Some("soon")).await;
    let shown = result_with(&mut tab, "→ 400").await;
    assert!(shown.contains("bad duration"), "{shown}");

    // Release: `a` returns once a probe passes.
    press(&mut tab, "p", "a", "release", None).await;
    let shown = result_with(&mut tab, "\"released\": true").await;
    assert!(shown.contains("→ 200"), "{shown}");
    let r = seen_until(&mut tab, "p", "a", "r.state === 'healthy'").await;
    assert_eq!(r["quarantine"], "–", "{r}");

    // Quarantine and release `s`, which is not probed again for an hour:
    // the page says it waits for its probe, not "0s left".
    press(&mut tab, "slow", "s", "quarantine", None).await;
    seen_until(&mut tab, "slow", "s", "r.state === 'quarantined'").await;
    let r = seen_until(
        &mut tab,
        "slow",
        "s",
        "/^(9m [0-9]+s|10m 0s) left$/.test(r.countdown)",
    )
    .await;
    assert!(
        r["quarantine"].as_str().unwrap().starts_with("manual"),
        "{r}"
    );
    press(&mut tab, "slow", "s", "release", None).await;
    let r = seen_until(
        &mut tab,
        "slow",
        "s",
        "r.state === 'released, awaiting probe'",
    )
    .await;
    assert_eq!(r["countdown"], "ended", "{r}");

    // Narrow as a phone: one card per backend, nothing wider than the screen.
    tab.viewport(390, 844, true).await;
    tab.wait_for(
        "the phone layout",
        "getComputedStyle(document.querySelector('thead')).display === 'none' \
         && document.documentElement.scrollWidth <= window.innerWidth",
        PAGE,
    )
    .await;
    let label = tab
        .eval(&format!(
            "getComputedStyle({}.querySelector('td.state'), '::before').content",
            row("p", "a")
        ))
        .await;
    assert_eq!(label, "\"State\"", "cells are labelled");
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshot_of_pools_in_every_state() {
    let Some(browser) = Chromium::start().await else {
        return;
    };
    let sim = |h| SimNode::start("127.0.0.1:0".parse().unwrap(), REGTEST, h);
    let (eu1, eu2, asia, spare) = (
        sim(2_794_312).await.unwrap(),
        sim(2_794_312).await.unwrap(),
        sim(2_794_301).await.unwrap(),
        sim(2_794_312).await.unwrap(),
    );
    let mut yaml = format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n{}",
        p2p_pool(&[
            ("eu-01", eu1.addr(), false),
            ("eu-02", eu2.addr(), false),
            ("asia-01", asia.addr(), false),
            ("us-01", refused_addr(), false),
            ("spare", spare.addr(), true),
        ])
    );
    // A pool with members from DNS, when dnsmasq is there to serve them,
    // probed once (at start-up, and members when found): its failing
    // backup stays one bad probe short of `fall`.
    let ips = [ip(2), ip(3), ip(4)];
    let dns = Dnsmasq::start(
        &ips.iter()
            .map(|ip| (*ip, "nodes.test".to_owned()))
            .collect::<Vec<_>>(),
        &[],
    )
    .await;
    let (_members, _static) = match &dns {
        Some(dns) => {
            let (port, members, _) = echo_on_shared_port(&ips, &[]).await;
            let local = Node::echo().await;
            yaml.push_str(&format!(
                "  - name: ltc-electrum\n    listen: 127.0.0.1:0\n    \
                 discovery: {{ interval: 1s, hold: 1m, resolver: \"{}\" }}\n    \
                 health: {{ probe: connect, interval: 1h, timeout: 300ms, fall: 2 }}\n    \
                 backends:\n      \
                 - {{ name: local, addr: \"{}\" }}\n      \
                 - {{ name: fallback, addr: \"{}\", backup: true }}\n      \
                 - {{ name: dns, discover: \"nodes.test:{port}\" }}\n",
                dns.addr(),
                local.addr,
                refused_addr(),
            ));
            (members, Some(local))
        }
        None => (Vec::new(), None),
    };
    let with_dns = dns.is_some();
    let proxy = Proxy::start(&yaml).await;
    let admin = admin_addr(&proxy);
    let p2p = |st: &Value, name: &str, state: &str| backend(st, "ltc-p2p", name)["state"] == state;
    wait_status(admin, "every node probed", T, |st| {
        let probed = ["eu-01", "eu-02", "spare"]
            .iter()
            .all(|n| p2p(st, n, "healthy"))
            && p2p(st, "us-01", "down")
            && p2p(st, "asia-01", "lagging")
            && (!with_dns
                || st["pools"][1]["backends"].as_array().is_some_and(|b| {
                    b.len() == 5 && b.iter().all(|b| b["last_probe"].is_object())
                }));
        probed.then_some(())
    })
    .await;
    let answer = request(
        admin,
        "POST",
        "/pools/ltc-p2p/backends/eu-02/quarantine?for=25m",
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    // Clients: a few idle ones on the P2P pool, echoes with traffic on the other.
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(TcpStream::connect(proxy.addr("ltc-p2p")).await.unwrap());
    }
    if with_dns {
        for i in 0..7u64 {
            let mut c = TcpStream::connect(proxy.addr("ltc-electrum"))
                .await
                .unwrap();
            let data = pattern(i, 40_000 + 150_000 * i as usize);
            c.write_all(&data).await.unwrap();
            let mut back = vec![0u8; data.len()];
            within("echo", PAGE, c.read_exact(&mut back)).await.unwrap();
            clients.push(c);
        }
    }
    wait_status(admin, "the clients placed", T, |st| {
        let placed =
            st["pools"][0]["connections"] == 5 && (!with_dns || st["pools"][1]["connections"] == 7);
        placed.then_some(())
    })
    .await;

    let mut tab = browser.tab().await;
    tab.viewport(1280, 800, false).await;
    tab.navigate(&format!("http://{admin}/")).await;
    let rows = if with_dns { 10 } else { 5 };
    tab.wait_for(
        "every row",
        &format!("document.querySelectorAll('tr.backend').length === {rows}"),
        PAGE,
    )
    .await;
    seen_until(&mut tab, "ltc-p2p", "eu-02", "/ left$/.test(r.countdown)").await;
    seen_until(&mut tab, "ltc-p2p", "us-01", "r.state === 'down'").await;
    seen_until(&mut tab, "ltc-p2p", "asia-01", "r.state === 'lagging'").await;
    if with_dns {
        let group = tab
            .wait_for(
                "the discovered group",
                "(() => { const g = document.querySelector('tbody.discovered .group-head');
                   return g && g.innerText.includes('3 members') ? g.innerText : null; })()",
                PAGE,
            )
            .await;
        assert!(
            group.as_str().unwrap().contains("discovered: dns"),
            "{group}"
        );
        seen_until(
            &mut tab,
            "ltc-electrum",
            "fallback",
            "r.state === 'unknown (1 of 2 failed probes)' && r.backup",
        )
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = screenshot_dir(dir.path());
    std::fs::create_dir_all(&out).unwrap();
    let png = tab.screenshot(&out.join("status-page.png")).await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    tab.viewport(390, 844, true).await;
    tab.wait_for(
        "the phone layout",
        "getComputedStyle(document.querySelector('thead')).display === 'none'",
        PAGE,
    )
    .await;
    let png = tab.screenshot(&out.join("status-page-phone.png")).await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");

    // A discovered member's name has a `/`: its button reaches it all the same.
    if with_dns {
        let name = tab
            .eval("document.querySelector('tbody.discovered tr.backend').dataset.backend")
            .await;
        let name = name.as_str().expect("a member row").to_owned();
        assert!(name.starts_with("dns/127.201.0."), "{name}");
        press(&mut tab, "ltc-electrum", &name, "quarantine", None).await;
        result_with(&mut tab, "→ 200").await;
        seen_until(&mut tab, "ltc-electrum", &name, "r.state === 'quarantined'").await;
        let st = status(admin).await;
        assert_eq!(
            backend(&st, "ltc-electrum", &name)["quarantine"]["reason"],
            "manual"
        );
    }
    drop(clients);
}

/// `127.201.0.<host>`: this module's block of loopback addresses.
fn ip(host: u8) -> std::net::IpAddr {
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 201, 0, host))
}
