//! Unit tests of the Electrum probe against fake servers on loopback:
//! the handshake, heights and headers, TLS, and each way a server can
//! lie or fail. Over 500 lines: 19 cases and the fake servers they share.

use std::future::Future;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::*;
use crate::config::Network;
use crate::probe::pow::params;

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(5);

/// What a fake server does with one request: the bytes to answer with
/// (maybe none), or `None` to hang up.
type Answer = Option<Vec<u8>>;

/// A fake Electrum server on loopback: every connection's requests, one
/// per line, are answered by `answer`. Returns its address and the
/// requests as they arrive.
async fn server<F>(answer: F) -> (String, mpsc::UnboundedReceiver<Value>)
where
    F: Fn(&Value) -> Answer + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(converse(stream, answer.clone(), tx.clone()));
        }
    });
    (addr, rx)
}

/// A server that runs `script` on its one connection.
async fn raw<F, Fut>(script: F) -> String
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        if let Ok((stream, _)) = listener.accept().await {
            script(stream).await;
        }
    });
    addr
}

async fn converse<S, F>(stream: S, answer: Arc<F>, seen: mpsc::UnboundedSender<Value>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: Fn(&Value) -> Answer,
{
    let mut stream = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let request: Value = serde_json::from_str(&line).unwrap();
        let reply = answer(&request);
        // The test may be gone; nothing to report then.
        let _ = seen.send(request);
        let Some(reply) = reply else { return };
        // The probe may hang up before all of a long reply is written.
        if stream.write_all(&reply).await.is_err() || stream.flush().await.is_err() {
            return;
        }
    }
}

fn line(value: &Value) -> Vec<u8> {
    let mut out = value.to_string().into_bytes();
    out.push(b'\n');
    out
}

fn result(request: &Value, result: Value) -> Answer {
    Some(line(
        &json!({"jsonrpc": "2.0", "id": request["id"], "result": result}),
    ))
}

fn method(request: &Value) -> &str {
    request["method"].as_str().unwrap()
}

/// A Litecoin regtest header whose work passes (or not).
fn mined(pass: bool) -> Header {
    let regtest = params(Network::LitecoinRegtest).unwrap();
    let mut raw = [0u8; HEADER_LEN];
    raw[..4].copy_from_slice(&0x2000_0000u32.to_le_bytes());
    raw[36..68].copy_from_slice(&[7u8; 32]);
    raw[68..72].copy_from_slice(&1_700_000_000u32.to_le_bytes());
    raw[72..76].copy_from_slice(&0x207f_ffffu32.to_le_bytes());
    for nonce in 0u32.. {
        raw[76..80].copy_from_slice(&nonce.to_le_bytes());
        let header = Header { raw };
        if regtest.check_alone(0, &header).is_ok() == pass {
            return header;
        }
    }
    unreachable!("half of all nonces pass a regtest target")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Litecoin regtest's genesis hash, as Electrum servers give it.
const REGTEST_GENESIS: &str = "530827f38f93b43ed12af0b3ad25a288dc02ed74d6d7857862df51fc56c416f9";

/// ElectrumX's answer to `server.features` on Litecoin regtest.
fn features() -> Value {
    json!({"hosts": {}, "pruning": null, "server_version": "ElectrumX 2.0.0",
           "protocol_min": "1.4", "protocol_max": "1.7", "genesis_hash": REGTEST_GENESIS,
           "hash_function": "sha256", "services": []})
}

/// What the probe learns of [`electrumx`].
fn electrumx_facts() -> NodeFacts {
    NodeFacts::electrum("ElectrumX 2.0.0", "1.6", Some("1.7"), Some(REGTEST_GENESIS))
}

/// ElectrumX's answers, with `tip` for the header.
fn electrumx(tip: Header, height: u64) -> impl Fn(&Value) -> Answer {
    move |request| match method(request) {
        "server.version" => result(request, json!(["ElectrumX 2.0.0", "1.6"])),
        "server.features" => result(request, features()),
        "blockchain.headers.subscribe" => {
            result(request, json!({"hex": hex(&tip.raw), "height": height}))
        }
        _ => None,
    }
}

fn regtest() -> Option<&'static ChainParams> {
    params(Network::LitecoinRegtest)
}

fn assert_verdict(report: &Report, verdict: Verdict, detail: &str) {
    assert_eq!(report.verdict, verdict, "{report:?}");
    assert_eq!(report.height, None, "{report:?}");
    assert!(
        report.detail.contains(detail),
        "{report:?} lacks {detail:?}"
    );
}

#[tokio::test]
async fn healthy_with_the_height_it_claims_when_its_tip_header_has_its_work() {
    let (addr, _) = server(electrumx(mined(true), 431)).await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    assert_eq!(
        report,
        Report {
            // One header proves nothing about its height.
            proof: Proof::NotAsked,
            ..Report::with_height(
                Verdict::Healthy,
                431,
                "height 431 (ElectrumX 2.0.0, protocol 1.6)"
            )
        }
        .with_node(electrumx_facts())
    );
}

#[tokio::test]
async fn a_server_that_refuses_server_features_gives_facts_without_its_chain() {
    let tip = mined(true);
    let (addr, _) = server(move |request| match method(request) {
        "server.features" => Some(line(&json!({"jsonrpc": "2.0", "id": request["id"],
            "error": {"code": -32601, "message": "unknown method"}}))),
        _ => electrumx(tip.clone(), 8)(request),
    })
    .await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    let facts = NodeFacts::electrum("ElectrumX 2.0.0", "1.6", None, None);
    assert_eq!(report.node, Some(facts));
    // Features of the wrong shape give nothing either.
    let tip = mined(true);
    let (addr, _) = server(move |request| match method(request) {
        "server.features" => result(request, json!(["genesis_hash", 7])),
        _ => electrumx(tip.clone(), 8)(request),
    })
    .await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    let facts = NodeFacts::electrum("ElectrumX 2.0.0", "1.6", None, None);
    assert_eq!(report.node, Some(facts), "{report:?}");
}

#[tokio::test]
async fn facts_come_back_with_a_tip_that_fails() {
    // A regtest server probed as mainnet: its tip fails, its genesis says why.
    let (addr, _) = server(electrumx(mined(true), 431)).await;
    let report = probe(&addr, None, params(Network::Litecoin), None, LONG).await;
    assert_eq!(report.verdict, Verdict::Unknown, "{report:?}");
    assert_eq!(report.node, Some(electrumx_facts()));
}

#[tokio::test]
async fn server_text_in_facts_is_printable_and_bounded() {
    let tip = mined(true);
    let (addr, _) = server(move |request| match method(request) {
        "server.version" => result(
            request,
            json!([format!("Evil\u{1b}{}", "x".repeat(500)), "1.6"]),
        ),
        _ => electrumx(tip.clone(), 8)(request),
    })
    .await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    let Some(NodeFacts::Electrum(facts)) = report.node else {
        panic!("{report:?}");
    };
    assert!(facts.server_version.starts_with("Evil?x"), "{facts:?}");
    assert_eq!(facts.server_version.len(), crate::pool::node::MAX_TEXT);
}

#[tokio::test]
async fn asks_server_version_first_then_the_tip_then_closes() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let answer = electrumx(mined(true), 5);
    let addr = raw(|stream| async move {
        let mut stream = BufReader::new(stream);
        let (mut got, mut line) = (Vec::new(), String::new());
        while stream.read_line(&mut line).await.unwrap() > 0 {
            let request: Value = serde_json::from_str(&line).unwrap();
            stream.write_all(&answer(&request).unwrap()).await.unwrap();
            got.push(request);
            line.clear();
        }
        tx.send(got).unwrap();
    })
    .await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    assert_eq!(report.height, Some(5), "{report:?}");
    // The three requests, and then the probe hung up.
    let got = rx.await.unwrap();
    let client = format!("pin-proxy/{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        got,
        [
            json!({"jsonrpc": "2.0", "id": 0, "method": "server.version",
                   "params": [client, ["1.4", "1.6"]]}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "server.features", "params": []}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "blockchain.headers.subscribe",
                   "params": []}),
        ]
    );
}

#[tokio::test]
async fn skips_notifications_blank_lines_and_padding() {
    let good = electrumx(mined(true), 12);
    let (addr, _) = server(move |request| {
        let notice = json!({"jsonrpc": "2.0", "method": "blockchain.headers.subscribe",
                            "params": [{"hex": "00", "height": 999}]});
        let mut out = line(&notice);
        out.extend_from_slice(b"\r\n\n");
        let mut answer = good(request)?;
        // ElectrumX pads its answers with spaces before the last brace.
        let brace = answer.len() - 2;
        answer.splice(brace..brace, vec![b' '; 900]);
        out.extend(answer);
        Some(out)
    })
    .await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    assert_eq!(report.height, Some(12));
}

#[tokio::test]
async fn refused_connect_is_down() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let report = probe(&addr, None, regtest(), None, SHORT).await;
    assert_verdict(&report, Verdict::Down, "refused");
}

#[tokio::test]
async fn accepted_then_closed_is_down() {
    let addr = raw(|stream| async move { drop(stream) }).await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    // Closed or reset, as the close races our request.
    assert_verdict(
        &report,
        Verdict::Down,
        "before the answer to server.version",
    );
    // Closed after the version, before the features: down too.
    let (addr, _) = server(|request| match method(request) {
        "server.version" => result(request, json!(["Fulcrum 1.11.1", "1.4"])),
        _ => None,
    })
    .await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    assert_verdict(
        &report,
        Verdict::Down,
        "before the answer to server.features",
    );
    // And after the features, before the tip, with what it said of itself.
    let (addr, _) = server(|request| match method(request) {
        "server.version" => result(request, json!(["Fulcrum 1.11.1", "1.4"])),
        "server.features" => result(request, features()),
        _ => None,
    })
    .await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    assert_verdict(
        &report,
        Verdict::Down,
        "before the answer to blockchain.headers.subscribe",
    );
    let facts = NodeFacts::electrum("Fulcrum 1.11.1", "1.4", Some("1.7"), Some(REGTEST_GENESIS));
    assert_eq!(report.node, Some(facts));
}

#[tokio::test]
async fn an_error_reply_is_unknown() {
    let (addr, _) = server(|request| {
        Some(line(&json!({"jsonrpc": "2.0", "id": request["id"],
                          "error": {"code": 1, "message": "unsupported protocol version: 1.6\u{7}"}})))
    })
    .await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    assert_verdict(
        &report,
        Verdict::Unknown,
        "server.version answered error: unsupported protocol version: 1.6",
    );
    assert!(!report.detail.contains('\u{7}'), "{report:?}");
}

#[tokio::test]
async fn garbage_is_unknown() {
    let cases: [(&[u8], &str); 4] = [
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not a JSON-RPC object"),
        (b"[1, 2]\n", "not a JSON-RPC object"),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":\"1.4\"}\n",
            "server.version answered \"1.4\"",
        ),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":[\"x\",\"1.4\"]}\n",
            "wrong id",
        ),
    ];
    for (reply, detail) in cases {
        let (addr, _) = server(move |_| Some(reply.to_vec())).await;
        let report = probe(&addr, None, regtest(), None, LONG).await;
        assert_verdict(&report, Verdict::Unknown, detail);
    }
}

#[tokio::test]
async fn a_tip_of_the_wrong_shape_is_unknown() {
    let tips = [
        json!({"height": 5}),
        json!({"hex": hex(&mined(true).raw[..79]), "height": 5}),
        json!({"hex": format!("{}zz", &hex(&mined(true).raw)[2..]), "height": 5}),
        json!({"hex": hex(&mined(true).raw), "height": -5}),
        json!({"hex": hex(&mined(true).raw)}),
    ];
    for tip in tips {
        let (addr, _) = server(move |request| match method(request) {
            "server.version" => result(request, json!(["ElectrumX 2.0.0", "1.6"])),
            _ => result(request, tip.clone()),
        })
        .await;
        let report = probe(&addr, None, regtest(), None, LONG).await;
        assert_verdict(
            &report,
            Verdict::Unknown,
            "blockchain.headers.subscribe answered",
        );
    }
}

#[tokio::test]
async fn silence_is_unknown_within_the_timeout() {
    let (addr, _) = server(|_| Some(Vec::new())).await;
    let report = probe(&addr, None, regtest(), None, SHORT).await;
    assert_verdict(
        &report,
        Verdict::Unknown,
        "no answer to server.version within 300ms",
    );
}

#[tokio::test]
async fn a_line_over_the_bound_is_unknown() {
    // Without a newline, and with one just past the bound.
    for end in [&b""[..], b"\n"] {
        let (addr, _) = server(move |_| {
            let mut long = vec![b'a'; MAX_LINE + 1];
            long.extend_from_slice(end);
            Some(long)
        })
        .await;
        let report = probe(&addr, None, regtest(), None, LONG).await;
        assert_verdict(&report, Verdict::Unknown, "a line over 65536 bytes");
    }
}

#[tokio::test]
async fn endless_notifications_end_at_the_read_bound() {
    let (addr, _) = server(|_| {
        let filler = vec!["y"; 100];
        let notice = line(&json!({"jsonrpc": "2.0", "method": "x", "params": filler}));
        Some(notice.repeat(MAX_READ / notice.len() + 2))
    })
    .await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    assert_verdict(
        &report,
        Verdict::Unknown,
        "no answer to server.version in the first 262144 bytes",
    );
}

#[tokio::test]
async fn a_tip_header_without_its_work_is_unknown() {
    let (addr, _) = server(electrumx(mined(false), 431)).await;
    let report = probe(&addr, None, regtest(), None, LONG).await;
    assert_verdict(
        &report,
        Verdict::Unknown,
        "tip header at height 431 lacks the proof of work its target asks for",
    );
    // A regtest header is far too easy for mainnet.
    let (addr, _) = server(electrumx(mined(true), 431)).await;
    let report = probe(&addr, None, params(Network::Litecoin), None, LONG).await;
    assert_verdict(
        &report,
        Verdict::Unknown,
        "has target bits 207fffff beyond the network's limit",
    );
}

#[tokio::test]
async fn the_network_picks_the_hash() {
    // Litecoin's genesis header: its scrypt hash is under its target, its
    // double SHA-256 is not.
    let genesis = "010000000000000000000000000000000000000000000000000000000000000000000000\
                   d9ced4ed1130f7b7faad9be25323ffafa33232a17c3edf6cfd97bee6bafbdd97\
                   b9aa8e4ef0ff0f1ecd513f7c";
    let mut raw = [0u8; HEADER_LEN];
    for (i, byte) in raw.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&genesis[2 * i..2 * i + 2], 16).unwrap();
    }
    let (addr, _) = server(electrumx(Header { raw }, 0)).await;
    let report = probe(&addr, None, params(Network::Litecoin), None, LONG).await;
    assert_eq!(
        (report.verdict, report.proof),
        (Verdict::Healthy, Proof::NotAsked)
    );
    let bitcoin = ChainParams {
        limit_bits: 0x1e0f_ffff,
        ..*params(Network::Bitcoin).unwrap()
    };
    let report = probe(&addr, None, Some(&bitcoin), None, LONG).await;
    assert_verdict(&report, Verdict::Unknown, "lacks the proof of work");
}

#[tokio::test]
async fn a_custom_network_reads_heights_without_proof() {
    let (addr, _) = server(electrumx(mined(false), 20)).await;
    let report = probe(&addr, None, None, None, LONG).await;
    assert_eq!(report.verdict, Verdict::Healthy);
    assert_eq!(report.height, Some(20));
    assert!(matches!(report.proof, Proof::Unproven(_)), "{report:?}");
}

/// A TLS Electrum server with a fresh self-signed certificate for a name
/// that matches nothing; returns its port and the SNI of each handshake.
async fn tls_server<F>(answer: F) -> (u16, mpsc::UnboundedReceiver<Option<String>>)
where
    F: Fn(&Value) -> Answer + Send + Sync + 'static,
{
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["electrum.invalid".to_owned()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(cert.der().to_vec())], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (names, rx) = mpsc::unbounded_channel();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, answer, names) = (acceptor.clone(), answer.clone(), names.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    let sni = tls.get_ref().1.server_name().map(str::to_owned);
                    let _ = names.send(sni);
                    converse(tls, answer, mpsc::unbounded_channel().0).await;
                }
            });
        }
    });
    (port, rx)
}

#[tokio::test]
async fn tls_accepts_a_self_signed_certificate_and_sends_the_name() {
    let tls = AnyCertTls::new().unwrap();
    let (port, mut names) = tls_server(electrumx(mined(true), 77)).await;
    let report = probe(
        &format!("localhost:{port}"),
        Some(&tls),
        regtest(),
        None,
        LONG,
    )
    .await;
    assert_eq!(report.verdict, Verdict::Healthy, "{report:?}");
    assert_eq!((report.height, report.proof), (Some(77), Proof::NotAsked));
    assert_eq!(names.recv().await, Some(Some("localhost".to_owned())));
    // An address: no SNI.
    let report = probe(
        &format!("127.0.0.1:{port}"),
        Some(&tls),
        regtest(),
        None,
        LONG,
    )
    .await;
    assert_eq!(report.height, Some(77), "{report:?}");
    assert_eq!(names.recv().await, Some(None));
}

#[tokio::test]
async fn tls_failures() {
    let tls = AnyCertTls::new().unwrap();
    // A plain server on a TLS probe: it answers the hello with a JSON error.
    let plain = raw(move |mut s| async move {
        let mut buf = [0u8; 512];
        if s.read(&mut buf).await.unwrap_or(0) > 0 {
            let _ = s.write_all(b"{\"error\":\"parse error\"}\n").await;
        }
        while s.read(&mut buf).await.unwrap_or(0) > 0 {}
    })
    .await;
    let report = probe(&plain, Some(&tls), regtest(), None, LONG).await;
    assert_verdict(&report, Verdict::Unknown, "TLS handshake");
    // Accepted and closed before the handshake: down.
    let closing = raw(|stream| async move { drop(stream) }).await;
    let report = probe(&closing, Some(&tls), regtest(), None, LONG).await;
    assert_verdict(&report, Verdict::Down, "TLS handshake");
    // A TLS server that says nothing after the handshake.
    let (port, _) = tls_server(|_| Some(Vec::new())).await;
    let report = probe(
        &format!("127.0.0.1:{port}"),
        Some(&tls),
        regtest(),
        None,
        SHORT,
    )
    .await;
    assert_verdict(&report, Verdict::Unknown, "no answer to server.version");
}
