//! The integration tests of trellis-fs-tools, built as one test binary: each module below was a
//! `tests/*.rs` file of its own, and `common` holds the fixtures they share.

mod common;
mod concurrency;
mod eviction;
mod execute;
mod permissions;
mod properties;
mod sandbox;
mod snapshots;
