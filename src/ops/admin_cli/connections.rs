//! The `connections`, `close` and `shed` commands: a running instance's
//! client connections as a table (or its JSON), and the operator's
//! commands on one connection or a backend's newest.

use std::fmt::Write;
use std::time::Duration;

use anyhow::anyhow;
use hyper::Method;

use super::table::{aligned, bytes};
use super::{Instance, backend_path, call, decode};
use crate::ops::admin::{CloseAnswer, ShedAnswer};
use crate::ops::connections::{Connection, Listing};
use crate::pool::registry::ConnId;

/// What `pin-proxy connections` asks for.
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    /// `--pool`.
    pub pool: Option<String>,
    /// `--backend`.
    pub backend: Option<String>,
    /// `--client`: a network or an address.
    pub client: Option<String>,
    /// `--limit`; the endpoint's default (100) when `None`.
    pub limit: Option<usize>,
}

impl Wanted {
    fn path(&self) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        for (key, value) in [
            ("pool", &self.pool),
            ("backend", &self.backend),
            ("client", &self.client),
        ] {
            if let Some(value) = value {
                query.append_pair(key, value);
            }
        }
        if let Some(limit) = self.limit {
            query.append_pair("limit", &limit.to_string());
        }
        let query = query.finish();
        if query.is_empty() {
            "/connections".to_owned()
        } else {
            format!("/connections?{query}")
        }
    }
}

const HEADER: [&str; 10] = [
    "CONN", "POOL", "CLIENT", "VIA", "BACKEND", "AGE", "IDLE", "UP", "DOWN", "STATE",
];
const RIGHT: [bool; 10] = [
    true, false, false, false, false, true, true, true, true, false,
];

/// `GET /connections`, as a table, newest first (or, with `json`, the
/// answer as it came).
///
/// # Errors
/// When the instance is unreachable or answers with an error.
pub async fn connections(admin: &Instance, wanted: &Wanted, json: bool) -> anyhow::Result<String> {
    let body = call(admin, Method::GET, &wanted.path()).await?;
    let listing: Listing = decode(&body)?;
    if json {
        return Ok(String::from_utf8_lossy(&body).into_owned());
    }
    Ok(render(&listing))
}

/// The table of a listing.
fn render(listing: &Listing) -> String {
    let mut out = String::new();
    if listing.connections.is_empty() {
        out.push_str("no connections\n");
        return out;
    }
    let mut rows = vec![HEADER.map(str::to_owned)];
    rows.extend(listing.connections.iter().map(row));
    aligned(&mut out, &rows, &RIGHT);
    let shown = listing.connections.len();
    if listing.total > shown {
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "{shown} newest of {} shown; --limit N for more (at most 10000)",
            listing.total
        );
    }
    out
}

fn row(c: &Connection) -> [String; 10] {
    let or_dash =
        |a: Option<std::net::SocketAddr>| a.map_or_else(|| "-".to_owned(), |a| a.to_string());
    let span = |s: u64| crate::config::span(Duration::from_secs(s)).to_string();
    [
        c.conn.to_string(),
        c.pool.clone(),
        c.client.to_string(),
        or_dash(c.via),
        c.backend.clone(),
        span(c.age_s),
        span(c.idle_s),
        bytes(c.bytes_up),
        bytes(c.bytes_down),
        c.state.as_str().to_owned(),
    ]
}

/// `POST /connections/{conn}/close` for each of `conns`: one line each.
/// Every one is tried; when any is unknown, the lines of those closed go
/// to stdout at once and the error names only the unknown ones.
///
/// # Errors
/// When the instance is unreachable, or any connection is unknown.
pub async fn close(admin: &Instance, conns: &[ConnId]) -> anyhow::Result<String> {
    let (mut done, mut failed) = (String::new(), Vec::new());
    for &conn in conns {
        match call(admin, Method::POST, &format!("/connections/{conn}/close")).await {
            Ok(body) => {
                let answer: CloseAnswer = decode(&body)?;
                let _ = writeln!(done, "connection {} closed", answer.closed);
            }
            Err(e) if e.to_string().starts_with("no connection ") => failed.push(e.to_string()),
            Err(e) => return Err(e),
        }
    }
    if failed.is_empty() {
        return Ok(done);
    }
    let mut stdout = std::io::stdout().lock();
    let _ = std::io::Write::write_all(&mut stdout, done.as_bytes());
    let _ = std::io::Write::flush(&mut stdout);
    Err(anyhow!("{}", failed.join("\n")))
}

/// `POST /pools/{pool}/backends/{backend}/shed?count=N`.
///
/// # Errors
/// When the instance is unreachable or answers with an error.
pub async fn shed(admin: &Instance, pool: &str, backend: &str, n: usize) -> anyhow::Result<String> {
    let path = format!("{}/shed?count={n}", backend_path(pool, backend));
    let answer: ShedAnswer = decode(&call(admin, Method::POST, &path).await?)?;
    let ids: Vec<String> = answer.shed.iter().map(ToString::to_string).collect();
    Ok(match ids.len() {
        0 => format!("{pool}/{backend} has no spliced connection to shed\n"),
        n => format!(
            "{pool}/{backend}: shedding {n} newest (closed spread over health.drain_spread): {}\n",
            ids.join(" ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::connections::ConnPhase;

    #[test]
    fn the_query_carries_only_the_filters_given() {
        assert_eq!(Wanted::default().path(), "/connections");
        let wanted = Wanted {
            pool: Some("ltc".into()),
            backend: Some("ltc/10.0.0.1:9333".into()),
            client: Some("10.0.0.0/8".into()),
            limit: Some(5),
        };
        assert_eq!(
            wanted.path(),
            "/connections?pool=ltc&backend=ltc%2F10.0.0.1%3A9333&client=10.0.0.0%2F8&limit=5"
        );
    }

    #[test]
    fn the_table_has_a_row_per_connection_and_says_what_was_left_out() {
        let c = Connection {
            conn: 12,
            pool: "ltc".into(),
            backend: "a".into(),
            client: "10.0.0.1:5000".parse().unwrap(),
            via: Some("192.0.2.1:40000".parse().unwrap()),
            source: Some("127.0.0.1:40001".parse().unwrap()),
            started: "2026-12-02T00:00:00Z".into(),
            age_s: 3725,
            bytes_up: 2048,
            bytes_down: 10,
            idle_s: 5,
            state: ConnPhase::Spliced,
        };
        let listing = Listing {
            total: 3,
            connections: vec![
                c.clone(),
                Connection {
                    conn: 9,
                    via: None,
                    state: ConnPhase::Draining,
                    ..c
                },
            ],
        };
        let text = render(&listing);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        let head: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(head, HEADER);
        let first: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            first[..5],
            ["12", "ltc", "10.0.0.1:5000", "192.0.2.1:40000", "a"],
            "{text}"
        );
        assert!(
            lines[1].contains("1h 2m 5s") && lines[1].contains("2.0 KiB"),
            "{text}"
        );
        assert!(lines[1].trim_end().ends_with("spliced"), "{text}");
        assert!(
            lines[2].contains(" -  ") && lines[2].ends_with("draining"),
            "{text}"
        );
        assert!(lines[3].starts_with("2 newest of 3 shown"), "{text}");
        let none = Listing {
            total: 0,
            connections: Vec::new(),
        };
        assert_eq!(render(&none), "no connections\n");
    }
}
