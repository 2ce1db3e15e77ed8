//! cargo-fuzz target `proxy_header`: the logic is in
//! `harness/proxy_header.rs`, shared with the corpus replay test
//! `tests/e2e/fuzz_corpus.rs`.

#![no_main]

#[path = "../harness/proxy_header.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
