//! No secret from a `probe_url` (userinfo, query) reaches a log line, an
//! error, `/status`, `/metrics` or `check`'s output.

use std::time::Duration;

use crate::support::admin_http;
use crate::support::nodes::{Node, refused_addr};
use crate::support::proxy::{Proxy, binary};

const T: Duration = Duration::from_secs(10);
const SECRETS: [&str; 3] = ["s3cretpw", "t0kenvalue", "hunter2user"];

fn assert_clean(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} leaks {secret}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_url_secrets_stay_out_of_logs_status_metrics_and_check() {
    let node = Node::hold().await;
    let url = format!(
        "http://hunter2user:s3cretpw@{}/api/?token=t0kenvalue",
        refused_addr()
    );
    let yaml = format!(
        "admin: {{ listen: 127.0.0.1:0 }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         health: {{ probe: blockbook, interval: 100ms, timeout: 300ms }}\n    \
         backends: [{{ name: bb, addr: \"{}\", probe_url: \"{url}\" }}]\n",
        node.addr
    );
    let proxy = Proxy::start(&yaml).await;
    // The REST twin refuses: the probe says unknown with a detail.
    let probe = proxy.wait_event(|e| e["message"] == "probe", T).await;
    assert_eq!(probe["outcome"], "unknown", "{probe}");
    let admin = admin_http::admin_addr(&proxy);
    let status = admin_http::request(admin, "GET", "/status").await;
    assert_eq!(status.status, 200);
    assert!(status.body.contains("\"bb\""), "{}", status.body);
    assert_clean("/status", &status.body);
    let metrics = admin_http::request(admin, "GET", "/metrics").await;
    assert_eq!(metrics.status, 200);
    assert_clean("/metrics", &metrics.body);
    // A reload that fails on this file's secret-bearing key names it masked.
    let bad = yaml.replace("probe_url: \"http://", "probe_url: \"ftp://");
    let failed = proxy.reload(&bad).await;
    assert_eq!(failed["message"], "reload_failed");
    let log: Vec<String> = proxy.events().iter().map(|e| e.to_string()).collect();
    assert_clean("the log", &log.join("\n"));
    let out = std::process::Command::new(binary())
        .args(["check", "-c"])
        .arg(proxy.config_path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "the ftp URL is invalid");
    assert_clean("check's error", &String::from_utf8_lossy(&out.stderr));
    std::fs::write(proxy.config_path(), &yaml).unwrap();
    let out = std::process::Command::new(binary())
        .args(["check", "-c"])
        .arg(proxy.config_path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("/api/"),
        "check shows the URL, masked: {shown}"
    );
    assert_clean("check's summary", &shown);
}
