//! The layer rule, checked by reading the imports: code in one layer's
//! folder names only its own layer and those below it. Unit tests (after a
//! file's `#[cfg(test)]` module, or in `*_tests.rs` files) may also use the
//! simulator.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// Bottom first: each layer may use itself and everything before it.
const ORDER: [&str; 7] = ["config", "pool", "net", "probe", "ops", "runtime", "sim"];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The layers `code` names as `crate::<layer>`.
fn named_layers(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let word: String = match rest.starts_with('{') {
            true => "{".to_owned(),
            false => rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect(),
        };
        named.insert(word);
    }
    named
}

#[test]
fn every_layer_uses_only_itself_and_those_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (rank, layer) in ORDER.iter().enumerate() {
        let allowed: BTreeSet<&str> = ORDER[..=rank].iter().copied().collect();
        let mut files = Vec::new();
        rust_files(&src.join(layer), &mut files);
        assert!(!files.is_empty(), "no files in src/{layer}");
        for file in files {
            let text = fs::read_to_string(&file).unwrap();
            let is_test_file = file.to_string_lossy().ends_with("_tests.rs");
            let code = match text.find("#[cfg(test)]\nmod tests") {
                _ if is_test_file => "",
                Some(at) => &text[..at],
                None => &text,
            };
            let tests = &text[code.len()..];
            for (part, extra) in [(code, None), (tests, Some("sim"))] {
                for named in named_layers(part) {
                    if named.contains('{') {
                        broken.push(format!("{}: `crate::{{` hides which layer", file.display()));
                    } else if !allowed.contains(named.as_str()) && extra != Some(named.as_str()) {
                        broken.push(format!(
                            "{} (layer {layer}) uses crate::{named}",
                            file.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports against the layer order:\n{}",
        broken.join("\n")
    );
}

/// Names that mean socket, name or file work: none of them belongs in the
/// pool, which holds state and pure rules (the data path and the runtime
/// do the I/O and hand their answers in).
const IO: [&str; 10] = [
    "tokio::net",
    "std::net::TcpStream",
    "std::net::TcpListener",
    "std::net::UdpSocket",
    "UdpSocket::",
    "lookup_host",
    "hickory",
    "std::fs",
    "tokio::fs",
    "socket2",
];

/// The I/O names `code` uses.
fn io_named(code: &str) -> Vec<&'static str> {
    IO.iter()
        .copied()
        .filter(|name| code.contains(name))
        .collect()
}

#[test]
fn the_pool_does_no_io() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pool"),
        &mut files,
    );
    let mut found = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        if file.to_string_lossy().ends_with("_tests.rs") {
            continue;
        }
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        for name in io_named(code) {
            found.push(format!("{}: {name}", file.display()));
        }
    }
    assert!(found.is_empty(), "I/O in src/pool/:\n{}", found.join("\n"));
}

#[test]
fn io_names_are_found() {
    assert_eq!(
        io_named("let r = tokio::net::lookup_host(a).await;"),
        vec!["tokio::net", "lookup_host"]
    );
    assert_eq!(
        io_named("use crate::config::local::reaches;"),
        Vec::<&str>::new()
    );
}

#[test]
fn named_layers_reads_paths_and_groups() {
    let found = named_layers("use crate::pool::Pool; x(crate::net::connect); use crate::{a, b};");
    let want: BTreeSet<String> = ["pool", "net", "{"].iter().map(|s| s.to_string()).collect();
    assert_eq!(found, want);
}
