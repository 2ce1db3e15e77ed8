//! cargo-fuzz target `state_file`: the logic is in `harness/state_file.rs`, shared with
//! the corpus replay test `tests/e2e/fuzz_corpus.rs`.

#![no_main]

#[path = "../harness/state_file.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
