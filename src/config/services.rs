//! Node service bits: the names of the bits a Bitcoin-family node announces
//! in its `version` (Litecoin Core's `protocol.h`), and the mask that
//! `health.require_services` asks of a `bitcoin-p2p` backend.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A set of service bits, as a node's `version` carries them.
///
/// Shown (`Display`, JSON) as lower-case hex: `0x1800049`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Services(pub u64);

/// The bits we know by name, in the order [`Services::names`] lists them.
const NAMED: [(&str, u64); 7] = [
    ("network", 1 << 0),
    ("bloom", 1 << 2),
    ("witness", 1 << 3),
    ("compact_filters", 1 << 6),
    ("network_limited", 1 << 10),
    ("mweb_light_client", 1 << 23),
    ("mweb", 1 << 24),
];

impl Services {
    /// No bits.
    pub const NONE: Services = Services(0);

    /// What mwebd demands of every peer: network, witness,
    /// compact_filters, mweb and mweb_light_client (`0x1800049`).
    pub const MWEBD: Services = Services(1 | 1 << 3 | 1 << 6 | 1 << 23 | 1 << 24);

    /// The name of the [`Services::MWEBD`] preset in config.yaml.
    pub const MWEBD_PRESET: &'static str = "mwebd";

    /// The bit called `name` (`compact_filters`), if it is one we know.
    pub fn named(name: &str) -> Option<Services> {
        NAMED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, bit)| Services(*bit))
    }

    /// Every name [`Services::named`] knows, in bit order.
    pub fn known_names() -> impl Iterator<Item = &'static str> {
        NAMED.iter().map(|(name, _)| *name)
    }

    /// The names of the known bits set, in bit order; unknown bits are
    /// left out (the hex shows them).
    pub fn names(self) -> Vec<&'static str> {
        NAMED
            .iter()
            .filter(|(_, bit)| self.0 & bit != 0)
            .map(|(name, _)| *name)
            .collect()
    }

    /// The bits set that have no name.
    pub fn unnamed(self) -> Services {
        let known = NAMED.iter().fold(0, |all, (_, bit)| all | bit);
        Services(self.0 & !known)
    }

    /// No bit set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The bits of `self` that `have` lacks.
    pub fn missing_from(self, have: Services) -> Services {
        Services(self.0 & !have.0)
    }

    /// Both sets of bits.
    pub fn union(self, other: Services) -> Services {
        Services(self.0 | other.0)
    }

    /// A `0x` hex mask, as `require_services` takes it; `None` when `text`
    /// is not `0x` followed by 1 to 16 hex digits.
    pub fn from_hex(text: &str) -> Option<Services> {
        let digits = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))?;
        let valid =
            (1..=16).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_hexdigit());
        valid
            .then(|| u64::from_str_radix(digits, 16).ok())
            .flatten()
            .map(Services)
    }

    /// The names of the known bits and the hex of the rest, comma
    /// separated: `compact_filters, mweb_light_client`, or with an unnamed
    /// bit `witness, 0x100000000`.
    pub fn describe(self) -> String {
        let mut parts: Vec<String> = self.names().iter().map(|n| (*n).to_owned()).collect();
        let rest = self.unnamed();
        if !rest.is_empty() {
            parts.push(rest.to_string());
        }
        parts.join(", ")
    }
}

impl fmt::Display for Services {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl Serialize for Services {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Services {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Hex;
        impl Visitor<'_> for Hex {
            type Value = Services;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("service bits as a `0x` hex string")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Services, E> {
                Services::from_hex(s).ok_or_else(|| E::custom(format!("`{s}` is no `0x` mask")))
            }
        }
        d.deserialize_str(Hex)
    }
}
