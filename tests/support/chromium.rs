//! A real headless Chromium, driven over the DevTools protocol: start it
//! on a throwaway profile, open its page target's websocket (a minimal
//! RFC 6455 client: text frames out, masked; text frames in, fragmented or
//! not), then navigate, evaluate script, resize and take screenshots.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::litecoind::{find_program, peers_available};
use crate::support::within;

/// Time for the browser to start and write its DevTools port.
const START: Duration = Duration::from_secs(30);
/// Time for one DevTools command.
const CALL: Duration = Duration::from_secs(30);
/// Largest DevTools message read (a full-page screenshot, base64).
const MAX_MESSAGE: usize = 64 << 20;

/// A running headless Chromium; killed on drop.
pub struct Chromium {
    child: Child,
    devtools: SocketAddr,
    profile: tempfile::TempDir,
}

impl Chromium {
    /// Start `chromium --headless`, or `None` (after the notice of
    /// [`peers_available`]) when it is not installed.
    pub async fn start() -> Option<Chromium> {
        if !peers_available(&["chromium"]) {
            return None;
        }
        let bin = find_program("chromium")?;
        let profile = tempfile::tempdir().expect("profile dir");
        let log = std::fs::File::create(profile.path().join("stderr.log")).expect("log file");
        let child = Command::new(bin)
            .args([
                "--headless",
                // The sandbox needs privileges a container (and root) lacks;
                // this browser only ever visits loopback.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--mute-audio",
                "--hide-scrollbars",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1280,900",
                "--lang=en-US",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .env("TZ", "UTC")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start chromium");
        let mut browser = Chromium {
            child,
            devtools: "127.0.0.1:0".parse().unwrap(),
            profile,
        };
        browser.devtools = browser.wait_port().await;
        Some(browser)
    }

    /// The address in `DevToolsActivePort`, once Chromium wrote it.
    async fn wait_port(&mut self) -> SocketAddr {
        let file = self.profile.path().join("DevToolsActivePort");
        let deadline = tokio::time::Instant::now() + START;
        loop {
            if let Some(port) = std::fs::read_to_string(&file)
                .ok()
                .and_then(|t| t.lines().next()?.trim().parse::<u16>().ok())
            {
                return SocketAddr::from(([127, 0, 0, 1], port));
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("chromium exited ({status}):\n{}", self.log());
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "chromium wrote no DevTools port in {START:?}:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What Chromium wrote to stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.profile.path().join("stderr.log")).unwrap_or_default()
    }

    /// The page target Chromium opened at start-up (`about:blank`).
    pub async fn tab(&self) -> Tab {
        let list = http_get(self.devtools, "/json/list").await;
        let targets: Vec<Value> = serde_json::from_str(&list).expect("/json/list is JSON");
        let url = targets
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .unwrap_or_else(|| panic!("no page target in {list}"))
            .to_owned();
        let path = url
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_owned()))
            .unwrap_or_else(|| panic!("bad websocket url {url}"));
        Tab {
            ws: WebSocket::connect(self.devtools, &path).await,
            next: 1,
        }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // Already gone is fine; a browser left running is not.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One page, over its DevTools websocket.
pub struct Tab {
    ws: WebSocket,
    next: u64,
}

impl Tab {
    /// Call DevTools `method`; its `result`. Events met meanwhile are dropped.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let msg = json!({ "id": id, "method": method, "params": params });
        self.ws.send(&msg.to_string()).await;
        within(method, CALL, async {
            loop {
                let text = self.ws.receive().await;
                let reply: Value = serde_json::from_str(&text).expect("DevTools sends JSON");
                if reply["id"] != id {
                    continue;
                }
                if let Some(err) = reply.get("error") {
                    panic!("{method}: {err}");
                }
                return reply["result"].clone();
            }
        })
        .await
    }

    /// Load `url`.
    pub async fn navigate(&mut self, url: &str) {
        let r = self.call("Page.navigate", json!({ "url": url })).await;
        assert!(r.get("errorText").is_none(), "navigate to {url}: {r}");
    }

    /// The value of script `expr` (awaited if a promise); panics on an
    /// exception.
    pub async fn eval(&mut self, expr: &str) -> Value {
        let params = json!({ "expression": expr, "returnByValue": true, "awaitPromise": true });
        let r = self.call("Runtime.evaluate", params).await;
        if let Some(e) = r.get("exceptionDetails") {
            panic!("script {expr} threw: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Evaluate `expr` until it is truthy (what it last was, in the panic);
    /// its value.
    pub async fn wait_for(&mut self, what: &str, expr: &str, timeout: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let v = self.eval(expr).await;
            let truthy =
                !matches!(&v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("");
            if truthy {
                return v;
            }
            if tokio::time::Instant::now() >= deadline {
                let page = self
                    .eval("document.body ? document.body.innerText : ''")
                    .await;
                panic!("timed out waiting for {what} (last {v}); the page reads:\n{page}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Lay the page out as a `width` × `height` CSS pixel screen.
    pub async fn viewport(&mut self, width: u32, height: u32, mobile: bool) {
        let params = json!({
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile,
        });
        self.call("Emulation.setDeviceMetricsOverride", params)
            .await;
    }

    /// A PNG of the whole page (beyond the viewport), written to `path`.
    pub async fn screenshot(&mut self, path: &Path) -> Vec<u8> {
        let params = json!({ "format": "png", "captureBeyondViewport": true });
        let r = self.call("Page.captureScreenshot", params).await;
        let data = r["data"].as_str().expect("screenshot data");
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("screenshot is base64");
        std::fs::write(path, &png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        png
    }
}

/// `GET path` from the DevTools HTTP endpoint; the body (which ends at its
/// `Content-Length`: the endpoint keeps the connection open).
async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect to DevTools");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("send");
    let head = String::from_utf8(read_head(&mut s).await).expect("UTF-8 head");
    assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or_else(|| panic!("no Content-Length in {head}"));
    let mut body = vec![0u8; len];
    within("DevTools answer", CALL, s.read_exact(&mut body))
        .await
        .expect("read body");
    String::from_utf8(body).expect("UTF-8 body")
}

/// An HTTP head, read byte by byte up to its blank line so that nothing
/// after it is consumed.
async fn read_head(s: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let b = within("an HTTP head", CALL, s.read_u8())
            .await
            .expect("read head");
        head.push(b);
    }
    head
}

/// The client end of a websocket, text messages only.
struct WebSocket {
    stream: TcpStream,
    mask: u32,
}

impl WebSocket {
    /// Open `path` at `addr`: the upgrade request, then a `101` answer.
    async fn connect(addr: SocketAddr, path: &str) -> WebSocket {
        let mut stream = TcpStream::connect(addr).await.expect("connect to DevTools");
        // The key only has to be 16 bytes in base64; nothing here depends on
        // checking the server's accept value.
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: cGluLXByb3h5IHRlc3RzIQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream
            .write_all(req.as_bytes())
            .await
            .expect("send upgrade");
        // The first frame may follow the head at once.
        let head = read_head(&mut stream).await;
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "upgrade refused: {head}");
        WebSocket {
            stream,
            mask: 0x5a17_c3e9,
        }
    }

    /// Send `text` as one masked text frame.
    async fn send(&mut self, text: &str) {
        let payload = text.as_bytes();
        let mut frame = vec![0x81];
        match payload.len() {
            n @ 0..=125 => frame.push(0x80 | n as u8),
            n @ 126..=0xffff => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        self.mask = self.mask.rotate_left(7) ^ 0x9e37_79b9;
        let mask = self.mask.to_be_bytes();
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&frame).await.expect("send frame");
    }

    /// The next text message (continuation frames joined; pings answered).
    async fn receive(&mut self) -> String {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.stream.read_exact(&mut head).await.expect("read frame");
            let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0f);
            let masked = head[1] & 0x80 != 0;
            let len = match head[1] & 0x7f {
                126 => u64::from(self.stream.read_u16().await.expect("length")),
                127 => self.stream.read_u64().await.expect("length"),
                n => u64::from(n),
            };
            let len = usize::try_from(len).expect("frame length");
            assert!(
                message.len() + len <= MAX_MESSAGE,
                "DevTools message over {MAX_MESSAGE} bytes"
            );
            let mut key = [0u8; 4];
            if masked {
                self.stream.read_exact(&mut key).await.expect("mask");
            }
            let mut payload = vec![0u8; len];
            self.stream.read_exact(&mut payload).await.expect("payload");
            if masked {
                for (i, b) in payload.iter_mut().enumerate() {
                    *b ^= key[i % 4];
                }
            }
            match opcode {
                0x0..=0x2 => message.extend_from_slice(&payload),
                0x8 => panic!("DevTools closed the websocket"),
                0x9 => {
                    self.pong(&payload).await;
                    continue;
                }
                _ => continue,
            }
            if fin {
                return String::from_utf8(message).expect("DevTools sends UTF-8");
            }
        }
    }

    async fn pong(&mut self, payload: &[u8]) {
        let mut frame = vec![0x8a, 0x80 | payload.len().min(125) as u8];
        let mask = [0u8; 4];
        frame.extend_from_slice(&mask);
        frame.extend_from_slice(&payload[..payload.len().min(125)]);
        self.stream.write_all(&frame).await.expect("send pong");
    }
}

/// Where a test saves its screenshots: `$PIN_PROXY_SCREENSHOTS` when set
/// (to keep them), else `dir`.
pub fn screenshot_dir(dir: &Path) -> PathBuf {
    std::env::var_os("PIN_PROXY_SCREENSHOTS").map_or_else(|| dir.to_owned(), PathBuf::from)
}
