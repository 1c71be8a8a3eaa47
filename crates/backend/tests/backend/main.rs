//! The integration tests of trellis-backend, built as one test binary: each module below was a
//! `tests/*.rs` file of its own. `conformance` is the suite that `backends` runs on every backend.

mod adversarial_paths;
mod backends;
mod conformance;
mod escapes;
mod forwarding;
mod fuzz_regressions;
mod grep_path_filter;
mod local_links;
mod local_races;
mod local_special_files;
mod scoped;
