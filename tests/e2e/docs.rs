//! README's list of log events and of `closed` reasons is complete: every
//! event the code logs (the message of each `tracing` macro call under
//! `src/`, the demo's own aside) has a row, and so has every close reason.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("read README.md")
}

/// Every `.rs` file under `dir`, tests and the demo left out.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "sim" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && !name.ends_with("_tests.rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The part of `text` before its `#[cfg(test)]` module.
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |i| &text[..i])
}

/// The last string literal of each `info!(`, `warn!(`, ... call in `text`:
/// the event's name.
fn events_in(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for mac in ["trace!(", "debug!(", "info!(", "warn!(", "error!("] {
        let mut rest = text;
        while let Some(at) = rest.find(mac) {
            let call = &rest[at + mac.len()..];
            let (last, len) = last_literal(call);
            if let Some(name) = last {
                found.push(name);
            }
            rest = &call[len..];
        }
    }
    found
}

/// Scan a macro's arguments up to its closing parenthesis: the last
/// string literal in them, and how many bytes were read.
fn last_literal(call: &str) -> (Option<String>, usize) {
    let bytes = call.as_bytes();
    let (mut depth, mut i, mut last) = (1usize, 0, None);
    while i < bytes.len() {
        match bytes[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return (last, i + 1);
                }
            }
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                last = Some(call[start..i.min(call.len())].to_owned());
            }
            _ => {}
        }
        i += 1;
    }
    (last, bytes.len())
}

#[test]
fn every_logged_event_has_a_row_in_the_readme() {
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    let mut events = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        events.extend(events_in(without_tests(&text)));
    }
    assert!(events.len() > 50, "found only {events:?}");
    let readme = readme();
    let missing: Vec<&String> = events
        .iter()
        .filter(|e| !readme.contains(&format!("| `{e}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "events without a README row: {missing:?}"
    );
}

#[test]
fn every_close_reason_has_a_row_in_the_readme() {
    let close = std::fs::read_to_string(root().join("src/pool/close.rs")).expect("close.rs");
    let reasons: Vec<&str> = close
        .lines()
        .filter_map(|l| l.trim().strip_prefix("CloseReason::"))
        .filter_map(|l| {
            l.split_once("=> \"")
                .map(|(_, r)| r.trim_end_matches("\","))
        })
        .collect();
    assert!(reasons.len() >= 10, "{reasons:?}");
    let readme = readme();
    let table = readme
        .split("`closed` reasons")
        .nth(1)
        .expect("a `closed` reasons section");
    for reason in reasons {
        assert!(
            table.contains(&format!("| `{reason}` |")),
            "no row for {reason}"
        );
    }
}
