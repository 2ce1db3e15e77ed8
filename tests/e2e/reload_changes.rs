//! What a reload reports: `pin-proxy reload` (exit 0 with what changed, 1
//! with the error), `reloaded` naming the pools and backends added, removed
//! and changed, and list fields as JSON arrays (`reload_partial`'s `keys`).

use std::time::Duration;

use serde_json::json;

use crate::support::cli::cli;
use crate::support::nodes::Node;
use crate::support::proxy::Proxy;

const T: Duration = Duration::from_secs(10);

/// `pin-proxy reload --admin ADDR`: (exit code, stdout, stderr).
async fn reload(admin: &str) -> (Option<i32>, String, String) {
    cli(&["reload", "--admin", admin]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_says_what_changed_and_lists_are_json_arrays() {
    let (a, b, c) = (Node::echo().await, Node::echo().await, Node::echo().await);
    let config = |admin_allow: &str, pools: &str| {
        format!(
            "log: {{ level: debug, format: json }}\n\
             admin: {{ listen: 127.0.0.1:0, allow: [{admin_allow}] }}\npools:\n{pools}"
        )
    };
    let p_before = format!(
        "  - name: p\n    listen: 127.0.0.1:0\n    backends: [{{ name: a, addr: \"{}\" }}, \
         {{ name: b, addr: \"{}\" }}]\n",
        a.addr, b.addr
    );
    let q = format!(
        "  - name: q\n    listen: 127.0.0.1:0\n    backends: [\"{}\"]\n",
        c.addr
    );
    let proxy = Proxy::start(&config("127.0.0.1/32", &format!("{p_before}{q}"))).await;
    let admin = proxy.admin().to_string();

    // p loses a, gains n and b becomes a backup; q goes, r comes; the
    // admin allow-list waits for a restart.
    let p_after = format!(
        "  - name: p\n    listen: \"{}\"\n    backends: [{{ name: b, addr: \"{}\", backup: true }}, \
         {{ name: n, addr: \"{}\" }}]\n",
        proxy.addr("p"),
        b.addr,
        c.addr
    );
    let r = format!(
        "  - name: r\n    listen: 127.0.0.1:0\n    backends: [\"{}\"]\n",
        a.addr
    );
    let path = proxy.config_path().to_owned();
    let allow = "127.0.0.1/32, ::1/128";
    std::fs::write(&path, config(allow, &format!("{p_after}{r}"))).unwrap();
    let (code, out, err) = reload(&admin).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "reloaded: pools added: r; pools removed: q; pools changed: p; backends added: p/n; \
         backends removed: p/a; backends changed: p/b\n"
    );
    let done = proxy.wait_event(|e| e["message"] == "reloaded", T).await;
    assert_eq!(done["pools"], 2);
    assert_eq!(done["pools_added"], json!(["r"]), "{done}");
    assert_eq!(done["pools_removed"], json!(["q"]), "{done}");
    assert_eq!(done["pools_changed"], json!(["p"]), "{done}");
    assert_eq!(done["backends_added"], json!(["p/n"]), "{done}");
    assert_eq!(done["backends_removed"], json!(["p/a"]), "{done}");
    assert_eq!(done["backends_changed"], json!(["p/b"]), "{done}");
    let partial = proxy
        .wait_event(|e| e["message"] == "reload_partial", T)
        .await;
    assert_eq!(partial["keys"], json!(["admin.allow"]), "{partial}");

    // The same file again: nothing changes, and the lists say so.
    let (code, out, err) = reload(&admin).await;
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "reloaded: nothing changed\n"),
        "{err}"
    );
    let again = proxy
        .wait_count(|e| e["message"] == "reloaded", 2, T)
        .await
        .remove(1);
    assert_eq!(again["pools_added"], json!([]), "{again}");

    // A broken file: exit 1 with the reason; the old config runs on.
    std::fs::write(&path, "pools: [ { name: BAD } ]\n").unwrap();
    let (code, out, err) = reload(&admin).await;
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(
        err.starts_with(&format!("error: {}: pools[0]", path.display())),
        "{err}"
    );
    proxy
        .wait_event(|e| e["message"] == "reload_failed", T)
        .await;
}
