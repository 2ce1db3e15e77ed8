//! The layer rule, checked by reading the imports: code in one layer's
//! folder names only its own layer and those below it. Unit tests (after a
//! file's `#[cfg(test)]` module, or in `*_tests.rs` files) may also use the
//! simulator. Also checked here: the pool does no I/O, and README.md's
//! code map names every file of `src/`.

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

/// Every file under `dir` (any extension), in its subfolders too.
fn all_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all_files(&path, out);
        } else {
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

/// The types `code` declares visible beyond their file (`pub`, in any
/// scope): `pub struct Name`, `pub(crate) enum Name`, ...
fn shared_types(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        let Some(rest) = line.strip_prefix("pub") else {
            continue;
        };
        let rest = match rest.strip_prefix('(') {
            Some(scoped) => scoped.split_once(')').map_or("", |(_, r)| r),
            None => rest,
        };
        let mut words = rest.split_whitespace();
        if let (Some("struct" | "enum" | "type" | "trait"), Some(name)) =
            (words.next(), words.next())
        {
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
        }
    }
    out
}

/// One name per idea: no two types seen beyond their files share a name
/// (a type private to its file may).
#[test]
fn no_two_shared_types_have_one_name() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for file in files {
        if file.to_string_lossy().ends_with("_tests.rs") {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        for name in shared_types(code) {
            seen.entry(name)
                .or_default()
                .push(file.display().to_string());
        }
    }
    let twice: Vec<String> = seen
        .into_iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "types sharing a name:\n{}",
        twice.join("\n")
    );
}

#[test]
fn shared_types_are_read_with_their_scope() {
    let code = "pub struct A;\npub(super) enum B {\nstruct C;\n    pub(in crate::pool) type D = u8;\npub fn e() {}";
    assert_eq!(shared_types(code), ["A", "B", "D"]);
}

#[test]
fn named_layers_reads_paths_and_groups() {
    let found = named_layers("use crate::pool::Pool; x(crate::net::connect); use crate::{a, b};");
    let want: BTreeSet<String> = ["pool", "net", "{"].iter().map(|s| s.to_string()).collect();
    assert_eq!(found, want);
}

/// The paths, relative to `src/`, that README.md's `## Code map` section
/// names; the rule is [`readme_code_map_names_every_file`]'s.
fn code_map_names(readme: &str) -> BTreeSet<String> {
    let section = match readme.split_once("\n## Code map\n") {
        Some((_, rest)) => rest.split("\n## ").next().unwrap_or(""),
        None => "",
    };
    let mut named = BTreeSet::new();
    for block in section.split("\n\n") {
        let block = block.trim_start_matches('\n');
        // Between backticks: the odd pieces of a split on them.
        let mut spans = block.split('`').skip(1).step_by(2);
        let folder = match spans.next() {
            Some(first) if block.starts_with('`') && first.ends_with('/') => first,
            _ => continue,
        };
        let Some(folder) = folder.strip_prefix("src/") else {
            continue;
        };
        for span in spans {
            named.insert(format!("{folder}{span}"));
        }
    }
    named
}

/// Every file of `src/` (any kind, `page.html` too) is named in README.md's
/// `## Code map` section: the text from that heading to the next `## `.
///
/// How a name is matched: the section is cut into blocks at blank lines. A
/// block whose first line starts with a folder in backticks, `` `src/pool/` ``
/// (`` `src/` `` for the files at the top), is that folder's; every other
/// text between backticks in it names the file at the folder's path plus
/// that text, exactly as written: `` `drain/schedule.rs` `` in the block of
/// `` `src/pool/` `` names `pool/drain/schedule.rs`. So a folder's block is
/// a paragraph, or a paragraph and a bullet list with no blank line between,
/// and `` `x_tests.rs` `` can go on the line of `` `x.rs` ``. Backticked
/// text anywhere else in the section (the paragraphs that follow a
/// connection, a probe or an upgrade through the code) names nothing.
#[test]
fn readme_code_map_names_every_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains("\n## Code map\n"),
        "README.md has no `## Code map` section"
    );
    let named = code_map_names(&readme);
    let src = root.join("src");
    let mut files = Vec::new();
    all_files(&src, &mut files);
    let mut missing: Vec<String> = files
        .iter()
        .map(|file| {
            file.strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|path| !named.contains(path))
        .collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "files of src/ that README.md's Code map does not name in their folder's block \
         (a paragraph starting with `src/<folder>/`):\n{}",
        missing.join("\n")
    );
}

#[test]
fn code_map_names_reads_folder_blocks_only() {
    let readme = "## Before\n\n`src/a/`: not the map\n\n## Code map\n\n\
                  Under `src/`: `main.rs`.\n\n\
                  `src/pool/`: state.\n- `select.rs` (+ `select_tests.rs`): choice.\n\
                  - `drain/schedule.rs`: when.\n\n\
                  One client: `net/session.rs` runs.\n\n\
                  `src/`:\n- `lib.rs`: the crate.\n\n## After\n\n`src/`:\n- `main.rs`\n";
    let want: BTreeSet<String> = [
        "pool/select.rs",
        "pool/select_tests.rs",
        "pool/drain/schedule.rs",
        "lib.rs",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(code_map_names(readme), want);
}
