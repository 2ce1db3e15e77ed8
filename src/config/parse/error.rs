//! `ConfigError`: why a config file was rejected, as one redacted line.

use std::fmt;
use std::path::{Path, PathBuf};

use super::locate::locate;

/// Why a config file was rejected.
///
/// `Display` is one line: `{file}: {yaml.path}: {message} (line L, column C)`;
/// the path part is left out for whole-file errors and the position when it is
/// unknown. Credentials found in echoed input (URL userinfo, query strings) are
/// masked before they are stored, so no form of this error leaks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    file: PathBuf,
    path: Option<String>,
    message: String,
    line_column: Option<(usize, usize)>,
}

/// A rule broken after deserializing: the YAML path and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Invalid {
    pub(super) path: String,
    pub(super) message: String,
}

/// Shorthand for an [`Invalid`] result.
pub(super) fn invalid<T>(
    path: impl Into<String>,
    message: impl Into<String>,
) -> Result<T, Invalid> {
    Err(Invalid {
        path: path.into(),
        message: message.into(),
    })
}

impl ConfigError {
    /// The file could not be read.
    pub(crate) fn io(file: &Path, err: &std::io::Error) -> ConfigError {
        ConfigError::new(file, None, &format!("cannot read the file: {err}"), None)
    }

    /// The file is over the size limit.
    pub(crate) fn too_large(file: &Path, limit: u64) -> ConfigError {
        let message = format!(
            "the file is larger than {} MiB; a config file is never that big",
            limit >> 20
        );
        ConfigError::new(file, None, &message, None)
    }

    /// Flow collections (`[` `{`) nested deeper than `limit`, first at
    /// `line_column`.
    pub(crate) fn too_deep(file: &Path, limit: usize, line_column: (usize, usize)) -> ConfigError {
        let message =
            format!("`[` and `{{` nested more than {limit} levels deep; a config file never is");
        ConfigError::new(file, None, &message, Some(line_column))
    }

    /// A syntax or type error from serde_yaml, with the path serde_path_to_error tracked.
    pub(super) fn from_serde(
        file: &Path,
        text: &str,
        err: &serde_path_to_error::Error<serde_yaml::Error>,
    ) -> ConfigError {
        // serde_path_to_error writes `?` for a segment it could not name
        // (where a syntax error broke off); keep the part that is known.
        let full = err.path().to_string();
        let known = full
            .split(".?")
            .next()
            .unwrap_or_default()
            .trim_end_matches('?');
        let path = Some(known.to_owned()).filter(|p| !p.is_empty() && p != ".");
        let inner = err.inner();
        let line_column = inner
            .location()
            .map(|l| (l.line(), l.column()))
            .or_else(|| path.as_deref().and_then(|p| locate(text, p)));
        ConfigError::new(file, path, &bare_message(inner), line_column)
    }

    /// A rule broken after deserializing; the position is looked up by path.
    pub(super) fn from_invalid(file: &Path, text: &str, inv: Invalid) -> ConfigError {
        let line_column = locate(text, &inv.path);
        ConfigError::new(file, Some(inv.path), &inv.message, line_column)
    }

    fn new(
        file: &Path,
        path: Option<String>,
        message: &str,
        line_column: Option<(usize, usize)>,
    ) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            path: path.map(|p| clip(&redact(&p))),
            message: clip(&redact(message)),
            line_column,
        }
    }

    /// The config file this error is about.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The YAML path of the offending value (`pools[1].backends[0].addr`);
    /// `None` for whole-file errors.
    pub fn yaml_path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// What is wrong, without file, path or position.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Line and column, both counted from 1, where known.
    pub fn line_column(&self) -> Option<(usize, usize)> {
        self.line_column
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(path) = &self.path {
            write!(f, "{path}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some((line, column)) = self.line_column {
            write!(f, " (line {line}, column {column})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// serde_yaml's text without the path prefix and position it adds itself:
/// we print both in our own format.
fn bare_message(err: &serde_yaml::Error) -> String {
    let mut text = err.to_string();
    if let Some(l) = err.location() {
        let at = format!(" at line {} column {}", l.line(), l.column());
        if let Some(i) = text.find(&at) {
            text.replace_range(i..i + at.len(), "");
        }
    }
    let is_path = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.[]?".contains(c))
    };
    match text.split_once(": ") {
        Some((head, rest)) if is_path(head) => rest.to_owned(),
        _ => text,
    }
}

/// Masks credentials in free text: the userinfo of anything shaped like
/// `scheme://user:pass@host` or `user:pass@host`, and everything after a `?`.
/// Also flattens control characters so the error stays one line.
pub(super) fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut token = String::new();
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if c.is_whitespace() || "\"'`,(){}<>".contains(c) {
            out.push_str(&redact_token(&token));
            token.clear();
            out.push(c);
        } else {
            token.push(c);
        }
    }
    out.push_str(&redact_token(&token));
    out
}

fn redact_token(token: &str) -> String {
    let (head, has_query) = match token.split_once('?') {
        Some((head, query)) if !query.is_empty() => (head, true),
        _ => (token, false),
    };
    let (scheme, rest) = match head.find("://") {
        Some(i) => head.split_at(i + 3),
        None => ("", head),
    };
    let authority = if scheme.is_empty() {
        rest
    } else {
        rest.split('/').next().unwrap_or(rest)
    };
    let mut out = scheme.to_owned();
    match authority.rfind('@') {
        Some(at) => {
            out.push_str("***");
            out.push_str(&rest[at..]);
        }
        None => out.push_str(rest),
    }
    if has_query {
        out.push_str("?***");
    }
    out
}

/// The longest path or message kept: an error echoes input (a key, a
/// value), and a huge one must not make a huge log line.
const MAX_ECHO: usize = 512;

/// `text`, cut to [`MAX_ECHO`] bytes (on a character boundary) with `…`.
fn clip(text: &str) -> String {
    if text.len() <= MAX_ECHO {
        return text.to_owned();
    }
    let mut end = MAX_ECHO;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_userinfo_and_query() {
        let cases = [
            (
                "got \"http://u:hunter2@h:1/api/?token=s3cr3t\"",
                "got \"http://***@h:1/api/?***\"",
            ),
            ("got `u:hunter2@h:9333`", "got `***@h:9333`"),
            ("https://h/x@y?", "https://h/x@y?"),
            ("plain words, nothing: here", "plain words, nothing: here"),
            ("a\nb", "a b"),
        ];
        for (input, want) in cases {
            assert_eq!(redact(input), want, "{input}");
        }
    }

    #[test]
    fn displays_one_line() {
        let e = ConfigError::new(
            Path::new("c.yaml"),
            Some("pools[0].name".into()),
            "bad",
            Some((3, 9)),
        );
        assert_eq!(
            e.to_string(),
            "c.yaml: pools[0].name: bad (line 3, column 9)"
        );
        let e = ConfigError::new(Path::new("c.yaml"), None, "bad", None);
        assert_eq!(e.to_string(), "c.yaml: bad");
    }
}
