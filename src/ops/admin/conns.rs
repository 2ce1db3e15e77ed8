//! The routes of one client connection: `GET /connections` (its query
//! read here, every bad value a 400), `POST /connections/{conn}/close` and
//! `POST /pools/{p}/backends/{b}/shed?count=N`. The listing itself is
//! [`crate::ops::connections`].

use hyper::StatusCode;
use serde::{Deserialize, Serialize};

use super::routes::{Answer, Fail, answer, json, not_found};
use crate::config::IpNet;
use crate::ops::connections::{self, ConnQuery, MAX_LIMIT};
use crate::ops::control::Control;
use crate::pool::registry::ConnId;

/// The answer to `POST /connections/{conn}/close`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseAnswer {
    /// The connection asked to close.
    pub closed: ConnId,
}

/// The answer to `POST .../shed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShedAnswer {
    /// The connections chosen, newest first: the first is closed, the rest
    /// follow spread over `health.drain_spread`.
    pub shed: Vec<ConnId>,
}

fn bad(msg: String) -> Fail {
    Fail::new(StatusCode::BAD_REQUEST, msg)
}

/// The query of `GET /connections`: `pool`, `backend`, `client` (a
/// network, `10.0.0.0/8`, or one address) and `limit` (1 to
/// [`MAX_LIMIT`], 100 when absent), each at most once.
pub(super) fn query(query: &str) -> Result<ConnQuery, Fail> {
    let mut q = ConnQuery::default();
    let mut seen: Vec<String> = Vec::new();
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        if seen.iter().any(|k| *k == key) {
            return Err(bad(format!("{key} is given twice")));
        }
        seen.push(key.clone().into_owned());
        let named = |what: &str| {
            let value = value.trim();
            if value.is_empty() {
                Err(bad(format!("{what} is empty")))
            } else {
                Ok(Some(value.to_owned()))
            }
        };
        match &*key {
            "pool" => q.pool = named("pool")?,
            "backend" => q.backend = named("backend")?,
            "client" => q.client = Some(network(value.trim())?),
            "limit" => q.limit = limit(value.trim())?,
            other => {
                return Err(bad(format!(
                    "unknown parameter {other:?}: use pool, backend, client, limit"
                )));
            }
        }
    }
    Ok(q)
}

/// `10.0.0.0/8`, `2001:db8::/32`, or one address (`10.1.2.3`).
fn network(value: &str) -> Result<IpNet, Fail> {
    if let Ok(net) = value.parse::<IpNet>() {
        return Ok(as_ipv4(net.trunc()));
    }
    value
        .parse::<std::net::IpAddr>()
        .map(|ip| IpNet::from(ip.to_canonical()))
        .map_err(|_| {
            bad(format!(
                "bad client {value:?}: a network (10.0.0.0/8, 2001:db8::/32) or an address"
            ))
        })
}

/// An IPv4-mapped network (`::ffff:10.0.0.0/104`) as the IPv4 one it
/// names: clients are listed by their IPv4 address, whichever way they
/// were accepted.
fn as_ipv4(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => v6
            .addr()
            .to_ipv4_mapped()
            .and_then(|v4| ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).ok())
            .map_or(net, IpNet::V4),
        _ => net,
    }
}

fn limit(value: &str) -> Result<usize, Fail> {
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(bad(format!(
            "bad limit {value:?}: a number from 1 to {MAX_LIMIT}"
        ))),
    }
}

/// A connection id from the path, as logged in `conn`.
pub(super) fn conn_id(value: &str) -> Result<ConnId, Fail> {
    value.parse::<ConnId>().map_err(|_| {
        bad(format!(
            "bad connection id {value:?}: a number, as logged in conn"
        ))
    })
}

/// The `count` of a shed: 1 to [`MAX_LIMIT`].
pub(super) fn count(query: &str) -> Result<usize, Fail> {
    let value = url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "count")
        .map(|(_, v)| v.into_owned())
        .ok_or_else(|| bad("missing count: add ?count=N".to_owned()))?;
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(bad(format!(
            "bad count {value:?}: a number from 1 to {MAX_LIMIT}"
        ))),
    }
}

/// `GET /connections`.
pub(super) fn list(control: &Control, query: &ConnQuery) -> Result<Answer, Fail> {
    let listing = connections::list(&control.pools(), query).map_err(not_found)?;
    let body = connections::render(&listing).map_err(|e| {
        Fail::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding JSON: {e}"),
        )
    })?;
    Ok(answer(StatusCode::OK, "application/json", body.into()))
}

/// `POST /connections/{conn}/close`.
pub(super) fn close(control: &Control, conn: ConnId) -> Result<Answer, Fail> {
    if !connections::close(&control.pools(), conn) {
        return Err(Fail::new(
            StatusCode::NOT_FOUND,
            format!("no connection {conn}"),
        ));
    }
    json(StatusCode::OK, &CloseAnswer { closed: conn })
}

/// `POST /pools/{pool}/backends/{backend}/shed?count=N`.
pub(super) fn shed(
    control: &Control,
    pool: &str,
    backend: &str,
    count: usize,
) -> Result<Answer, Fail> {
    let shed = connections::shed(&control.pools(), pool, backend, count).map_err(not_found)?;
    json(StatusCode::OK, &ShedAnswer { shed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(result: Result<impl std::fmt::Debug, Fail>) -> String {
        match result {
            Err(Fail(status, msg)) => {
                assert_eq!(status, StatusCode::BAD_REQUEST, "{msg}");
                msg
            }
            Ok(v) => panic!("accepted: {v:?}"),
        }
    }

    #[test]
    fn a_listing_query_takes_its_filters_and_a_bounded_limit() {
        assert_eq!(query("").unwrap(), ConnQuery::default());
        assert_eq!(query("").unwrap().limit, 100);
        let q = query("pool=ltc&backend=a%2F1&client=10.0.0.0/8&limit=10000").unwrap();
        assert_eq!(q.pool.as_deref(), Some("ltc"));
        assert_eq!(q.backend.as_deref(), Some("a/1"));
        assert_eq!(q.client, Some("10.0.0.0/8".parse().unwrap()));
        assert_eq!(q.limit, 10_000);
        let one = query("client=2001:db8::1").unwrap();
        assert_eq!(one.client, Some("2001:db8::1/128".parse().unwrap()));
        // Host bits are dropped: the network is what is meant.
        let host = query("client=10.1.2.3/8").unwrap();
        assert_eq!(host.client, Some("10.0.0.0/8".parse().unwrap()));
        // IPv4-mapped: the IPv4 address or network, as clients are listed.
        for (mapped, v4) in [
            ("::ffff:127.0.0.1", "127.0.0.1/32"),
            ("::ffff:10.1.0.0/112", "10.1.0.0/16"),
            ("::ffff:0:0/96", "0.0.0.0/0"),
        ] {
            let q = query(&format!("client={mapped}")).unwrap();
            assert_eq!(q.client, Some(v4.parse().unwrap()), "{mapped}");
        }
        let wide = query("client=::/64").unwrap();
        assert_eq!(
            wide.client,
            Some("::/64".parse().unwrap()),
            "not mapped: kept"
        );
    }

    #[test]
    fn a_bad_listing_query_is_a_clear_400() {
        for (q, says) in [
            ("limit=0", "bad limit"),
            ("limit=10001", "from 1 to 10000"),
            ("limit=99999999999999999999999", "bad limit"),
            ("limit=-1", "bad limit"),
            ("limit=", "bad limit"),
            ("client=10.0.0.0/33", "bad client"),
            ("client=nonsense", "bad client"),
            ("client=", "bad client"),
            ("pool=", "pool is empty"),
            ("pool=a&pool=b", "given twice"),
            ("poll=a", "unknown parameter"),
        ] {
            let msg = refused(query(q));
            assert!(msg.contains(says), "{q}: {msg}");
        }
    }

    #[test]
    fn ids_and_counts_are_numbers_in_range() {
        assert_eq!(conn_id("42").unwrap(), 42);
        for id in ["", "-1", "x", "18446744073709551616", "4 2"] {
            assert!(refused(conn_id(id)).contains("bad connection id"), "{id}");
        }
        assert_eq!(count("count=3").unwrap(), 3);
        assert!(refused(count("")).contains("missing count"));
        for q in ["count=0", "count=x", "count=10001", "count=-2"] {
            assert!(refused(count(q)).contains("bad count"), "{q}");
        }
    }
}
