//! cargo-fuzz target `admin`: the logic is in `harness/admin.rs`, shared with
//! the corpus replay test `tests/e2e/fuzz_corpus.rs`.

#![no_main]

#[path = "../harness/admin.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
