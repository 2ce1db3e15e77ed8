//! One client seen and acted on, with real Litecoin Core nodes and P2P
//! clients: `/connections` lists who is pinned to which node (its `source`
//! is the address the node itself lists for the peer), newest first, with
//! filters, `limit` and `total`; `close` ends exactly one client while the
//! others keep answering pings; `shed` ends a backend's newest; the CLI's
//! exit codes; a listing matches across a live upgrade; the status page
//! lists a backend's connections and closes one (headless Chromium). Skips
//! when litecoind (or Chromium, HAProxy) is missing, unless
//! `PIN_PROXY_REQUIRE_PEERS=1`.

use std::net::SocketAddr;

use serde_json::Value;

use crate::support::admin_http::{admin_addr, request, request_with};
use crate::support::admin_wait::wait_connections;
use crate::support::cli::cli;
use crate::support::connections::{Fixture, T, answers_ping, list, sees_close};
use crate::support::litecoind::Litecoind;
use crate::support::proxy::Proxy;

/// The listed connections' ids, in the order listed.
fn ids(listing: &Value) -> Vec<u64> {
    listing["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["conn"].as_u64().unwrap())
        .collect()
}

/// The entry of connection `conn` in `listing`.
fn entry(listing: &Value, conn: u64) -> Value {
    listing["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["conn"] == conn)
        .cloned()
        .unwrap_or_else(|| panic!("{conn} not listed: {listing}"))
}

/// The address `node` lists for its peer announcing `agent`.
fn peer_addr(node: &Litecoind, agent: &str) -> String {
    let info: Value = serde_json::from_str(&node.call(&["getpeerinfo"])).unwrap();
    info.as_array()
        .unwrap()
        .iter()
        .find(|p| p["subver"] == agent)
        .and_then(|p| p["addr"].as_str())
        .unwrap_or_else(|| panic!("no peer {agent} on the node: {info}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_shows_who_is_pinned_where_newest_first() {
    let Some(f) = Fixture::start(2).await else {
        return;
    };
    let mut clients = Vec::new();
    for i in 0..5 {
        clients.push(f.client(&format!("/client-{i}/")).await);
    }
    // Least-used, in config order: a, b, a, b, a.
    let listing = list(f.admin, "").await;
    assert_eq!(listing["total"], 5, "{listing}");
    let mut newest_first: Vec<u64> = clients.iter().map(|(_, id)| *id).collect();
    newest_first.reverse();
    assert_eq!(ids(&listing), newest_first);
    for (i, (client, conn)) in clients.iter().enumerate() {
        let e = entry(&listing, *conn);
        let (backend, node) = if i % 2 == 0 {
            ("a", &f.nodes[0])
        } else {
            ("b", &f.nodes[1])
        };
        assert_eq!(e["pool"], "ltc", "{e}");
        assert_eq!(e["backend"], backend, "{e}");
        assert_eq!(
            e["client"],
            client.stream.local_addr().unwrap().to_string(),
            "{e}"
        );
        assert_eq!(e["via"], Value::Null, "no PROXY header: {e}");
        // The backend leg's local address is the peer the node lists.
        assert_eq!(
            e["source"],
            peer_addr(node, &format!("/client-{i}/")),
            "{e}"
        );
        assert_eq!(e["state"], "spliced", "{e}");
        // The handshake went both ways.
        assert!(e["bytes_up"].as_u64().unwrap() > 0, "{e}");
        assert!(e["bytes_down"].as_u64().unwrap() > 0, "{e}");
        assert!(e["age_s"].as_u64().unwrap() < 60, "{e}");
        assert!(e["idle_s"].as_u64().unwrap() < 60, "{e}");
        assert!(
            humantime::parse_rfc3339(e["started"].as_str().unwrap()).is_ok(),
            "{e}"
        );
        let mut keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "age_s",
                "backend",
                "bytes_down",
                "bytes_up",
                "client",
                "conn",
                "idle_s",
                "pool",
                "source",
                "started",
                "state",
                "via"
            ]
        );
    }

    // Filters, limit, total.
    let on_a = list(f.admin, "backend=a").await;
    assert_eq!(on_a["total"], 3, "{on_a}");
    assert_eq!(
        ids(&on_a),
        [newest_first[0], newest_first[2], newest_first[4]]
    );
    let on_b = list(f.admin, "pool=ltc&backend=b").await;
    assert_eq!(
        (on_b["total"].as_u64(), ids(&on_b)),
        (Some(2), vec![newest_first[1], newest_first[3]])
    );
    let two = list(f.admin, "limit=2").await;
    assert_eq!(two["total"], 5, "the total counts past the limit");
    assert_eq!(ids(&two), newest_first[..2]);
    let here = list(f.admin, "client=127.0.0.1/32&limit=10000").await;
    assert_eq!((here["total"].as_u64(), ids(&here).len()), (Some(5), 5));
    let one = clients[1].0.stream.local_addr().unwrap().ip().to_string();
    assert_eq!(list(f.admin, &format!("client={one}")).await["total"], 5);
    let elsewhere = list(f.admin, "client=10.0.0.0%2F8").await;
    assert_eq!(
        (elsewhere["total"].as_u64(), ids(&elsewhere).len()),
        (Some(0), 0)
    );

    // What is not there is 404; what cannot be read, 400.
    for (query, status) in [
        ("pool=nope", 404),
        ("backend=nope", 404),
        ("pool=ltc&backend=nope", 404),
        ("limit=0", 400),
        ("limit=10001", 400),
        ("limit=many", 400),
        ("client=300.0.0.0/8", 400),
        ("client=127.0.0.1/99", 400),
        ("sort=age", 400),
    ] {
        let answer = request(f.admin, "GET", &format!("/connections?{query}")).await;
        assert_eq!(answer.status, status, "{query}: {}", answer.body);
        assert!(!answer.error().is_empty());
    }

    // Idle time grows on a quiet client and starts again with its bytes.
    let (client, conn) = &mut clients[0];
    let quiet = wait_connections(f.admin, "", "two quiet seconds", T, |l| {
        let e = entry(l, *conn);
        (e["idle_s"].as_u64().unwrap() >= 2).then_some(e)
    })
    .await;
    assert!(answers_ping(&mut client.stream));
    let after = entry(&list(f.admin, "").await, *conn);
    assert!(after["idle_s"].as_u64().unwrap() < 2, "{after}");
    assert!(
        after["bytes_up"].as_u64() > quiet["bytes_up"].as_u64(),
        "{quiet} then {after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_ends_exactly_one_client_and_shed_a_backends_newest() {
    let Some(f) = Fixture::start(2).await else {
        return;
    };
    let mut clients = Vec::new();
    for i in 0..6 {
        clients.push(f.client(&format!("/client-{i}/")).await);
    }
    let conn_ids: Vec<u64> = clients.iter().map(|(_, id)| *id).collect();
    let id = |i: usize| conn_ids[i];

    // A page on another site cannot close or shed through a browser.
    let evil = [("Origin", "http://evil.example")];
    let path = format!("/connections/{}/close", id(2));
    let refused = request_with(f.admin, "POST", &path, &evil).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let shed = "/pools/ltc/backends/a/shed?count=1";
    let refused = request_with(f.admin, "POST", shed, &[("Sec-Fetch-Site", "cross-site")]).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(list(f.admin, "").await["total"], 6, "nothing was closed");

    // Close client 2: it sees the close, its line says admin, nobody else
    // is touched.
    let answer = request(f.admin, "POST", &path).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json(), serde_json::json!({ "closed": id(2) }));
    assert!(
        sees_close(&mut clients[2].0.stream),
        "client 2 was not closed"
    );
    let closed = f
        .proxy
        .wait_event(|e| e["message"] == "closed" && e["conn"] == id(2), T)
        .await;
    assert_eq!(closed["reason"], "admin", "{closed}");
    assert_eq!(closed["backend"], "a", "{closed}");
    for (i, (client, _)) in clients.iter_mut().enumerate() {
        if i != 2 {
            assert!(
                answers_ping(&mut client.stream),
                "client {i} after the close"
            );
        }
    }
    // Gone from the registry before its line: a second close is 404, as is
    // an id nobody has; an id that is no number is 400.
    let again = request(f.admin, "POST", &path).await;
    assert_eq!(again.status, 404, "{}", again.body);
    assert!(again.error().contains("no connection"), "{}", again.body);
    let never = request(f.admin, "POST", "/connections/999999999/close").await;
    assert_eq!(never.status, 404, "{}", never.body);
    let bad = request(f.admin, "POST", "/connections/first/close").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let get = request(f.admin, "GET", &format!("/connections/{}/close", id(3))).await;
    assert_eq!(get.status, 405, "{}", get.body);

    // Shed a's newest two: clients 4 and 0 (2 is gone); b keeps all.
    let answer = request(f.admin, "POST", "/pools/ltc/backends/a/shed?count=2").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json(), serde_json::json!({ "shed": [id(4), id(0)] }));
    for i in [4, 0] {
        assert!(sees_close(&mut clients[i].0.stream), "client {i} not shed");
        let closed = f
            .proxy
            .wait_event(|e| e["message"] == "closed" && e["conn"] == id(i), T)
            .await;
        assert_eq!(closed["reason"], "shed", "{closed}");
    }
    let event = f.proxy.wait_event(|e| e["message"] == "shed", T).await;
    assert_eq!(
        (
            &event["backend"],
            &event["connections"],
            &event["spread_ms"]
        ),
        (&Value::from("a"), &Value::from(2), &Value::from(400)),
        "{event}"
    );
    for i in [1, 3, 5] {
        assert!(
            answers_ping(&mut clients[i].0.stream),
            "client {i} after the shed"
        );
    }
    let left = list(f.admin, "").await;
    assert_eq!(ids(&left), [id(5), id(3), id(1)]);
    // A backend with nothing to shed answers an empty list; a bad count
    // is 400; an unknown backend 404.
    let none = request(f.admin, "POST", "/pools/ltc/backends/a/shed?count=3").await;
    assert_eq!(none.json(), serde_json::json!({ "shed": [] }));
    for (path, status) in [
        ("/pools/ltc/backends/a/shed?count=0", 400),
        ("/pools/ltc/backends/a/shed", 400),
        ("/pools/ltc/backends/z/shed?count=1", 404),
        ("/pools/nope/backends/a/shed?count=1", 404),
    ] {
        let answer = request(f.admin, "POST", path).await;
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commands_list_close_and_shed_with_the_contracts_exit_codes() {
    let Some(f) = Fixture::start(1).await else {
        return;
    };
    let mut clients = Vec::new();
    for i in 0..4 {
        clients.push(f.client(&format!("/client-{i}/")).await);
    }
    let admin = f.admin.to_string();

    let (code, out, err) = cli(&["connections", "--admin", &admin]).await;
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "CONN", "POOL", "CLIENT", "VIA", "BACKEND", "AGE", "IDLE", "UP", "DOWN", "STATE"
        ],
        "{out}"
    );
    assert_eq!(lines.len(), 5, "{out}");
    let first: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(first[0], clients[3].1.to_string(), "newest first: {out}");
    assert_eq!(
        first[2],
        clients[3].0.stream.local_addr().unwrap().to_string()
    );
    assert_eq!((first[3], first[4]), ("-", "a"), "{out}");
    assert_eq!(first.last(), Some(&"spliced"), "{out}");

    let (code, out, err) = cli(&["connections", "--admin", &admin, "--limit", "1"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("1 newest of 4 shown"), "{out}");
    let (code, out, err) = cli(&[
        "connections",
        "--json",
        "--admin",
        &admin,
        "--pool",
        "ltc",
        "--backend",
        "a",
        "--client",
        "127.0.0.0/8",
    ])
    .await;
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(v["total"], 4, "{v}");
    let (code, _, err) = cli(&["connections", "--admin", &admin, "--client", "nonsense"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("bad client"), "{err}");
    let (code, _, err) = cli(&["connections", "--admin", &admin, "--pool", "nope"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("no pool nope"), "{err}");

    // `close`: every id is tried; one unknown makes it exit 1.
    let known = clients[0].1.to_string();
    let (code, out, err) = cli(&["close", "--admin", &admin, &known, "999999999"]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    // What was closed on stdout, the unknown one as the error.
    assert_eq!(out, format!("connection {known} closed\n"), "{err}");
    assert_eq!(err.trim_end(), "error: no connection 999999999", "{out}");
    assert!(sees_close(&mut clients[0].0.stream));
    let other = clients[1].1.to_string();
    let (code, out, err) = cli(&["close", "--admin", &admin, &other]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("connection {other} closed\n"));
    assert!(sees_close(&mut clients[1].0.stream));
    let (code, _, _) = cli(&["close", "--admin", &admin, "x"]).await;
    assert_eq!(code, Some(1), "a usage error of close exits 1");

    // `shed`: 0 when done, 1 when refused.
    let (code, out, err) = cli(&["shed", "ltc", "a", "1", "--admin", &admin]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("shedding 1 newest") && out.contains(&clients[3].1.to_string()),
        "{out}"
    );
    assert!(sees_close(&mut clients[3].0.stream));
    assert!(answers_ping(&mut clients[2].0.stream));
    for args in [
        ["shed", "ltc", "nope", "1"],
        ["shed", "nope", "a", "1"],
        ["shed", "ltc", "a", "0"],
    ] {
        let mut args = args.to_vec();
        args.extend(["--admin", &admin]);
        let (code, _, err) = cli(&args).await;
        assert_eq!(code, Some(1), "{args:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_is_the_same_after_a_live_upgrade() {
    let Some(f) = Fixture::start(2).await else {
        return;
    };
    let mut clients = Vec::new();
    for i in 0..4 {
        clients.push(f.client(&format!("/client-{i}/")).await);
    }
    let before = list(f.admin, "").await;
    let out = tokio::process::Command::new(crate::support::proxy::binary())
        .args(["upgrade", "--admin", &f.admin.to_string()])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = list(f.admin, "").await;
    assert_eq!(after["total"], before["total"], "{before}\n{after}");
    assert_eq!(ids(&after), ids(&before));
    for id in ids(&before) {
        let (b, a) = (entry(&before, id), entry(&after, id));
        for key in [
            "pool", "backend", "client", "via", "source", "started", "state",
        ] {
            assert_eq!(b[key], a[key], "{key} of {id}: {b} then {a}");
        }
        // The counts carry over (a node may have spoken meanwhile), and so
        // does the idle time: it goes on, not from zero.
        let same_bytes = ["bytes_up", "bytes_down"].iter().all(|k| {
            assert!(a[k].as_u64() >= b[k].as_u64(), "{k} of {id}: {b} then {a}");
            a[k] == b[k]
        });
        if same_bytes {
            assert!(a["idle_s"].as_u64() >= b["idle_s"].as_u64(), "{b} then {a}");
        }
    }
    // The same connections: they still reach their nodes, and count on.
    for (client, conn) in &mut clients {
        assert!(answers_ping(&mut client.stream));
        let e = entry(&list(f.admin, "").await, *conn);
        assert!(
            e["bytes_up"].as_u64() > entry(&before, *conn)["bytes_up"].as_u64(),
            "{e}"
        );
    }
    // And a close by the id from before the upgrade reaches the client.
    let id = clients[1].1;
    let answer = request(f.admin, "POST", &format!("/connections/{id}/close")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(sees_close(&mut clients[1].0.stream));
}

/// A client behind a balancer that sends PROXY headers is listed as the
/// client the header names, `via` the balancer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_behind_haproxy_is_listed_with_its_via() {
    use crate::support::haproxy::{HaProxy, Header};
    use crate::support::nodes::Node;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = Node::echo().await;
    let proxy = Proxy::start(&format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         proxy_protocol: {{ from: [127.0.0.1/32] }}\n    backends: [{{ name: e, addr: \"{}\" }}]\n",
        node.addr
    ))
    .await;
    let Some(ha) = HaProxy::start(&[(proxy.addr("p"), Header::V2)]) else {
        return;
    };
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut client = socket.connect(ha.front(0)).await.unwrap();
    client.write_all(b"hello").await.unwrap();
    let mut back = [0u8; 5];
    tokio::time::timeout(T, client.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    let admin = admin_addr(&proxy);
    let listing = list(admin, "client=127.0.0.2").await;
    assert_eq!(listing["total"], 1, "{listing}");
    let e = &listing["connections"][0];
    assert_eq!(e["client"], client.local_addr().unwrap().to_string(), "{e}");
    let via: SocketAddr = e["via"].as_str().unwrap().parse().unwrap();
    assert_eq!(via.ip().to_string(), "127.0.0.1", "{e}");
    assert_eq!(list(admin, "client=127.0.0.1").await["total"], 0);
}
