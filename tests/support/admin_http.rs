//! A tiny raw HTTP/1.1 client for the admin endpoint (so a test controls
//! every byte: stalls, oversized declarations, source addresses), the admin
//! address of a running proxy, `/status` as JSON and `/metrics` parsed by a
//! real parser.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::proxy::Proxy;
use crate::support::within;

const T: Duration = Duration::from_secs(10);

/// The address the admin endpoint bound (its `admin_listening` event).
pub fn admin_addr(proxy: &Proxy) -> SocketAddr {
    let events = proxy.named("admin_listening");
    let event = events.first().expect("no admin_listening event");
    event["listen"]
        .as_str()
        .expect("admin_listening has a listen field")
        .parse()
        .expect("listen is an address")
}

/// A parsed HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics with the body if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// The `error` field of a JSON error answer.
    pub fn error(&self) -> String {
        let v = self.json();
        v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error field in {v}"))
            .to_owned()
    }
}

/// `method path` with an empty body on a fresh connection.
pub async fn request(admin: SocketAddr, method: &str, path: &str) -> Answer {
    let stream = TcpStream::connect(admin).await.expect("connect to admin");
    send(
        stream,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        ),
    )
    .await
}

/// `method path` with an empty body, `Host` naming `admin` itself (as a
/// browser sends it) and `headers` besides.
pub async fn request_with(
    admin: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let stream = TcpStream::connect(admin).await.expect("connect to admin");
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    send(
        stream,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: {admin}\r\n{extra}Connection: close\r\nContent-Length: 0\r\n\r\n"
        ),
    )
    .await
}

/// Send `raw` on `stream` and read the answer until the server closes.
pub async fn send(mut stream: TcpStream, raw: &str) -> Answer {
    stream
        .write_all(raw.as_bytes())
        .await
        .expect("send request");
    let mut buf = Vec::new();
    within("admin answer", T, stream.read_to_end(&mut buf))
        .await
        .expect("read answer");
    parse(&String::from_utf8(buf).expect("answer is UTF-8"))
}

/// As [`send`], but `None` when the server closed without an answer.
pub async fn try_send(mut stream: TcpStream, raw: &str) -> Option<Answer> {
    stream.write_all(raw.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    within("admin answer", T, stream.read_to_end(&mut buf))
        .await
        .ok()?;
    let text = String::from_utf8(buf).ok()?;
    text.contains("\r\n\r\n").then(|| parse(&text))
}

fn parse(text: &str) -> Answer {
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {text:?}"));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// `GET /status` as JSON (asserting 200).
pub async fn status(admin: SocketAddr) -> Value {
    let answer = request(admin, "GET", "/status").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()
}

/// The backend `name` of pool `pool` in a `/status` document.
pub fn backend<'a>(status: &'a Value, pool: &str, name: &str) -> &'a Value {
    let pool = status["pools"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == pool))
        .unwrap_or_else(|| panic!("no pool {pool} in {status}"));
    pool["backends"]
        .as_array()
        .and_then(|bs| bs.iter().find(|b| b["name"] == name))
        .unwrap_or_else(|| panic!("no backend {name} in {pool}"))
}

/// `/metrics`, parsed by `prometheus-parse`; shown as the text it was
/// parsed from.
pub struct Metrics {
    /// Every sample.
    pub samples: Vec<prometheus_parse::Sample>,
    /// The body as served.
    pub text: String,
}

impl std::fmt::Display for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// `GET /metrics` (asserting 200 and the text format's content type).
pub async fn metrics(admin: SocketAddr) -> Metrics {
    let answer = request(admin, "GET", "/metrics").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let ctype = answer.header("content-type").unwrap_or_default();
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let lines = answer.body.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("parse /metrics");
    Metrics {
        samples: scrape.samples,
        text: answer.body,
    }
}

/// Whether a sample is a counter, a gauge, or (name not matching its
/// `# TYPE` line) untyped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Metrics {
    /// The value of `metric` with exactly `labels`, checking its type;
    /// `None` when absent.
    pub fn get(&self, metric: &str, kind: Kind, labels: &[(&str, &str)]) -> Option<f64> {
        let sample = self.samples.iter().find(|s| {
            s.metric == metric
                && s.labels.len() == labels.len()
                && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        })?;
        match (&sample.value, kind) {
            (prometheus_parse::Value::Counter(v), Kind::Counter)
            | (prometheus_parse::Value::Gauge(v), Kind::Gauge) => Some(*v),
            (other, _) => panic!("{metric}{labels:?} is {other:?}, expected a {kind:?}"),
        }
    }

    /// As [`Metrics::get`], panicking when absent.
    pub fn value(&self, metric: &str, kind: Kind, labels: &[(&str, &str)]) -> f64 {
        self.get(metric, kind, labels)
            .unwrap_or_else(|| panic!("{metric}{labels:?} missing from /metrics"))
    }
}
