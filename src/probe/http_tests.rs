//! Tests of the HTTP(S) probes against real loopback servers written here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::*;

const TIMEOUT: Duration = Duration::from_secs(5);

/// A trimmed but real Blockbook `/api/` answer (Litecoin).
const STATUS: &str = r#"{"blockbook":{"coin":"Litecoin","host":"ltc-bb1","version":"0.4.0",
"gitCommit":"a0960c8e","buildTime":"2024-05-02T09:13:35+00:00","syncMode":true,
"initialSync":false,"inSync":true,"bestHeight":2712345,
"lastBlockTime":"2024-06-01T12:00:00.123456789Z","inSyncMempool":true,
"lastMempoolTime":"2024-06-01T12:00:05.1Z","mempoolSize":120,"decimals":8,
"dbSize":173488717824,"about":"Blockbook - blockchain indexer for Trezor Suite"},
"backend":{"chain":"main","blocks":2712345,"headers":2712345,
"bestBlockHash":"5d5c0d5c7b7a9c3e0b1f6d3c2a1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e",
"difficulty":"31238453.12","sizeOnDisk":223488717824,"version":"210300",
"subversion":"/LitecoinCore:0.21.3/","protocolVersion":"70016"}}"#;

fn secret_url(text: &str) -> SecretUrl {
    SecretUrl(url::Url::parse(text).unwrap())
}

fn reply(status: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A node address that accepts connects (from the backlog) and says nothing.
async fn node() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// An address nothing listens on.
async fn refused_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// Reads one request head (bounded), sends it on `heads`, answers `reply`.
async fn answer<S>(mut stream: S, reply: Arc<Vec<u8>>, heads: mpsc::UnboundedSender<String>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    // The test may be gone, and a client that stopped reading early resets us.
    let _ = heads.send(String::from_utf8_lossy(&head).into_owned());
    let _ = stream.write_all(&reply).await;
    let _ = stream.shutdown().await;
}

/// A plain HTTP server answering `reply` to every request; yields each
/// request head.
async fn serve(reply: Vec<u8>) -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let reply = Arc::new(reply);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream, reply.clone(), tx.clone()));
        }
    });
    (addr, rx)
}

/// A server that accepts and reads but never answers.
async fn silent() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    addr
}

/// An https server with a fresh self-signed certificate for 127.0.0.1;
/// returns its address and the certificate (DER).
async fn serve_tls(reply: Vec<u8>) -> (SocketAddr, Vec<u8>) {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let cert_der = cert.der().to_vec();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(cert_der.clone())], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, _rx) = mpsc::unbounded_channel();
    let reply = Arc::new(reply);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, reply, tx) = (acceptor.clone(), reply.clone(), tx.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    answer(tls, reply, tx).await;
                }
            });
        }
    });
    (addr, cert_der)
}

async fn blockbook_against(reply_bytes: Vec<u8>) -> Report {
    let (_node, node_addr) = node().await;
    let (addr, _heads) = serve(reply_bytes).await;
    let url = secret_url(&format!("http://{addr}/api/"));
    HttpProber::new()
        .unwrap()
        .blockbook(&node_addr, &url, TIMEOUT)
        .await
}

fn with_sync(in_sync: &str) -> Vec<u8> {
    STATUS
        .replace(r#""inSync":true"#, &format!(r#""inSync":{in_sync}"#))
        .into_bytes()
}

/// `(inSync, bestHeight)` of a body.
fn sync_and_height(body: &[u8]) -> Result<(bool, u64), String> {
    parse_blockbook(body).map(|s| (s.in_sync, s.best_height))
}

#[test]
fn parses_a_real_status() {
    let status = parse_blockbook(STATUS.as_bytes()).unwrap();
    assert_eq!(
        status,
        BlockbookStatus {
            in_sync: true,
            best_height: 2_712_345,
            coin: Some("Litecoin".into()),
            version: Some("0.4.0".into()),
        }
    );
    assert_eq!(sync_and_height(&with_sync("false")), Ok((false, 2_712_345)));
}

#[test]
fn coin_and_version_are_read_when_they_are_strings() {
    let body = r#"{"blockbook":{"inSync":true,"bestHeight":5,"coin":7}}"#;
    let status = parse_blockbook(body.as_bytes()).unwrap();
    assert_eq!((status.coin, status.version), (None, None));
}

#[test]
fn parse_rejects_missing_fields() {
    for body in [
        r#"{}"#,
        r#"{"backend":{"blocks":5}}"#,
        r#"{"blockbook":{"bestHeight":5}}"#,
        r#"{"blockbook":{"inSync":true}}"#,
        r#"{"blockbook":null}"#,
    ] {
        let err = parse_blockbook(body.as_bytes()).unwrap_err();
        assert!(err.starts_with("bad blockbook status"), "{body}: {err}");
    }
}

#[test]
fn parse_rejects_wrong_types() {
    for body in [
        r#"{"blockbook":{"inSync":"true","bestHeight":5}}"#,
        r#"{"blockbook":{"inSync":1,"bestHeight":5}}"#,
        r#"{"blockbook":{"inSync":true,"bestHeight":"5"}}"#,
        r#"{"blockbook":{"inSync":true,"bestHeight":-1}}"#,
        r#"{"blockbook":{"inSync":true,"bestHeight":1.5}}"#,
        r#"{"blockbook":[true,5]}"#,
        r#"[{"blockbook":{"inSync":true,"bestHeight":5}}]"#,
    ] {
        assert!(parse_blockbook(body.as_bytes()).is_err(), "{body}");
    }
}

#[test]
fn parse_rejects_garbage() {
    let deep = "[".repeat(100_000);
    for body in [
        &b""[..],
        b"null",
        b"<html>502 Bad Gateway</html>",
        b"\xff\xfe\x00\x01",
        &STATUS.as_bytes()[..STATUS.len() / 2],
        deep.as_bytes(),
    ] {
        assert!(parse_blockbook(body).is_err(), "{body:?}");
    }
}

#[test]
fn parse_handles_huge_numbers() {
    let max = format!(
        r#"{{"blockbook":{{"inSync":true,"bestHeight":{}}}}}"#,
        u64::MAX
    );
    assert_eq!(sync_and_height(max.as_bytes()), Ok((true, u64::MAX)));
    for height in [
        "18446744073709551616",
        "1e30",
        "99999999999999999999999999999999",
    ] {
        let body = format!(r#"{{"blockbook":{{"inSync":true,"bestHeight":{height}}}}}"#);
        assert!(parse_blockbook(body.as_bytes()).is_err(), "{height}");
    }
}

#[test]
fn parse_error_detail_is_bounded() {
    let body = format!(r#"{{"blockbook":{{"inSync":"{}"}}}}"#, "x".repeat(10_000));
    let err = parse_blockbook(body.as_bytes()).unwrap_err();
    assert!(err.chars().count() <= MAX_DETAIL + 1, "{}", err.len());
}

#[test]
fn bad_root_certificate_is_an_error() {
    assert!(matches!(
        HttpProber::with_root_certificates(&[vec![1, 2, 3]]),
        Err(HttpProberError::Tls(_))
    ));
}

#[tokio::test]
async fn in_sync_blockbook_is_healthy_with_height() {
    let report = blockbook_against(reply("200 OK", STATUS.as_bytes())).await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    assert_eq!(report.height, Some(2_712_345));
    let facts = NodeFacts::blockbook(Some("Litecoin"), Some("0.4.0"));
    assert_eq!(report.node, Some(facts));
}

#[tokio::test]
async fn out_of_sync_blockbook_is_unhealthy_with_height() {
    let report = blockbook_against(reply("200 OK", &with_sync("false"))).await;
    assert_eq!(report.verdict, Verdict::Unhealthy, "{report:?}");
    assert_eq!(report.height, Some(2_712_345));
    assert_eq!(report.detail, "inSync false");
    // Out of sync, it still says which coin it indexes.
    assert!(report.node.is_some(), "{report:?}");
}

#[tokio::test]
async fn a_coin_name_is_kept_printable_and_bounded() {
    let coin = format!("Lite\\u0000coin{}", "x".repeat(500));
    let body = format!(r#"{{"blockbook":{{"inSync":true,"bestHeight":5,"coin":"{coin}"}}}}"#);
    let report = blockbook_against(reply("200 OK", body.as_bytes())).await;
    let Some(NodeFacts::Blockbook(facts)) = report.node else {
        panic!("{report:?}");
    };
    let coin = facts.coin.unwrap();
    assert!(coin.starts_with("Lite?coin"), "{coin}");
    assert_eq!(coin.len(), crate::pool::node::MAX_TEXT);
}

#[tokio::test]
async fn server_error_is_unknown() {
    let report = blockbook_against(reply("500 Internal Server Error", STATUS.as_bytes())).await;
    assert_eq!(report.verdict, Verdict::Unknown);
    assert_eq!(report.detail, "HTTP 500");
}

#[tokio::test]
async fn unparseable_body_is_unknown() {
    let report = blockbook_against(reply("200 OK", b"<html>hello</html>")).await;
    assert_eq!(report.verdict, Verdict::Unknown);
    assert!(
        report.detail.starts_with("bad blockbook status"),
        "{report:?}"
    );
    assert_eq!(report.height, None);
}

#[tokio::test]
async fn oversized_body_is_unknown() {
    let mut big = STATUS.as_bytes().to_vec();
    big.resize(MAX_BODY + 1, b' ');
    let report = blockbook_against(reply("200 OK", &big)).await;
    assert_eq!(report.verdict, Verdict::Unknown);
    assert!(report.detail.starts_with("body too large"), "{report:?}");
}

#[tokio::test]
async fn oversized_body_without_length_is_unknown() {
    let mut raw = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_vec();
    raw.extend_from_slice(STATUS.as_bytes());
    raw.resize(raw.len() + MAX_BODY, b' ');
    let report = blockbook_against(raw).await;
    assert_eq!(report.verdict, Verdict::Unknown);
    assert!(report.detail.starts_with("body too large"), "{report:?}");
}

#[tokio::test]
async fn redirect_is_not_followed() {
    let (target, mut target_heads) = serve(reply("200 OK", STATUS.as_bytes())).await;
    let moved = format!(
        "HTTP/1.1 301 Moved Permanently\r\nlocation: http://{target}/api/\r\n\
         content-length: 0\r\nconnection: close\r\n\r\n"
    );
    let report = blockbook_against(moved.into_bytes()).await;
    assert_eq!(report.verdict, Verdict::Unknown);
    assert!(report.detail.starts_with("HTTP 301"), "{report:?}");
    assert!(target_heads.try_recv().is_err(), "redirect was followed");
}

#[tokio::test]
async fn silent_server_is_unknown_within_timeout() {
    let (_node, node_addr) = node().await;
    let url = secret_url(&format!("http://{}/api/", silent().await));
    let started = std::time::Instant::now();
    let timeout = Duration::from_millis(300);
    let report = HttpProber::new()
        .unwrap()
        .blockbook(&node_addr, &url, timeout)
        .await;
    assert_eq!(report.verdict, Verdict::Unknown);
    assert_eq!(report.detail, "no answer within 300ms");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn refused_node_is_down_whatever_the_probe_url_says() {
    let node_addr = refused_addr().await.to_string();
    let (addr, _heads) = serve(reply("200 OK", STATUS.as_bytes())).await;
    let url = secret_url(&format!("http://{addr}/api/"));
    let prober = HttpProber::new().unwrap();
    let report = prober.blockbook(&node_addr, &url, TIMEOUT).await;
    assert_eq!(report.verdict, Verdict::Down);
    assert_eq!(report.detail, "connect refused");
    assert_eq!(
        prober.http(&node_addr, &url, TIMEOUT).await.verdict,
        Verdict::Down
    );
}

#[tokio::test]
async fn unresolvable_node_is_down() {
    let url = secret_url("http://127.0.0.1:1/api/");
    let report = HttpProber::new()
        .unwrap()
        .blockbook("no-such-node.invalid:9130", &url, Duration::from_secs(1))
        .await;
    assert_eq!(report.verdict, Verdict::Down, "{report:?}");
}

#[tokio::test]
async fn refused_probe_url_with_node_up_is_unknown() {
    let (_node, node_addr) = node().await;
    let url = secret_url(&format!("http://{}/api/", refused_addr().await));
    let report = HttpProber::new()
        .unwrap()
        .blockbook(&node_addr, &url, TIMEOUT)
        .await;
    assert_eq!(report.verdict, Verdict::Unknown);
    assert_eq!(report.detail, "connect refused");
}

#[tokio::test]
async fn userinfo_goes_out_as_basic_auth() {
    let (_node, node_addr) = node().await;
    let (addr, mut heads) = serve(reply("200 OK", STATUS.as_bytes())).await;
    let url = secret_url(&format!("http://user:s3cr%40t@{addr}/api/"));
    let report = HttpProber::new()
        .unwrap()
        .blockbook(&node_addr, &url, TIMEOUT)
        .await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    let head = heads.recv().await.unwrap();
    let auth = head
        .lines()
        .find_map(|line| line.strip_prefix("authorization: Basic "))
        .unwrap_or_else(|| panic!("no basic auth in {head}"));
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .unwrap();
    assert_eq!(decoded, b"user:s3cr@t");
    assert!(head.starts_with("GET /api/ HTTP/1.1\r\n"), "{head}");
    assert_eq!(head.matches("s3cr").count(), 0, "{head}");
}

#[tokio::test]
async fn secrets_never_appear_in_details() {
    let (_node, node_addr) = node().await;
    let (error_500, _h1) = serve(reply("500 Internal Server Error", b"s3cret t0ken")).await;
    let (hang_up, _h2) = serve(Vec::new()).await;
    let (bad_body, _h3) = serve(reply("200 OK", b"{\"blockbook\": 5}")).await;
    let targets = [
        refused_addr().await,
        error_500,
        hang_up,
        bad_body,
        silent().await,
    ];
    let prober = HttpProber::new().unwrap();
    for target in targets {
        let url = secret_url(&format!("http://user:s3cret@{target}/api/?token=t0ken"));
        let timeout = Duration::from_millis(500);
        let blockbook = prober.blockbook(&node_addr, &url, timeout).await;
        assert_eq!(blockbook.verdict, Verdict::Unknown, "{blockbook:?}");
        // The `http` probe does not read the body: `bad_body` is healthy there.
        for report in [blockbook, prober.http(&node_addr, &url, timeout).await] {
            assert!(!report.detail.contains("s3cret"), "{report:?}");
            assert!(!report.detail.contains("t0ken"), "{report:?}");
        }
    }
}

#[tokio::test]
async fn https_with_a_trusted_self_signed_cert_is_healthy() {
    let (_node, node_addr) = node().await;
    let (addr, cert) = serve_tls(reply("200 OK", STATUS.as_bytes())).await;
    let url = secret_url(&format!("https://{addr}/api/"));
    let prober = HttpProber::with_root_certificates(&[cert]).unwrap();
    let report = prober.blockbook(&node_addr, &url, TIMEOUT).await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    assert_eq!(report.height, Some(2_712_345));
}

#[tokio::test]
async fn https_with_an_untrusted_cert_is_unknown() {
    let (_node, node_addr) = node().await;
    let (addr, _cert) = serve_tls(reply("200 OK", STATUS.as_bytes())).await;
    let url = secret_url(&format!("https://{addr}/api/"));
    let report = HttpProber::new()
        .unwrap()
        .blockbook(&node_addr, &url, TIMEOUT)
        .await;
    assert_eq!(report.verdict, Verdict::Unknown);
    assert!(report.detail.starts_with("tls: "), "{report:?}");
}

#[tokio::test]
async fn http_probe_takes_any_2xx() {
    let (_node, node_addr) = node().await;
    let (addr, _heads) =
        serve(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n".to_vec()).await;
    let url = secret_url(&format!("http://{addr}/health"));
    let report = HttpProber::new()
        .unwrap()
        .http(&node_addr, &url, TIMEOUT)
        .await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    assert_eq!(report.detail, "HTTP 204");
    assert_eq!(report.height, None);
}

#[tokio::test]
async fn http_probe_404_is_unknown() {
    let (_node, node_addr) = node().await;
    let (addr, _heads) = serve(reply("404 Not Found", b"")).await;
    let url = secret_url(&format!("http://{addr}/health"));
    let report = HttpProber::new()
        .unwrap()
        .http(&node_addr, &url, TIMEOUT)
        .await;
    assert_eq!(report.verdict, Verdict::Unknown);
    assert_eq!(report.detail, "HTTP 404");
}
