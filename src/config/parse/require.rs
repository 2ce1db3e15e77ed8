//! `health.require_services` and `health.min_protocol_version`: what a
//! `bitcoin-p2p` backend must announce in its `version` to be given
//! clients. Only that probe reads a node's `version`, so either key with
//! another probe is an error.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::error::{Invalid, invalid};
use super::raw::RawHealth;
use super::values::FromScalar;
use crate::config::{HealthConfig, ProbeKind, Services};

/// One item of `require_services`: a service name, the `mwebd` preset,
/// or a `0x` hex mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ServiceItem(pub(super) Services);

impl FromScalar for ServiceItem {
    const EXPECTING: &'static str = "a service name, `mwebd` or a `0x` hex mask";

    fn from_scalar(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.starts_with("0x") || t.starts_with("0X") {
            return Services::from_hex(t).map(ServiceItem).ok_or_else(|| {
                format!(
                    "`{s}` is not a hex mask: write `0x` and 1 to 16 hex digits, like `0x1800049`"
                )
            });
        }
        if t == Services::MWEBD_PRESET {
            return Ok(ServiceItem(Services::MWEBD));
        }
        Services::named(t).map(ServiceItem).ok_or_else(|| {
            let known: Vec<&str> = Services::known_names().collect();
            format!(
                "unknown service `{s}`; known: {}, the preset `{}` ({}), or a `0x` hex mask",
                known.join(", "),
                Services::MWEBD_PRESET,
                Services::MWEBD
            )
        })
    }
}

/// `require_services` as written: one item or a list of them, meaning
/// every bit any of them names. An empty list (or `0x0`) requires nothing,
/// which lets a pool drop what `defaults` requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RequiredServices(pub(super) Services);

impl<'de> Deserialize<'de> for RequiredServices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RequiredServices;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "{} or a list of them", ServiceItem::EXPECTING)
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<RequiredServices, E> {
                let item = ServiceItem::from_scalar(s).map_err(E::custom)?;
                Ok(RequiredServices(item.0))
            }

            // A mask written without quotes (`0x1800049`) is a YAML integer.
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<RequiredServices, E> {
                Ok(RequiredServices(Services(n)))
            }

            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<RequiredServices, A::Error> {
                let mut all = Services::NONE;
                while let Some(item) = seq.next_element::<ServiceItem>()? {
                    all = all.union(item.0);
                }
                Ok(RequiredServices(all))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether a `health` mapping sets a key.
type SetIn = fn(&RawHealth) -> bool;

/// Either key with a probe that reads no `version` is an error, blamed on
/// the line that set it: the pool's own, or `defaults`.
pub(super) fn check(
    at: &str,
    pool: &str,
    own: Option<&RawHealth>,
    defaults: Option<&RawHealth>,
    health: &HealthConfig,
) -> Result<(), Invalid> {
    if health.probe == ProbeKind::BitcoinP2p {
        return Ok(());
    }
    let set_here: [(&str, bool, SetIn); 2] = [
        (
            "require_services",
            !health.require_services.is_empty(),
            |h| h.require_services.is_some(),
        ),
        (
            "min_protocol_version",
            health.min_protocol_version.is_some(),
            |h| h.min_protocol_version.is_some(),
        ),
    ];
    for (key, in_effect, set) in set_here {
        if !in_effect {
            continue;
        }
        let path = if own.is_some_and(set) {
            format!("{at}.health.{key}")
        } else if defaults.is_some_and(set) {
            format!("defaults.health.{key}")
        } else {
            continue;
        };
        let hint = if path.starts_with("defaults") {
            "; set it in the bitcoin-p2p pools rather than in defaults"
        } else {
            ""
        };
        return invalid(
            path,
            format!(
                "needs `probe: bitcoin-p2p` (pool `{pool}` probes with `{}`): only a P2P \
                 node's `version` announces its services and protocol{hint}",
                health.probe.as_str()
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
#[path = "require_tests.rs"]
mod tests;
