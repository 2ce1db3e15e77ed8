//! No test module is another's harness: outside `tests/support/`, a file
//! of `tests/` names no item of another test module. It may name
//! `crate::X` only where its crate root declares `X` from a file under
//! `tests/support/` (`support`, `faults_support`); it may not name
//! `super::` (its parent's items), `crate::{` (which hides what it names),
//! nor a child module it declares from a file of `tests/` (`child::item`;
//! the fuzz harnesses it declares from `fuzz/` are no test modules). A
//! parent still declares its children (`mod failures;`). Comments and
//! string literals are left out before looking.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `text` with comments and string and char literals blanked out, so that
/// only code is read.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
            continue;
        }
        let ident_at = |back: usize| i >= back && is_ident(c[i - back]);
        let starts_word = !ident_at(1) || (c[i - 1] == 'b' && !ident_at(2));
        if c[i] == 'r' && starts_word && matches!(next, Some('"' | '#')) {
            // A raw string: r"..." or r#"..."#, with as many # at the end.
            let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
            if c.get(i + 1 + hashes) == Some(&'"') {
                i += 2 + hashes;
                while i < c.len() {
                    let closes = c[i] == '"'
                        && c[i + 1..].iter().take_while(|&&h| h == '#').count() >= hashes;
                    i += 1;
                    if closes {
                        i += hashes;
                        break;
                    }
                }
                out.push(' ');
                continue;
            }
        }
        if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
            continue;
        }
        if c[i] == '\'' {
            // A char literal ('x', '\n', '\''), or else a lifetime.
            if next == Some('\\') {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push(' ');
                continue;
            }
            if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push(' ');
                continue;
            }
        }
        out.push(c[i]);
        i += 1;
    }
    out
}

/// The modules `text` declares (`mod name;`), each with its `#[path]`.
fn declared_mods(text: &str) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    let mut path = None;
    for line in text.lines().map(str::trim) {
        if let Some(p) = line.strip_prefix("#[path = \"") {
            path = p.strip_suffix("\"]").map(str::to_owned);
            continue;
        }
        let decl = line
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ")
            .strip_prefix("mod ")
            .and_then(|rest| rest.strip_suffix(';'));
        if let Some(name) = decl.filter(|n| n.chars().all(is_ident)) {
            found.push((name.to_owned(), path.take()));
        } else if !line.starts_with("#[") {
            path = None;
        }
    }
    found
}

/// The file a module declared in `parent` as `name` (with `path`) is read
/// from: as rustc finds it for a crate root or a `mod.rs`.
fn module_file(parent: &Path, name: &str, path: Option<&str>) -> PathBuf {
    let dir = parent.parent().unwrap();
    match path {
        Some(p) => dir.join(p),
        None if dir.join(format!("{name}.rs")).exists() => dir.join(format!("{name}.rs")),
        None => dir.join(name).join("mod.rs"),
    }
}

/// The crate-root modules of `root` that are read from `tests/support/`.
fn support_roots(root: &Path, support: &Path) -> BTreeSet<String> {
    let text = fs::read_to_string(root).unwrap();
    declared_mods(&text)
        .into_iter()
        .filter(|(name, path)| {
            let file = module_file(root, name, path.as_deref());
            fs::canonicalize(&file).is_ok_and(|f| f.starts_with(support))
        })
        .map(|(name, _)| name)
        .collect()
}

/// Every word `code` names right after `prefix`, where `prefix` starts a
/// path (`x(crate::a)`, not `foo_crate::a`).
fn after(code: &str, prefix: &str) -> Vec<String> {
    code.match_indices(prefix)
        .filter(|(i, _)| !code[..*i].ends_with(|c: char| is_ident(c) || c == ':'))
        .map(|(i, _)| {
            let rest = &code[i + prefix.len()..];
            match rest.starts_with('{') {
                true => "{".to_owned(),
                false => rest.chars().take_while(|c| is_ident(*c)).collect(),
            }
        })
        .collect()
}

/// What `code` names of another test module: `crate::X` for `X` not in
/// `allowed`, `super::`, `crate::{`, and `child::` (or `self::child::`)
/// for each child in `children`.
fn harness_imports(code: &str, allowed: &BTreeSet<String>, children: &[String]) -> Vec<String> {
    let code = code_only(code);
    let mut named = Vec::new();
    for word in after(&code, "crate::") {
        if !allowed.contains(&word) {
            named.push(format!("crate::{word}"));
        }
    }
    if !after(&code, "super::").is_empty() {
        named.push("super::".to_owned());
    }
    for child in children {
        let used = !after(&code, &format!("{child}::")).is_empty()
            || code.contains(&format!("self::{child}::"));
        if used {
            named.push(format!("{child}::"));
        }
    }
    named.sort();
    named.dedup();
    named
}

#[test]
fn no_test_module_imports_another_ones_items() {
    let tests = fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")).unwrap();
    let support = tests.join("support");
    let mut files = Vec::new();
    rust_files(&tests, &mut files);
    files.retain(|f| !fs::canonicalize(f).unwrap().starts_with(&support));
    assert!(files.len() > 50, "only {} test files found", files.len());
    let mut broken = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&tests).unwrap();
        // The crate root: tests/<crate>/main.rs, or tests/<crate>.rs itself.
        let root = match rel.components().count() {
            1 => file.clone(),
            _ => tests.join(rel.components().next().unwrap()).join("main.rs"),
        };
        let allowed = support_roots(&root, &support);
        assert!(
            allowed.contains("support"),
            "{} declares no support module",
            root.display()
        );
        let text = fs::read_to_string(file).unwrap();
        // Its child test modules: those read from tests/ (not the fuzz
        // harnesses) and, in a crate root, not the support modules.
        let in_tests = |(name, path): &(String, Option<String>)| match path {
            None => file != &root || !allowed.contains(name),
            Some(p) => fs::canonicalize(file.parent().unwrap().join(p))
                .is_ok_and(|f| f.starts_with(&tests) && !f.starts_with(&support)),
        };
        let children: Vec<String> = declared_mods(&text)
            .into_iter()
            .filter(in_tests)
            .map(|(name, _)| name)
            .collect();
        for named in harness_imports(&text, &allowed, &children) {
            broken.push(format!("tests/{}: {named}", rel.display()));
        }
    }
    assert!(
        broken.is_empty(),
        "test modules that use another's items (move them to tests/support/):\n{}",
        broken.join("\n")
    );
}

#[test]
fn harness_imports_finds_crate_paths_parents_children_and_groups() {
    let allowed: BTreeSet<String> = ["support".to_owned()].into();
    let children = ["failures".to_owned()];
    let found = |code: &str| harness_imports(code, &allowed, &children);
    assert!(found("use crate::support::proxy::Proxy; // crate::admin::x").is_empty());
    assert!(found("let s = \"use crate::upgrade::Bin; super::T\";").is_empty());
    assert!(found("let s = r#\"super::T \"crate::admin\"\"#; let c = '\"';").is_empty());
    assert!(found("mod failures; fn f<'a>(x: &'a str) {} use my_crate::x;").is_empty());
    assert_eq!(found("use crate::upgrade::{Bin, T};"), ["crate::upgrade"]);
    assert_eq!(found("x(crate::admin::http::status(a))"), ["crate::admin"]);
    assert_eq!(found("use crate::{support, stall};"), ["crate::{"]);
    assert_eq!(found("use super::{config, T};"), ["super::"]);
    assert_eq!(found("use super::super::cli::cli;"), ["super::"]);
    assert_eq!(found("use failures::helper;"), ["failures::"]);
    assert_eq!(found("use self::failures::helper;"), ["failures::"]);
}

#[test]
fn support_roots_are_the_modules_read_from_tests_support() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let support = fs::canonicalize(tests.join("support")).unwrap();
    let e2e = support_roots(&tests.join("e2e/main.rs"), &support);
    let want: BTreeSet<String> = ["faults_support".to_owned(), "support".to_owned()].into();
    assert_eq!(e2e, want);
    let idle = support_roots(&tests.join("idle_memory.rs"), &support);
    assert_eq!(idle, ["support".to_owned()].into());
}
