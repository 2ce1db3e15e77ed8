//! The `Host` rule as a table: what a browser sends in each situation, and
//! what a rebinding page sends.

use hyper::header::HeaderValue;

use super::*;

const LOCAL: &str = "127.0.0.1";

fn checked(hosts: &[&str], uri: &str, local: &str, listed: &[&str]) -> Result<(), Misdirected> {
    let mut headers = HeaderMap::new();
    for h in hosts {
        headers.append(HOST, HeaderValue::from_str(h).unwrap());
    }
    let hosts = Hosts {
        listen: "0.0.0.0".parse().unwrap(),
        names: listed.iter().map(|s| (*s).to_owned()).collect(),
    };
    hosts.check(&headers, &uri.parse().unwrap(), local.parse().unwrap())
}

#[test]
fn the_endpoints_own_names_pass_with_any_port() {
    for host in [
        "127.0.0.1:9900",
        "127.0.0.1",
        "127.0.0.2:8080",
        "localhost:9900",
        "LOCALHOST",
        "localhost.:9900",
        "[::1]:9900",
        "[0:0::1]",
        "[::ffff:127.0.0.1]:9900",
    ] {
        assert_eq!(checked(&[host], "/status", LOCAL, &[]), Ok(()), "{host}");
    }
    // No Host at all: HTTP/1.0, no browser.
    assert_eq!(checked(&[], "/status", LOCAL, &[]), Ok(()));
}

#[test]
fn the_address_connected_to_passes_on_a_wildcard_listener() {
    assert_eq!(checked(&["10.0.0.5:9900"], "/", "10.0.0.5", &[]), Ok(()));
    assert_eq!(
        checked(&["[2001:db8::5]:9900"], "/", "2001:db8::5", &[]),
        Ok(())
    );
    assert!(checked(&["10.0.0.6:9900"], "/", "10.0.0.5", &[]).is_err());
    // The listen address as configured: what the CLI sends.
    assert_eq!(checked(&["0.0.0.0:9900"], "/", "127.0.0.1", &[]), Ok(()));
}

#[test]
fn a_rebinding_page_is_misdirected() {
    for host in [
        "evil.example:9900",
        "evil.example",
        "localhost.evil.example",
        "127.0.0.1.evil.example",
        "evil.example:9900:1",
        "[::1",
        "[::1]x",
        ":9900",
        "",
    ] {
        let err = checked(&[host], "/status", LOCAL, &[]).unwrap_err();
        assert_eq!(err, Misdirected(host.to_owned()));
    }
    let err = checked(&["evil.example:9900"], "/", LOCAL, &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Host evil.example:9900 is not a name of this admin endpoint; add it to admin.hosts to use that name"
    );
    // A good Host beside a bad one, or a bad absolute target.
    assert!(checked(&["localhost", "evil.example"], "/", LOCAL, &[]).is_err());
    assert!(checked(&["localhost"], "http://evil.example/status", LOCAL, &[]).is_err());
    assert_eq!(
        checked(&["localhost"], "http://localhost:9900/status", LOCAL, &[]),
        Ok(())
    );
}

#[test]
fn names_in_admin_hosts_pass() {
    let listed = ["proxy.example", "10.9.9.9", "2001:db8::9"];
    for host in [
        "proxy.example:9900",
        "PROXY.example.",
        "10.9.9.9:80",
        "[2001:db8::9]:9900",
    ] {
        assert_eq!(checked(&[host], "/", LOCAL, &listed), Ok(()), "{host}");
    }
    assert!(checked(&["other.example"], "/", LOCAL, &listed).is_err());
    assert!(checked(&["sub.proxy.example"], "/", LOCAL, &listed).is_err());
}
