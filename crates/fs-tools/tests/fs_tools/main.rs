//! The integration tests of trellis-fs-tools, built as one test binary:
//!
//! * `files`: the file tools' permissions and concurrent edits; `snapshots`, `eviction` and
//!   `properties` (which stay at the top: insta names snapshots, and proptest its regression file,
//!   by module path) what the model sees, large-result eviction, and property tests;
//! * `execute`: the `execute` tool;
//! * `sandbox`: the sandboxes that ship, against the one conformance suite, the escape suite and
//!   the resource limits;
//! * `common`: the fixtures they share.
//!
//! Tests that need a storage emulator ask for it through `trellis_backend::testing::emulator`, the
//! one guard: skipped when unset, failed under `TRELLIS_EMULATORS=required`.

mod common;
mod eviction;
mod execute;
mod files;
mod properties;
mod sandbox;
mod snapshots;
