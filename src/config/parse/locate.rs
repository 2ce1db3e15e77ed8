//! Finds the line and column of a YAML path such as `pools[1].backends[0]`,
//! for errors found after deserializing (duplicates, cross-field rules).
//!
//! It walks the document again with a seed that follows the path and fails
//! on the target node: serde_yaml stamps that failure with the node's mark.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The failure raised on the target node; recognised by its text.
const HERE: &str = "pin-proxy: located";

#[derive(Debug, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// `(line, column)`, both from 1, of the node at `path`; `None` when the path
/// is not in the document (a built-in default) or cannot be read.
pub(super) fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let segs = segments(path)?;
    let de = serde_yaml::Deserializer::from_str(text);
    match Locate(&segs).deserialize(de) {
        Err(e) if e.to_string().contains(HERE) => e.location().map(|l| (l.line(), l.column())),
        _ => None,
    }
}

/// `a.b[2].c` into `[Key(a), Key(b), Index(2), Key(c)]`.
fn segments(path: &str) -> Option<Vec<Seg>> {
    let mut segs = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
        if !key.is_empty() {
            segs.push(Seg::Key(key.to_owned()));
        }
        while !rest.is_empty() {
            let (index, after) = rest.split_once(']')?;
            segs.push(Seg::Index(index.parse().ok()?));
            rest = after.strip_prefix('[').unwrap_or(after);
        }
    }
    Some(segs)
}

struct Locate<'a>(&'a [Seg]);

impl Locate<'_> {
    fn scalar<E: de::Error>(&self) -> Result<(), E> {
        if self.0.is_empty() {
            Err(E::custom(HERE))
        } else {
            Ok(())
        }
    }
}

impl<'de> DeserializeSeed<'de> for Locate<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Locate<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (index, rest) = match self.0 {
            [] => return self.scalar(),
            [Seg::Index(i), rest @ ..] => (*i, rest),
            [Seg::Key(_), ..] => return Ok(()),
        };
        for _ in 0..index {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Locate(rest)).map(|_| ())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (key, rest) = match self.0 {
            [] => return self.scalar(),
            [Seg::Key(k), rest @ ..] => (k, rest),
            [Seg::Index(_), ..] => return Ok(()),
        };
        while let Some(k) = map.next_key::<serde_yaml::Value>()? {
            if k.as_str() == Some(key.as_str()) {
                return map.next_value_seed(Locate(rest));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_paths() {
        let want = vec![
            Seg::Key("pools".into()),
            Seg::Index(1),
            Seg::Key("backends".into()),
            Seg::Index(0),
            Seg::Key("addr".into()),
        ];
        assert_eq!(segments("pools[1].backends[0].addr"), Some(want));
        assert_eq!(segments("a[x]"), None);
    }

    #[test]
    fn finds_nodes() {
        let text = "a: 1\npools:\n  - name: x\n  - name: y\n    backends: [h:1, \"h:2\"]\n";
        assert_eq!(locate(text, "a"), Some((1, 4)));
        assert_eq!(locate(text, "pools[1].name"), Some((4, 11)));
        assert_eq!(locate(text, "pools[1].backends[1]"), Some((5, 21)));
        assert_eq!(locate(text, "pools[1]"), Some((4, 5)));
        assert_eq!(locate(text, "pools[2].name"), None);
        assert_eq!(locate(text, "defaults.health"), None);
    }
}
