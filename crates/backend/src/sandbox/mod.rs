//! Running commands over an agent's files: the [`Sandbox`] capability.
//!
//! A sandbox runs one shell command over an [`ExecFiles`] — a [`Backend`](crate::Backend) view of
//! exactly the files the agent sees, with the parts it may only read marked — and returns an
//! [`ExecOutput`]: the combined output (capped, both ends kept), the exit code, and what became of
//! the files the command wrote. Files live in the backend, not in the sandbox: before the command
//! runs, the files it can reach are materialized into a private directory on local disk; after it
//! ends, every file it created, changed or deleted there is written back through the backend,
//! version-checked, so a concurrent edit by someone else is reported as a conflict and never
//! overwritten (see [`workdir`]).
//!
//! Two implementations ship:
//!
//! * [`BubblewrapSandbox`] (Linux, the default): the command runs under `bwrap` in fresh user, mount,
//!   PID, IPC, UTS and network namespaces, sees the materialized files and read-only system
//!   directories and nothing else of the host, with limits on time, processes, memory and file size.
//!   What this host actually enforces is in its [`SandboxReport`].
//! * [`UnsandboxedShell`]: runs the command on the host, isolating nothing. For trusted development
//!   only; its name says so.
//!
//! A backend that can run commands says so through [`Backend::sandbox`](crate::Backend::sandbox): a
//! [`SandboxedBackend`] attaches a sandbox to any backend, and a
//! [`CompositeBackend`](crate::CompositeBackend) forwards the question to the backend that owns the
//! working directory. The sandbox it answers with still runs over the whole view it is given.
//!
//! Every implementation must pass the conformance suite in `tests/backend/sandbox/conformance.rs`;
//! `docs/sandbox.md` says how to add a hosted sandbox.

mod bubblewrap;
mod capture;
mod error;
mod files;
mod folder_cache;
mod limits;
mod process;
mod reach;
mod request;
mod runner;
mod sandboxed;
mod unsandboxed;
pub mod workdir;

use async_trait::async_trait;

pub use bubblewrap::{BubblewrapConfig, BubblewrapSandbox};
pub use error::{SandboxError, SandboxUnavailable};
pub use files::{ExecFiles, ExecMount, MountAccess};
pub use folder_cache::FolderCache;
pub use limits::{LimitKind, LimitStatus, SandboxLimits, SandboxReport};
pub use request::{
    ExecOutput, ExecRequest, FileChange, FileChangeKind, Network, NotWritten, NotWrittenReason,
};
pub use sandboxed::SandboxedBackend;
pub use unsandboxed::UnsandboxedShell;

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
