//! Fuzz target `path`: the invariants in `trellis_tests::fuzz::path` (tests/src/fuzz/path.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trellis_tests::fuzz::path::check(data));
