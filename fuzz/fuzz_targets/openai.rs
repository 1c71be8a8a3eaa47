//! Fuzz target `openai`: the provider's response and error parsers, with the invariants in
//! `trellis_tests::fuzz::providers` (tests/src/fuzz/providers.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trellis_tests::fuzz::providers::check_openai(data));
