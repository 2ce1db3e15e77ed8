//! cargo-fuzz target `handover`: the logic is in `harness/handover.rs`, shared with
//! the corpus replay test `tests/e2e/fuzz_corpus.rs`.

#![no_main]

#[path = "../harness/handover.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
