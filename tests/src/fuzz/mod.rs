//! The invariants the fuzz targets check, in one place that both callers share:
//!
//! * the `cargo fuzz` targets in `fuzz/fuzz_targets/` (run by `cargo xtask fuzz`), one per
//!   function in [`TARGETS`], each calling that function on every generated input;
//! * `tests/tests/integration/fuzz_replay.rs`, a plain `cargo test` that replays every file under
//!   `fuzz/seeds/<target>/` and `fuzz/regressions/<target>/` through the same function, so CI
//!   (which does not run the fuzzer) still exercises the seeds and past findings.
//!
//! Each check takes arbitrary bytes and panics when an invariant does not hold; a panic is what
//! the fuzzer reports as a crash. Beyond "does not panic", the checks assert what the parsers
//! promise: a parsed path re-parses to itself, glob matching agrees with a slow reference matcher,
//! the frontmatter fast path agrees with the full YAML parser and its output stays within the
//! documented bounds, provider parsers map errors to the documented kinds and their output
//! survives a checkpoint round trip. See `docs/fuzzing.md`.

pub mod frontmatter;
pub mod glob;
pub mod path;
pub mod providers;

/// One fuzz target's check: panics when an invariant does not hold for the input.
pub type Check = fn(&[u8]);

/// Every fuzz target: its name (the file `fuzz/fuzz_targets/<name>.rs` and the folders
/// `fuzz/seeds/<name>/`, `fuzz/regressions/<name>/`) and its check.
pub const TARGETS: &[(&str, Check)] = &[
    ("frontmatter", frontmatter::check),
    ("path", path::check),
    ("glob", glob::check),
    ("anthropic", providers::check_anthropic),
    ("openai", providers::check_openai),
];

/// The check of the target called `name`, if there is one.
pub fn target(name: &str) -> Option<Check> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, check)| *check)
}
