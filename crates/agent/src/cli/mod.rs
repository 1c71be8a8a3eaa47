//! The `trellis` command line, behind the default `cli` feature: each command in a module of its
//! own, and what the commands share (the agent file, the mounts, the output).

pub mod approvals;
pub mod chat;
pub mod config;
pub mod inspect;
pub mod logging;
pub mod mounts;
pub mod output;
pub mod pin;
pub mod run;
pub mod sandbox;
pub mod skills;
pub mod summary;
pub mod threads;
