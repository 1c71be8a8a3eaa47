//! The integration tests of trellis-backend, built as one test binary:
//!
//! * `conformance`: the one suite every backend passes, and (`conformance::backends`) its runs on
//!   every backend, the cloud ones against emulators;
//! * `scoped`: `ScopedBackend`'s isolation, and the suite run through scopes;
//! * `local`: local disk beyond the suite (links, symlink races, special files);
//! * `paths`: paths and names that try to leave a root;
//! * `forwarding`: wrappers forward every `Backend` method;
//! * `grep_path_filter`: a grep's path filter on every local backend.
//!
//! Tests that need a storage emulator ask for it through `trellis_backend::testing::emulator`, the
//! one guard: skipped when unset, failed under `TRELLIS_EMULATORS=required`.

mod conformance;
mod forwarding;
mod grep_path_filter;
mod local;
mod local_dirs;
mod paths;
mod scoped;
