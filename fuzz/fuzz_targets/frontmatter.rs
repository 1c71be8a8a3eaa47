//! Fuzz target `frontmatter`: the invariants in `trellis_tests::fuzz::frontmatter` (tests/src/fuzz/frontmatter.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trellis_tests::fuzz::frontmatter::check(data));
