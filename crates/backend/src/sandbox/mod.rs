//! Running commands over an agent's files: the [`Sandbox`] capability.
//!
//! A sandbox runs one shell command over an [`ExecFiles`] — a [`Backend`](crate::Backend) view of
//! exactly the files the agent sees, with the parts it may only read marked — and returns an
//! [`ExecOutput`]: the combined output (capped, both ends kept), the exit code, and what became of
//! the files the command wrote. Files live in the backend, not in the sandbox: before the command
//! runs, the files it can reach are materialized into a private directory on local disk; after it
//! ends, every file it created, changed or deleted there is written back through the backend,
//! version-checked, so a concurrent edit by someone else is reported as a conflict and never
//! overwritten.
//!
//! This module is the contract: the [`Sandbox`] trait, what a command is asked to do
//! ([`ExecRequest`]) over which files ([`ExecFiles`]), what came of it ([`ExecOutput`]), the limits
//! and what a host enforces ([`SandboxLimits`], [`SandboxReport`]), the errors ([`SandboxError`]),
//! and [`SandboxedBackend`]. The implementations live beside the `execute` tool, in
//! `trellis_fs_tools::sandbox` (`crates/fs-tools/src/exec/sandbox/`): `BubblewrapSandbox` (Linux,
//! the default; the command runs under `bwrap` in fresh namespaces, seeing the materialized files
//! and read-only system directories and nothing else of the host, with limits on time, processes,
//! memory and file size and a seccomp filter) and `UnsandboxedShell` (runs the command on the host, isolating nothing;
//! for trusted development only, as its name says).
//!
//! A backend that can run commands says so through [`Backend::sandbox`](crate::Backend::sandbox): a
//! [`SandboxedBackend`] attaches a sandbox to any backend, and a
//! [`CompositeBackend`](crate::CompositeBackend) forwards the question to the backend that owns the
//! working directory. The sandbox it answers with still runs over the whole view it is given.
//!
//! Every implementation must pass the conformance suite in
//! `crates/fs-tools/tests/fs_tools/sandbox/conformance.rs`;
//! `docs/sandbox.md` says how to add a hosted sandbox.

mod error;
mod files;
mod limits;
mod network;
mod request;
mod sandboxed;

use async_trait::async_trait;

pub use error::{SandboxError, SandboxUnavailable};
pub use files::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, DEFAULT_WRITE_BACK_MAX_BYTES, DEFAULT_WRITE_BACK_MAX_FILES,
    DEFAULT_WRITE_BACK_MAX_TIME, ExecFiles, ExecMount, MountAccess, WriteBackLimits,
};
pub use limits::{LimitKind, LimitStatus, SandboxLimits, SandboxReport};
pub use network::{AllowedDomains, DomainPattern, Network};
pub use request::{
    DEFAULT_TIMEOUT, ExecOutput, ExecRequest, FileChange, FileChangeKind, NotWritten, NotWrittenReason,
};
pub use sandboxed::SandboxedBackend;

/// Something that runs shell commands over an agent's files.
///
/// Object-safe (`Arc<dyn Sandbox>`). The contract, checked by the conformance suite for every
/// implementation:
///
/// * the command runs under `/bin/sh -c` with a clean environment (`PATH`, `HOME`, `LANG`, and the
///   request's own variables; nothing of the caller's), its working directory being the request's
///   `cwd` (a virtual path; it is created if missing);
/// * the files of `files` that the command can reach are there at their virtual paths before it
///   starts, except what [`ExecFiles::readable`] refuses;
/// * when it ends (or is killed at the timeout), every file it created, changed or deleted under a
///   writable part of the view is written back through `files.backend`, version-checked; refusals
///   and conflicts are listed in the output, never silently dropped or overwritten;
/// * output (stdout and stderr, interleaved as written) is capped at the limits' `output_bytes`,
///   keeping both ends; when cut, the whole output (up to `full_output_bytes`) is saved at
///   [`ExecRequest::full_output_path`] through the backend;
/// * a timeout kills every process the command started.
///
/// An implementation that cannot provide the isolation it claims fails with
/// [`SandboxError::Unavailable`]; it never runs the command some weaker way instead.
#[async_trait]
pub trait Sandbox: Send + Sync + std::fmt::Debug {
    /// A short name: `"bubblewrap"`, `"unsandboxed"`.
    fn name(&self) -> &str;

    /// What this sandbox enforces on this host.
    fn report(&self) -> SandboxReport;

    /// Run `request` over `files`.
    async fn execute(&self, files: &ExecFiles, request: &ExecRequest) -> Result<ExecOutput, SandboxError>;
}
