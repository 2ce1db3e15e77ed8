//! Unit tests of the admin request parsing: paths, names, methods, windows.

use super::*;

#[test]
fn routes_parse_and_decode_names() {
    assert!(matches!(Route::parse("/status"), Ok(Some(Route::Status))));
    assert!(matches!(Route::parse("/nope"), Ok(None)));
    assert!(matches!(Route::parse("/status/x"), Ok(None)));
    match Route::parse("/pools/p/backends/%5B%3A%3A1%5D%3A9333/quarantine") {
        Ok(Some(Route::Quarantine { pool, backend })) => {
            assert_eq!((pool.as_str(), backend.as_str()), ("p", "[::1]:9333"));
        }
        _ => panic!("not parsed as a quarantine route"),
    }
    assert!(matches!(
        Route::parse("/pools/p/backends/b/release"),
        Ok(Some(Route::Release { .. }))
    ));
    assert!(matches!(
        Route::parse("/pools/p/backends/b/other"),
        Ok(None)
    ));
    assert!(matches!(
        Route::parse("/pools/p/backends/quarantine"),
        Ok(None)
    ));
}

#[test]
fn a_discovered_name_routes_with_its_slash_plain_or_encoded() {
    for path in [
        "/pools/p/backends/ltc/127.0.0.1:9333/release",
        "/pools/p/backends/ltc%2F127.0.0.1%3A9333/release",
    ] {
        match Route::parse(path) {
            Ok(Some(Route::Release { pool, backend })) => {
                assert_eq!(
                    (pool.as_str(), backend.as_str()),
                    ("p", "ltc/127.0.0.1:9333")
                );
            }
            other => panic!("{path}: not parsed as a release route: {other:?}"),
        }
    }
    match Route::parse("/pools/p/backends/ltc/[::1]:9333/quarantine") {
        Ok(Some(Route::Quarantine { backend, .. })) => assert_eq!(backend, "ltc/[::1]:9333"),
        other => panic!("not parsed as a quarantine route: {other:?}"),
    }
}

#[test]
fn the_page_is_at_the_root_for_get_and_head() {
    let root: hyper::Uri = "/".parse().unwrap();
    assert_eq!(
        parse_request(&Method::GET, &root).ok(),
        Some(AdminRequest::Page)
    );
    assert_eq!(
        parse_request(&Method::HEAD, &root).ok(),
        Some(AdminRequest::Page)
    );
    let refused = parse_request(&Method::POST, &root).unwrap_err();
    assert_eq!(
        (refused.status, refused.allow),
        (StatusCode::METHOD_NOT_ALLOWED, Some("GET, HEAD"))
    );
}

#[test]
fn window_needs_a_positive_bounded_duration() {
    assert_eq!(window("for=10m").ok(), Some(Duration::from_secs(600)));
    assert_eq!(
        window("x=1&for=1h%2030m").ok(),
        Some(Duration::from_secs(5400))
    );
    for bad in ["", "for=", "for=soon", "for=0s", "for=100000y", "fo=1m"] {
        assert!(
            matches!(window(bad), Err(Fail(StatusCode::BAD_REQUEST, _))),
            "{bad}"
        );
    }
}

#[test]
fn the_connection_routes_parse_their_ids_counts_and_queries() {
    let parse = |method: Method, target: &str| parse_request(&method, &target.parse().unwrap());
    match parse(Method::GET, "/connections?backend=a&limit=5") {
        Ok(AdminRequest::Connections(q)) => {
            assert_eq!((q.backend.as_deref(), q.limit), (Some("a"), 5));
        }
        other => panic!("not a listing: {other:?}"),
    }
    assert!(matches!(
        parse(Method::HEAD, "/connections"),
        Ok(AdminRequest::Connections(_))
    ));
    assert_eq!(
        parse(Method::POST, "/connections/7/close").ok(),
        Some(AdminRequest::Close { conn: 7 })
    );
    assert_eq!(
        parse(
            Method::POST,
            "/pools/p/backends/ltc/127.0.0.1:9333/shed?count=2"
        )
        .ok(),
        Some(AdminRequest::Shed {
            pool: "p".into(),
            backend: "ltc/127.0.0.1:9333".into(),
            count: 2
        })
    );
    let refused = |method, target| parse(method, target).err().map(|e| e.status.as_u16());
    assert_eq!(refused(Method::GET, "/connections/7/close"), Some(405));
    assert_eq!(refused(Method::POST, "/connections"), Some(405));
    assert_eq!(refused(Method::POST, "/connections/seven/close"), Some(400));
    assert_eq!(refused(Method::GET, "/connections?limit=0"), Some(400));
    assert_eq!(refused(Method::POST, "/pools/p/backends/a/shed"), Some(400));
    assert_eq!(refused(Method::POST, "/connections/7"), Some(404));
}
