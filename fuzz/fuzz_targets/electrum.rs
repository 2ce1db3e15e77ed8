//! cargo-fuzz target `electrum`: the logic is in `harness/electrum.rs`, shared with
//! the corpus replay test `tests/e2e/fuzz_corpus.rs`.

#![no_main]

#[path = "../harness/electrum.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
