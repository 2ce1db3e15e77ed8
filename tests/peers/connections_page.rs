//! The status page's part of one client: a backend's connections listed
//! on demand in headless Chromium (the newest 100, with the count of the
//! rest), and one closed with its button: the row goes, the client sees
//! the close, the others keep their node.

use std::net::TcpStream;

use serde_json::{Value, json};

use crate::support::chromium::Chromium;
use crate::support::connections::{Fixture, T, answers_ping, sees_close};
use crate::support::status_page::{PAGE, result_with, row};

/// Script for the connections shown under the row of `pool`/`backend`.
fn conns_of(pool: &str, backend: &str) -> String {
    format!(
        "[...document.querySelectorAll('tr.conns-row')]\
         .find(r => r.dataset.pool === {pool:?} && r.dataset.backend === {backend:?})"
    )
}

/// Script: the ids listed under `ltc`/`a` once there are `n`, else null.
fn listed_ids(n: usize) -> String {
    format!(
        "(() => {{ const d = {}; if (!d) return null;
           const ids = [...d.querySelectorAll('tr.conn')].map(r => Number(r.dataset.conn));
           return ids.length === {n} ? ids : null; }})()",
        conns_of("ltc", "a")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_a_backends_connections_and_closes_one() {
    let Some(browser) = Chromium::start().await else {
        return;
    };
    let Some(f) = Fixture::start(1).await else {
        return;
    };
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(f.client(&format!("/client-{i}/")).await);
    }
    let ids: Vec<u64> = clients.iter().map(|(_, id)| *id).collect();

    let mut tab = browser.tab().await;
    tab.navigate(&format!("http://{}/", f.admin)).await;
    let button = format!("{}.querySelector('button.conns-toggle')", row("ltc", "a"));
    tab.wait_for(
        "a's count of three",
        &format!("(() => {{ const r = {}; return r && r.querySelector('button.conns-toggle').innerText.startsWith('3'); }})()", row("ltc", "a")),
        PAGE,
    )
    .await;
    assert_eq!(
        tab.eval(&format!("{button}.getAttribute('aria-expanded')"))
            .await,
        "false"
    );
    tab.eval(&format!("{button}.click()")).await;
    let listed = tab
        .wait_for("a's three connections", &listed_ids(3), PAGE)
        .await;
    assert_eq!(listed, json!([ids[2], ids[1], ids[0]]), "newest first");
    let local = clients[0].0.stream.local_addr().unwrap().to_string();
    let shown = tab
        .eval(&format!(
            "{}.querySelector('tr.conn[data-conn=\"{}\"]').innerText",
            conns_of("ltc", "a"),
            ids[0]
        ))
        .await;
    let shown = shown.as_str().unwrap_or_default();
    assert!(
        shown.contains(&local) && shown.contains("spliced"),
        "{shown}"
    );
    let note = format!(
        "{}.querySelector('.conns-note').innerText",
        conns_of("ltc", "a")
    );
    assert_eq!(tab.eval(&note).await, "3 connections");

    // Close the oldest: its row goes, its client sees the close.
    tab.eval(&format!(
        "{}.querySelector('tr.conn[data-conn=\"{}\"] button.close').click()",
        conns_of("ltc", "a"),
        ids[0]
    ))
    .await;
    let result = result_with(&mut tab, "→ 200").await;
    assert!(
        result.contains(&format!("\"closed\": {}", ids[0])),
        "{result}"
    );
    assert!(sees_close(&mut clients[0].0.stream), "not closed");
    let left = tab.wait_for("the row gone", &listed_ids(2), PAGE).await;
    assert_eq!(left, json!([ids[2], ids[1]]));
    let closed = f
        .proxy
        .wait_event(|e| e["message"] == "closed" && e["conn"] == ids[0], T)
        .await;
    assert_eq!(closed["reason"], "admin", "{closed}");
    for (client, _) in &mut clients[1..] {
        assert!(answers_ping(&mut client.stream));
    }

    // Past 100 connections the page shows the newest 100 and counts the
    // rest: raw TCP clients (the node waits a minute for their version).
    let raw: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(f.proxy.addr("ltc")).unwrap())
        .collect();
    let counted = tab
        .wait_for(
            "the newest 100 and the rest",
            &format!(
                "(() => {{ const d = {}; const n = d.querySelectorAll('tr.conn').length;
                   const t = d.querySelector('.conns-note').innerText;
                   return n === 100 && t.includes('2 more') ? t : null; }})()",
                conns_of("ltc", "a")
            ),
            PAGE,
        )
        .await;
    assert_eq!(counted, Value::from("the newest 100 shown; 2 more"));
    // Hidden again on a second press.
    tab.eval(&format!("{button}.click()")).await;
    tab.wait_for(
        "the list hidden",
        &format!("!{}", conns_of("ltc", "a")),
        PAGE,
    )
    .await;
    drop(raw);
}
