//! Replays the fuzz corpora (`fuzz/corpus/<target>/`) and kept crash
//! reproducers (`fuzz/artifacts/<target>/`) through the fuzz targets' own
//! harnesses, so stable-toolchain CI checks every input the fuzzer found.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

#[path = "../../fuzz/harness/blockbook.rs"]
mod blockbook;
#[path = "../../fuzz/harness/config.rs"]
mod config;
#[path = "../../fuzz/harness/dns.rs"]
mod dns;
#[path = "../../fuzz/harness/electrum.rs"]
mod electrum;
#[path = "../../fuzz/harness/handover.rs"]
mod handover;
#[path = "../../fuzz/harness/proxy_header.rs"]
mod proxy_header;
#[path = "../../fuzz/harness/state_file.rs"]
mod state_file;
#[path = "../../fuzz/harness/wire.rs"]
mod wire;

/// The files directly in `fuzz/<kind>/<target>/`, sorted; none if it is absent.
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target);
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Run `harness` on each file; the files it panicked on (or could not read).
fn replay(files: &[PathBuf], harness: fn(&[u8])) -> Vec<String> {
    let mut failed = Vec::new();
    for file in files {
        let outcome = fs::read(file)
            .map_err(|e| format!("read: {e}"))
            .and_then(|data| {
                panic::catch_unwind(AssertUnwindSafe(|| harness(&data)))
                    .map_err(|_| "panicked".to_owned())
            });
        if let Err(why) = outcome {
            failed.push(format!("{}: {why}", file.display()));
        }
    }
    failed
}

/// Replay a target's corpus, which must not be empty, and its artifacts.
fn check(target: &str, harness: fn(&[u8])) {
    let corpus = inputs("corpus", target);
    assert!(!corpus.is_empty(), "fuzz/corpus/{target}/ has no inputs");
    let mut files = corpus;
    files.extend(inputs("artifacts", target));
    let failed = replay(&files, harness);
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs failed:\n{}",
        failed.len(),
        files.len(),
        failed.join("\n")
    );
}

#[test]
fn config_corpus() {
    check("config", config::run);
}

#[test]
fn wire_corpus() {
    check("wire", wire::run);
}

#[test]
fn blockbook_corpus() {
    check("blockbook", blockbook::run);
}

#[test]
fn proxy_header_corpus() {
    check("proxy_header", proxy_header::run);
}

#[test]
fn state_file_corpus() {
    check("state_file", state_file::run);
}

#[test]
fn handover_corpus() {
    check("handover", handover::run);
}

#[test]
fn electrum_corpus() {
    check("electrum", electrum::run);
}

#[test]
fn dns_corpus() {
    check("dns", dns::run);
}

#[path = "../../fuzz/harness/admin.rs"]
mod admin;

#[test]
fn admin_corpus() {
    check("admin", admin::run);
}
