//! Which admin endpoint a command talks to, and why that one: `--admin`,
//! else the config's `admin.listen`, else the default address. When the
//! default was used, errors say what was wrong with the config (and `-c`
//! or the environment naming that config gets a warning first).

use std::path::{Path, PathBuf};

use crate::config::Config;

/// The address used when neither `--admin` nor a config names one.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9900";

/// An admin endpoint to call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    addr: String,
    source: Source,
}

/// Where a [`Instance`]'s address came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// `--admin`.
    Flag,
    /// `admin.listen` of this config file.
    Config(PathBuf),
    /// [`DEFAULT_ADMIN`], for this reason (`None` once a warning said it).
    Default(Option<String>),
}

impl Instance {
    /// `--admin ADDR` when given, else the `admin.listen` of the config at
    /// `config`, else [`DEFAULT_ADMIN`], remembering why (a config that is
    /// missing, invalid or has no `admin.listen`), whoever named the file.
    pub fn resolve(flag: Option<String>, config: &Path) -> Instance {
        if let Some(addr) = flag {
            return Instance {
                addr,
                source: Source::Flag,
            };
        }
        let why = match std::fs::metadata(config) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                format!("no config file at {}", config.display())
            }
            _ => match Config::load_unchecked(config) {
                Ok(Config {
                    admin: Some(admin), ..
                }) => {
                    return Instance {
                        addr: admin.listen.to_string(),
                        source: Source::Config(config.to_owned()),
                    };
                }
                Ok(_) => format!("{} has no admin.listen", config.display()),
                Err(e) => format!("the config could not be used ({e})"),
            },
        };
        Instance {
            addr: DEFAULT_ADMIN.to_owned(),
            source: Source::Default(Some(why)),
        }
    }

    /// Why [`DEFAULT_ADMIN`] is used, when it is: for a warning where a
    /// config was named (`-c`, the environment) and gave no address.
    pub fn defaulted(&self) -> Option<String> {
        match &self.source {
            Source::Default(Some(why)) => Some(format!("{why}; trying {DEFAULT_ADMIN}")),
            Source::Default(None) | Source::Flag | Source::Config(_) => None,
        }
    }

    /// The same, its reason already given in a warning: no error repeats it.
    pub fn warned(self) -> Instance {
        let source = match self.source {
            Source::Default(_) => Source::Default(None),
            other => other,
        };
        Instance { source, ..self }
    }

    /// An address given on the command line.
    pub fn given(addr: impl Into<String>) -> Instance {
        Instance {
            addr: addr.into(),
            source: Source::Flag,
        }
    }

    /// The address, `host:port` or `http://host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Where the address came from, for a message about it: empty for
    /// `--admin`, ` (admin.listen of FILE)` for a config.
    pub fn origin(&self) -> String {
        match &self.source {
            Source::Flag => String::new(),
            Source::Config(path) => format!(" (admin.listen of {})", path.display()),
            Source::Default(_) => " (the default)".to_owned(),
        }
    }

    /// For errors that suggest the address is wrong: a line saying why the
    /// default was used, with what to do; empty otherwise.
    pub fn note(&self) -> String {
        match &self.source {
            Source::Default(Some(why)) => format!(
                "\nnote: no --admin given and {why}, so {DEFAULT_ADMIN} was tried; \
                 pass --admin ADDR, or -c the running instance's config"
            ),
            Source::Default(None) | Source::Flag | Source::Config(_) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_then_the_config_then_the_default_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        let flagged = Instance::resolve(Some("127.0.0.1:1".to_owned()), &path);
        assert_eq!(
            (flagged.addr(), flagged.note()),
            ("127.0.0.1:1", String::new())
        );

        let missing = Instance::resolve(None, &path);
        assert_eq!(missing.addr(), DEFAULT_ADMIN);
        let note = missing.note();
        assert!(
            note.contains(&format!("no config file at {}", path.display())),
            "{note}"
        );
        assert!(note.contains("--admin ADDR"), "{note}");

        std::fs::write(&path, "pools: [ { name: BAD } ]\n").unwrap();
        let invalid = Instance::resolve(None, &path);
        assert_eq!(invalid.addr(), DEFAULT_ADMIN);
        assert!(
            invalid.note().contains("the config could not be used ("),
            "{}",
            invalid.note()
        );
        assert!(invalid.note().contains("config.yaml"), "{}", invalid.note());

        let pool =
            "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends: [\"127.0.0.1:9\"]\n";
        std::fs::write(&path, pool).unwrap();
        let bare = Instance::resolve(None, &path);
        assert!(
            bare.note().contains("has no admin.listen"),
            "{}",
            bare.note()
        );

        std::fs::write(
            &path,
            format!("admin: {{ listen: 127.0.0.1:9911 }}\n{pool}"),
        )
        .unwrap();
        let configured = Instance::resolve(None, &path);
        assert_eq!(configured.addr(), "127.0.0.1:9911");
        assert_eq!(configured.note(), "");
        assert!(
            configured.origin().contains("admin.listen of"),
            "{}",
            configured.origin()
        );
    }

    #[test]
    fn a_config_that_gives_no_address_falls_back_to_the_default_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        let why = |path: &Path| {
            let t = Instance::resolve(None, path);
            assert_eq!(t.addr(), DEFAULT_ADMIN);
            t.defaulted().expect("defaulted")
        };
        assert!(why(&path).contains("no config file at"), "{}", why(&path));
        std::fs::write(&path, "pools: [ { name: BAD } ]\n").unwrap();
        assert!(why(&path).contains("pools[0].name"), "{}", why(&path));
        let pool =
            "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends: [\"127.0.0.1:9\"]\n";
        std::fs::write(&path, pool).unwrap();
        assert!(why(&path).contains("has no admin.listen"), "{}", why(&path));
        assert!(
            why(&path).ends_with("trying 127.0.0.1:9900"),
            "{}",
            why(&path)
        );
        // --admin needs no config at all, and a config's address is no default.
        let flagged = Instance::resolve(Some("127.0.0.1:1".to_owned()), &path);
        assert_eq!((flagged.addr(), flagged.defaulted()), ("127.0.0.1:1", None));
        std::fs::write(
            &path,
            format!("admin: {{ listen: 127.0.0.1:9911 }}\n{pool}"),
        )
        .unwrap();
        assert_eq!(Instance::resolve(None, &path).defaulted(), None);
    }
}
