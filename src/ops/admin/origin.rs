//! Cross-site refusal for the admin commands (every POST route). The
//! endpoint has no authentication beyond its allow-list, so a web page the
//! operator has open must not be able to make their browser quarantine or
//! reload anything. Browsers say where a request comes from (`Origin`,
//! `Sec-Fetch-Site`); a request that says neither is not from a web page
//! (curl, the CLI) and is served.

use hyper::HeaderMap;
use hyper::header::{HOST, ORIGIN};
use url::Url;

/// Why a request was taken for a cross-site one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrossSite {
    /// `Sec-Fetch-Site` names another site (`cross-site`, or `same-site`:
    /// another origin of the same site, which is not this endpoint either).
    #[error("cross-site request refused (Sec-Fetch-Site: {0})")]
    FetchSite(String),
    /// `Origin: null` (a sandboxed frame, a file, a redirect chain).
    #[error("cross-site request refused (Origin: null)")]
    NullOrigin,
    /// An `Origin` other than this endpoint's own.
    #[error("cross-site request refused: Origin {origin} is not this endpoint ({own})")]
    Foreign {
        /// The request's `Origin`.
        origin: String,
        /// This endpoint as the request's `Host` names it.
        own: String,
    },
    /// An `Origin`, but no `Host` (or an unreadable one) to compare it with.
    #[error("cross-site request refused: Origin {0} and no Host to compare it with")]
    NoHost(String),
}

/// Refuse a request that a browser sent from another origin: a
/// `Sec-Fetch-Site` other than `same-origin` or `none` (typed by the
/// user), or an `Origin` whose scheme, host and port are not `http://`
/// and the request's `Host` (the endpoint speaks plain HTTP).
///
/// # Errors
/// The [`CrossSite`] reason.
pub fn check(headers: &HeaderMap) -> Result<(), CrossSite> {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = String::from_utf8_lossy(site.as_bytes()).to_ascii_lowercase();
        if !matches!(site.trim(), "same-origin" | "none") {
            return Err(CrossSite::FetchSite(site));
        }
    }
    let Some(origin) = headers.get(ORIGIN) else {
        return Ok(());
    };
    let origin = String::from_utf8_lossy(origin.as_bytes()).trim().to_owned();
    if origin.eq_ignore_ascii_case("null") {
        return Err(CrossSite::NullOrigin);
    }
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::trim)
        .filter(|h| !h.is_empty());
    let Some(own) = host.and_then(|h| endpoint(&format!("http://{h}"))) else {
        return Err(CrossSite::NoHost(origin));
    };
    match endpoint(&origin) {
        Some(theirs) if theirs == own => Ok(()),
        _ => Err(CrossSite::Foreign {
            origin,
            own: format!("http://{}", host.unwrap_or_default()),
        }),
    }
}

/// Scheme, host and port (the scheme's default filled in) of an origin,
/// `scheme://host[:port]` and nothing more.
fn endpoint(origin: &str) -> Option<(String, url::Host, u16)> {
    let url = Url::parse(origin).ok()?;
    let bare = url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none();
    // `Url` adds the `/` path itself; one given in the text is not an origin.
    let has_path = origin
        .split_once("://")
        .is_some_and(|(_, rest)| rest.contains('/'));
    if !bare || has_path {
        return None;
    }
    Some((
        url.scheme().to_owned(),
        url.host()?.to_owned(),
        url.port_or_known_default()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn requests_without_browser_headers_pass() {
        assert_eq!(check(&headers(&[])), Ok(()));
        assert_eq!(check(&headers(&[("host", "127.0.0.1:9900")])), Ok(()));
    }

    #[test]
    fn the_endpoints_own_origin_passes() {
        for (host, origin) in [
            ("127.0.0.1:9900", "http://127.0.0.1:9900"),
            ("localhost:9900", "http://LOCALHOST:9900"),
            ("[::1]:9900", "http://[::1]:9900"),
            ("[0:0::1]:9900", "http://[::1]:9900"),
            ("admin.example", "http://admin.example:80"),
            ("admin.example:80", "http://admin.example"),
        ] {
            let h = headers(&[
                ("host", host),
                ("origin", origin),
                ("sec-fetch-site", "same-origin"),
            ]);
            assert_eq!(check(&h), Ok(()), "{host} {origin}");
        }
        // Typed into the address bar, or a bookmark.
        let h = headers(&[("host", "127.0.0.1:9900"), ("sec-fetch-site", "none")]);
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn another_origin_is_refused() {
        for origin in [
            "http://127.0.0.1:9901",
            "http://localhost:9900",
            "https://127.0.0.1:9900",
            "http://evil.example",
            "http://127.0.0.1:9900.evil.example",
            "http://user@127.0.0.1:9900",
            "http://127.0.0.1:9900/",
            "file://",
            "not an origin",
        ] {
            let h = headers(&[("host", "127.0.0.1:9900"), ("origin", origin)]);
            assert!(
                matches!(check(&h), Err(CrossSite::Foreign { .. })),
                "{origin}: {:?}",
                check(&h)
            );
        }
        let h = headers(&[("host", "127.0.0.1:9900"), ("origin", "null")]);
        assert_eq!(check(&h), Err(CrossSite::NullOrigin));
        let h = headers(&[("origin", "http://127.0.0.1:9900")]);
        assert!(matches!(check(&h), Err(CrossSite::NoHost(_))));
        let h = headers(&[("host", "x/y"), ("origin", "http://x")]);
        assert!(matches!(check(&h), Err(CrossSite::NoHost(_))));
    }

    #[test]
    fn sec_fetch_site_from_another_site_is_refused_even_without_origin() {
        for site in ["cross-site", "Cross-Site", "same-site"] {
            let h = headers(&[("host", "127.0.0.1:9900"), ("sec-fetch-site", site)]);
            assert!(matches!(check(&h), Err(CrossSite::FetchSite(_))), "{site}");
        }
        // Even with a matching Origin.
        let h = headers(&[
            ("host", "127.0.0.1:9900"),
            ("origin", "http://127.0.0.1:9900"),
            ("sec-fetch-site", "cross-site"),
        ]);
        assert!(matches!(check(&h), Err(CrossSite::FetchSite(_))));
    }

    #[test]
    fn the_refusal_names_the_origin_and_the_endpoint() {
        let h = headers(&[
            ("host", "127.0.0.1:9900"),
            ("origin", "http://evil.example"),
        ]);
        let msg = check(&h).unwrap_err().to_string();
        assert_eq!(
            msg,
            "cross-site request refused: Origin http://evil.example is not this endpoint (http://127.0.0.1:9900)"
        );
    }
}
