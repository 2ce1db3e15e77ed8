//! cargo-fuzz target `dns`: the logic is in `harness/dns.rs`, shared with
//! the corpus replay test `tests/e2e/fuzz_corpus.rs`.

#![no_main]

#[path = "../harness/dns.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
