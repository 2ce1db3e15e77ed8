//! `admin.hosts`: names (or addresses) the admin endpoint answers to in a
//! request's `Host`, besides the address it listens on, `localhost` and
//! loopback addresses. Any port goes with each.

use std::net::IpAddr;

use super::values::FromScalar;

/// Longest DNS name, and longest label in one.
const MAX_NAME: usize = 253;
const MAX_LABEL: usize = 63;

/// One entry of `admin.hosts`, normalised as the admin endpoint compares
/// it: a name in lower case without a final dot, or an address as
/// `IpAddr` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct AdminHost(pub(super) String);

impl FromScalar for AdminHost {
    const EXPECTING: &'static str =
        "a host name like `proxy.example` or an IP address, without a port";
    const EMPTY_LIST: &'static str = "must not be empty; leave the key out to answer only to \
         the listen address, localhost and loopback addresses";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let text = s.trim();
        let bare = text
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(text);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(AdminHost(ip.to_canonical().to_string()));
        }
        let bad = |why: &str| format!("`{s}` is not a host name: {why}");
        if text.contains("://") || text.contains('/') {
            return Err(bad("write the name alone, without a scheme or a path"));
        }
        if text.contains(':') {
            return Err(bad("write it without a port; any port is accepted"));
        }
        let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(bad(&format!("a name has 1 to {MAX_NAME} characters")));
        }
        for label in name.split('.') {
            let fits = (1..=MAX_LABEL).contains(&label.len())
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !fits {
                return Err(bad(&format!(
                    "each dot-separated part has 1 to {MAX_LABEL} letters, digits, `-` or `_`"
                )));
            }
        }
        Ok(AdminHost(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses_are_normalised() {
        for (given, kept) in [
            ("Proxy.Example", "proxy.example"),
            ("proxy.example.", "proxy.example"),
            (" pin-proxy ", "pin-proxy"),
            ("10.0.0.5", "10.0.0.5"),
            ("[::1]", "::1"),
            ("2001:DB8::1", "2001:db8::1"),
            ("::ffff:10.0.0.5", "10.0.0.5"),
        ] {
            assert_eq!(AdminHost::from_scalar(given), Ok(AdminHost(kept.into())));
        }
    }

    #[test]
    fn ports_schemes_and_odd_characters_are_refused() {
        for (given, says) in [
            ("proxy.example:9900", "without a port"),
            ("http://proxy.example", "without a scheme"),
            ("proxy.example/status", "without a scheme or a path"),
            ("", "1 to 253"),
            (".", "1 to 253"),
            ("a..b", "each dot-separated part"),
            ("*.example", "each dot-separated part"),
            ("exa mple", "each dot-separated part"),
        ] {
            let err = AdminHost::from_scalar(given).unwrap_err();
            assert!(err.contains(says), "{given}: {err}");
        }
        let long = format!("{}.example", "a".repeat(64));
        assert!(AdminHost::from_scalar(&long).is_err());
    }
}
