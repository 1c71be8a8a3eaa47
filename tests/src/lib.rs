//! Cross-crate integration tests live in tests/; this library holds what they share.
//!
//! * [`fault_proxy`]: a loopback HTTP proxy that injects faults in front of an emulator or a mock
//!   model provider;
//! * [`emulator`]: where the emulators are, and skipping (or failing) when they are not;
//! * [`sandbox`]: the bubblewrap sandbox, and skipping (or failing) when it is missing;
//! * [`fuzz`]: the invariants the fuzz targets in `fuzz/` check, replayed by
//!   `tests/integration/fuzz_replay.rs`.

#![warn(missing_docs)]

pub mod emulator;
pub mod fault_proxy;
pub mod fuzz;
pub mod sandbox;
