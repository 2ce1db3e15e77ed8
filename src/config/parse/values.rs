//! Config values that check themselves while being deserialized, so that
//! their errors carry serde_yaml's line and column as well as the YAML path.

use std::fmt;
use std::marker::PhantomData;
use std::net::{Ipv6Addr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::discover::{DiscoverTarget, ResolverAddr};
use super::hosts::AdminHost;
use super::identity::{SourceValue, TrustedCidr};
use super::require::ServiceItem;
use crate::config::{ProbeTemplate, SecretUrl};

/// A value read from one YAML scalar. serde_yaml hands any scalar to
/// `deserialize_str` as its source text, so `9333` or `fbc0b6db` arrive here too.
pub(super) trait FromScalar: Sized {
    /// What a valid value looks like, for type errors.
    const EXPECTING: &'static str;
    /// Why an empty list of these is refused.
    const EMPTY_LIST: &'static str = "must not be empty";
    /// Parse and check the scalar; the error becomes the message.
    fn from_scalar(s: &str) -> Result<Self, String>;
}

struct ScalarVisitor<T>(PhantomData<T>);

impl<T: FromScalar> Visitor<'_> for ScalarVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        T::from_scalar(s).map_err(E::custom)
    }
}

macro_rules! scalar_deserialize {
    ($($ty:ty),* $(,)?) => {$(
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(ScalarVisitor(PhantomData))
            }
        }
    )*};
}

scalar_deserialize!(
    Dur<false>,
    Dur<true>,
    KeepaliveSecs,
    KeepaliveCount,
    ListenAddr,
    Cidr,
    HostPort,
    PoolName,
    BackendName,
    MagicHex,
    ProbeUrl,
    DiscoverTarget,
    ResolverAddr,
    AdminHost,
    ServiceItem,
    TrustedCidr,
    SourceValue,
);

/// The longest duration a config value may hold.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// A humantime duration (`500ms`, `10s`, `5m`); `NONZERO` refuses `0s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dur<const NONZERO: bool>(pub(super) Duration);

impl<const NONZERO: bool> FromScalar for Dur<NONZERO> {
    const EXPECTING: &'static str = "a duration like `500ms`, `10s` or `5m`";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let d = humantime::parse_duration(s.trim()).map_err(|e| {
            format!("invalid duration `{s}` ({e}); write it like `500ms`, `10s` or `5m`")
        })?;
        if NONZERO && d.is_zero() {
            return Err("must be more than 0s".into());
        }
        // Far beyond any sane setting, and keeps `Instant + d` from overflowing.
        if d > MAX_DURATION {
            return Err(format!("`{s}` is too long; the most is 365 days"));
        }
        Ok(Dur(d))
    }
}

/// Largest `TCP_KEEPIDLE` / `TCP_KEEPINTVL` Linux accepts, in seconds.
const MAX_KEEPALIVE_SECS: u64 = 32_767;
/// Largest `TCP_KEEPCNT` Linux accepts.
const MAX_KEEPALIVE_COUNT: u32 = 127;

/// A keepalive time: whole seconds within what the kernel accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeepaliveSecs(pub(super) Duration);

impl FromScalar for KeepaliveSecs {
    const EXPECTING: &'static str = "a duration in whole seconds, like `60s`";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let Dur::<true>(d) = Dur::from_scalar(s)?;
        if d.subsec_nanos() != 0 || d.as_secs() > MAX_KEEPALIVE_SECS {
            return Err(format!(
                "must be whole seconds between 1s and {MAX_KEEPALIVE_SECS}s (kernel limit)"
            ));
        }
        Ok(KeepaliveSecs(d))
    }
}

/// Unanswered keepalive probes before the kernel drops a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeepaliveCount(pub(super) u32);

impl FromScalar for KeepaliveCount {
    const EXPECTING: &'static str = "a number from 1 to 127";

    fn from_scalar(s: &str) -> Result<Self, String> {
        match s.trim().parse::<u32>() {
            Ok(n) if (1..=MAX_KEEPALIVE_COUNT).contains(&n) => Ok(KeepaliveCount(n)),
            _ => Err(format!(
                "`{s}` is not a keepalive count from 1 to {MAX_KEEPALIVE_COUNT} (kernel limit)"
            )),
        }
    }
}

/// A socket address to bind: an IP literal and a port, no host names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ListenAddr(pub(super) SocketAddr);

impl FromScalar for ListenAddr {
    const EXPECTING: &'static str = "a listen address like `127.0.0.1:9333` or `[::1]:9333`";
    const EMPTY_LIST: &'static str = "at least one listen address is required";

    fn from_scalar(s: &str) -> Result<Self, String> {
        if let Some(zoned) = super::zone::scoped(s) {
            return zoned
                .map(ListenAddr)
                .map_err(|e| format!("`{s}` is not a listen address: {e}"));
        }
        s.trim().parse().map(ListenAddr).map_err(|_| {
            format!("`{s}` is not an ip:port listen address, like `127.0.0.1:9333` or `[::1]:9333`")
        })
    }
}

/// A client network: CIDR, or a bare IP meaning that one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cidr(pub(super) IpNet);

impl FromScalar for Cidr {
    const EXPECTING: &'static str = "a CIDR like `10.0.0.0/8` or an IP address";
    const EMPTY_LIST: &'static str = "an empty allow list would refuse every client; remove \
         the key for the default (a pool: every client; admin: loopback only)";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let t = s.trim();
        t.parse::<IpNet>()
            .or_else(|_| t.parse::<std::net::IpAddr>().map(IpNet::from))
            .map(Cidr)
            .map_err(|_| format!("`{s}` is not a CIDR like `10.0.0.0/8` or an IP address"))
    }
}

/// A backend address `host:port`; the host is a name, an IPv4 literal or a
/// bracketed IPv6 literal (with a zone: `[fe80::1%eth0]`, kept as the
/// interface's index, the form the resolver reads), and is resolved again at
/// each connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HostPort(pub(super) String);

impl FromScalar for HostPort {
    const EXPECTING: &'static str = "a backend address `host:port`";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("`{s}` is not a backend address `host:port`: {why}");
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(bad("no port"));
        };
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(bad("the port must be a number from 1 to 65535")),
        }
        if let Some(zoned) = super::zone::scoped(s) {
            return zoned.map(|a| HostPort(a.to_string())).map_err(|e| bad(&e));
        }
        if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            if inner.parse::<Ipv6Addr>().is_err() {
                return Err(bad("bad IPv6 address in brackets"));
            }
        } else if host.is_empty() {
            return Err(bad("empty host"));
        } else if host.contains(':') {
            return Err(bad("write an IPv6 address in brackets, like `[::1]:9333`"));
        } else if !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        {
            return Err(bad(
                "the host may hold only letters, digits, `-`, `.` and `_`",
            ));
        }
        Ok(HostPort(s.to_owned()))
    }
}

/// A pool name: `[a-z0-9_-]+`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PoolName(pub(super) String);

impl FromScalar for PoolName {
    const EXPECTING: &'static str = "a pool name matching [a-z0-9_-]+";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
        if s.is_empty() || !s.chars().all(ok) {
            return Err(format!("pool name `{s}` must match [a-z0-9_-]+"));
        }
        Ok(PoolName(s.to_owned()))
    }
}

/// An explicit backend name. It appears in admin URL paths and metric labels,
/// so it may not be empty or hold `/`, whitespace or control characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BackendName(pub(super) String);

impl FromScalar for BackendName {
    const EXPECTING: &'static str = "a backend name";

    fn from_scalar(s: &str) -> Result<Self, String> {
        if s.is_empty()
            || s.chars()
                .any(|c| c == '/' || c.is_whitespace() || c.is_control())
        {
            return Err(format!(
                "backend name `{s}` must be non-empty, without `/`, spaces or control characters"
            ));
        }
        Ok(BackendName(s.to_owned()))
    }
}

/// Message-start bytes in wire order, written as 8 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MagicHex(pub(super) [u8; 4]);

impl FromScalar for MagicHex {
    const EXPECTING: &'static str = "8 hex digits in wire order, like `fbc0b6db`";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let word = (t.len() == 8 && t.chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(t, 16).ok())
            .flatten()
            .ok_or_else(|| {
                format!("magic `{s}` must be 8 hex digits in wire order, like `fbc0b6db`")
            })?;
        Ok(MagicHex(word.to_be_bytes()))
    }
}

/// An http(s) URL for a backend's REST twin, or for a discover entry a
/// template of one (`{ip}`, `{port}`). Errors never echo the input: it may
/// carry credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ProbeUrl {
    /// One URL.
    Url(SecretUrl),
    /// Each member's URL.
    Template(ProbeTemplate),
}

impl FromScalar for ProbeUrl {
    const EXPECTING: &'static str = "an http or https URL";

    fn from_scalar(s: &str) -> Result<Self, String> {
        if super::discover::is_template(s) {
            return super::discover::template(s).map(ProbeUrl::Template);
        }
        let url = url::Url::parse(s.trim()).map_err(|e| format!("probe_url is not a URL: {e}"))?;
        let url = SecretUrl(url);
        if !matches!(url.expose().scheme(), "http" | "https") {
            return Err(format!("probe_url `{url}` must be an http or https URL"));
        }
        Ok(ProbeUrl::Url(url))
    }
}

/// One value or a non-empty list of them (`listen`, `allow`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OneOrMany<T> {
    /// The values in file order.
    pub(super) items: Vec<T>,
    /// Written as a single scalar (its YAML path has no `[i]`).
    pub(super) single: bool,
}

impl<T> OneOrMany<T> {
    /// The YAML path of item `i`, given the path of the key.
    pub(super) fn item_path(&self, key_path: &str, i: usize) -> String {
        if self.single {
            key_path.to_owned()
        } else {
            format!("{key_path}[{i}]")
        }
    }
}

impl<'de, T: FromScalar + Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: FromScalar + Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "{} or a list of them", T::EXPECTING)
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                let one = T::from_scalar(s).map_err(E::custom)?;
                Ok(OneOrMany {
                    items: vec![one],
                    single: true,
                })
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                self.visit_str(&n.to_string())
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<T>()? {
                    items.push(item);
                }
                if items.is_empty() {
                    return Err(de::Error::custom(T::EMPTY_LIST));
                }
                Ok(OneOrMany {
                    items,
                    single: false,
                })
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A backend entry: the short form `host:port` or the long form mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawBackend {
    pub(super) name: Option<BackendName>,
    /// Where it is; `None` for a discover entry.
    pub(super) addr: Option<HostPort>,
    /// What to look up instead of an `addr`.
    pub(super) discover: Option<DiscoverTarget>,
    pub(super) backup: bool,
    pub(super) probe_url: Option<ProbeUrl>,
}

/// The long form, derived so that an unknown key is an error naming the path.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LongBackend {
    name: Option<BackendName>,
    addr: Option<HostPort>,
    discover: Option<DiscoverTarget>,
    backup: Option<bool>,
    probe_url: Option<ProbeUrl>,
}

// A custom visitor rather than `#[serde(untagged)]`: untagged enums replace
// every inner error with "data did not match any variant".
impl<'de> Deserialize<'de> for RawBackend {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawBackend;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`host:port` or a mapping with `addr` (or `discover`) and optional `name`, `backup`, `probe_url`")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawBackend, E> {
                let addr = HostPort::from_scalar(s).map_err(E::custom)?;
                Ok(RawBackend {
                    name: None,
                    addr: Some(addr),
                    discover: None,
                    backup: false,
                    probe_url: None,
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawBackend, A::Error> {
                let long = LongBackend::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawBackend {
                    name: long.name,
                    addr: long.addr,
                    discover: long.discover,
                    backup: long.backup.unwrap_or(false),
                    probe_url: long.probe_url,
                })
            }
        }
        d.deserialize_any(V)
    }
}
