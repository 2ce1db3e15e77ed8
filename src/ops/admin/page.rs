//! `GET /`: the status page. One HTML file (`page.html`) with its style
//! and script inline, built into the binary, served under a
//! Content-Security-Policy that admits exactly that style and script (by
//! their SHA-256) and requests back to this endpoint, nothing else.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use sha2::{Digest, Sha256};

const HTML: &str = include_str!("page.html");

/// The page and its headers, computed once when the endpoint starts.
pub struct Page {
    csp: HeaderValue,
}

impl Page {
    /// The page of this build.
    pub fn new() -> Page {
        let hash = |tag| inline(HTML, tag).map_or_else(String::new, sha256_source);
        let csp = format!(
            "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; \
             img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            hash("script"),
            hash("style"),
        );
        Page {
            // Only ASCII goes into it: quotes, base64 and keywords.
            csp: HeaderValue::from_str(&csp)
                .unwrap_or(HeaderValue::from_static("default-src 'none'")),
        }
    }

    /// The answer to `GET /`.
    pub fn answer(&self) -> Response<Full<Bytes>> {
        let mut answer = Response::new(Full::new(Bytes::from_static(HTML.as_bytes())));
        *answer.status_mut() = StatusCode::OK;
        let headers = answer.headers_mut();
        let fixed = [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            // Revalidated, so a live upgrade's new page is what loads.
            (header::CACHE_CONTROL, "no-cache"),
        ];
        for (name, value) in fixed {
            headers.insert(name, HeaderValue::from_static(value));
        }
        headers.insert(header::CONTENT_SECURITY_POLICY, self.csp.clone());
        answer
    }
}

/// The text between `<tag>` and `</tag>`, the first such element.
fn inline<'a>(html: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = html.find(&open)? + open.len();
    let len = html[start..].find(&format!("</{tag}>"))?;
    Some(&html[start..start + len])
}

/// A CSP source for inline text: `'sha256-<base64>'`.
fn sha256_source(text: &str) -> String {
    format!("'sha256-{}'", base64(&Sha256::digest(text.as_bytes())))
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain}");
        }
    }

    #[test]
    fn the_policy_admits_the_pages_one_style_and_one_script() {
        assert_eq!(HTML.matches("<script").count(), 1, "one script element");
        assert_eq!(HTML.matches("<style").count(), 1, "one style element");
        let (script, style) = (inline(HTML, "script"), inline(HTML, "style"));
        let (script, style) = (script.expect("<script>"), style.expect("<style>"));
        assert!(script.contains("fetch("), "the script is the page's");
        let page = Page::new();
        let answer = page.answer();
        let csp = answer.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains(&format!("script-src {};", sha256_source(script))),
            "{csp}"
        );
        assert!(
            csp.contains(&format!("style-src {};", sha256_source(style))),
            "{csp}"
        );
        assert!(csp.starts_with("default-src 'none';"), "{csp}");
        assert_eq!(
            answer.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert_eq!(answer.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        // No other origin, nothing fetched by the markup, and nothing the
        // policy would block: inline handlers, style attributes.
        for needle in [
            "http://",
            "https://",
            " src=",
            "@import",
            "url(",
            " style=",
            " onclick=",
            " onload=",
        ] {
            assert!(!HTML.contains(needle), "page.html contains {needle:?}");
        }
        let hrefs: Vec<&str> = HTML.split(" href=\"").skip(1).collect();
        for href in hrefs {
            let target = href.split('"').next().unwrap_or_default();
            assert!(
                target == "data:," || !target.contains(':'),
                "page.html links to {target}"
            );
        }
    }
}
