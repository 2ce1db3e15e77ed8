//! The status page as HTTP serves it (headers, policy, nothing from
//! elsewhere), and the refusal of cross-site commands: a browser's
//! `Origin` or `Sec-Fetch-Site` from another site gets 403 and changes
//! nothing; the page's own origin and header-less clients (curl, the CLI)
//! are served.

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::support::admin_http::{backend, request, request_with, status};
use crate::support::admin_pool::two_echo;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_html_under_a_policy_that_admits_only_itself() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let page = request(admin, "GET", "/").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert!(page.body.contains("<title>pin-proxy status</title>"));

    let csp = page.header("content-security-policy").unwrap_or_default();
    let directives: Vec<&str> = csp.split(';').map(str::trim).collect();
    assert!(directives.contains(&"default-src 'none'"), "{csp}");
    assert!(directives.contains(&"connect-src 'self'"), "{csp}");
    assert!(directives.contains(&"frame-ancestors 'none'"), "{csp}");
    // The inline script and style are admitted by their hashes, and
    // nothing else is named: no host, no scheme, no 'unsafe-inline'.
    for tag in ["script", "style"] {
        let open = format!("<{tag}>");
        let start = page.body.find(&open).expect(&open) + open.len();
        let end = start + page.body[start..].find(&format!("</{tag}>")).unwrap();
        let hash = base64::engine::general_purpose::STANDARD
            .encode(Sha256::digest(&page.body.as_bytes()[start..end]));
        let want = format!("{tag}-src 'sha256-{hash}'");
        assert!(directives.contains(&want.as_str()), "{want} not in {csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert!(!csp.contains("http"), "{csp}");
    assert!(!page.body.contains("http://") && !page.body.contains("https://"));

    let head = request(admin, "HEAD", "/").await;
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    let post = request(admin, "POST", "/").await;
    assert_eq!(post.status, 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_from_another_site_are_refused_and_change_nothing() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let quarantine = "/pools/p/backends/a/quarantine?for=10m";
    let https = format!("https://{admin}");
    let foreign: [&[(&str, &str)]; 5] = [
        &[("Origin", "http://evil.example")],
        &[("Origin", "null")],
        &[("Sec-Fetch-Site", "cross-site")],
        &[("Origin", "http://127.0.0.1:1")],
        &[("Origin", &https)],
    ];
    for headers in foreign {
        for path in [
            quarantine,
            "/pools/p/backends/a/release",
            "/pools/p/backends/a/shed?count=1",
            "/connections/1/close",
            "/reload",
            "/upgrade",
            // Refused before anything about the request is judged: a bad
            // or missing parameter, an unknown name, a route that takes no
            // POST, no route at all.
            "/pools/p/backends/a/quarantine?for=bad",
            "/pools/p/backends/a/quarantine",
            "/pools/p/backends/a/shed?count=0",
            "/pools/nope/backends/a/release",
            "/connections/abc/close",
            "/healthz",
            "/nowhere",
        ] {
            let answer = request_with(admin, "POST", path, headers).await;
            assert_eq!(answer.status, 403, "{path} {headers:?}: {}", answer.body);
            assert!(
                answer.error().contains("cross-site request refused"),
                "{}",
                answer.error()
            );
        }
    }
    let a = backend(&status(admin).await, "p", "a").clone();
    assert_eq!(a["state"], "healthy", "{a}");
    assert!(a["quarantine"].is_null(), "{a}");

    // The page's own origin, as a browser sends it.
    let own = format!("http://{admin}");
    let same = [("Origin", own.as_str()), ("Sec-Fetch-Site", "same-origin")];
    let answer = request_with(admin, "POST", quarantine, &same).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["backend"]["state"], "quarantined");
    let answer = request_with(admin, "POST", "/pools/p/backends/a/release", &same).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["released"], true);

    // No browser headers at all: curl and the CLI.
    let answer = request(admin, "POST", "/pools/p/backends/b/quarantine?for=1m").await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    // Reads are not commands: a foreign Origin still reads /status (a
    // page elsewhere cannot see the answer without CORS headers).
    let read = request_with(
        admin,
        "GET",
        "/status",
        &[("Origin", "http://evil.example")],
    )
    .await;
    assert_eq!(read.status, 200);
    assert!(read.header("access-control-allow-origin").is_none());
}
