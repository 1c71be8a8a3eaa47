//! Fuzz target `glob`: the invariants in `trellis_tests::fuzz::glob` (tests/src/fuzz/glob.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trellis_tests::fuzz::glob::check(data));
