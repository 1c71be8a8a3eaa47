//! The `trellis` command line, end to end through the binary: one module per command or concern,
//! all running the binary through [`harness`].

mod adversarial;
mod agent_file;
mod agent_file_command;
mod approvals;
mod chat;
pub(crate) mod crash;
mod end_to_end;
pub(crate) mod harness;
mod inspect;
mod logging;
pub(crate) mod sandbox;
mod skills_cache;
pub(crate) mod streaming;
mod threads;
mod trust;
mod users;

// The paths other test modules (outside cli/) use.
pub(crate) use harness::{example, trellis};
