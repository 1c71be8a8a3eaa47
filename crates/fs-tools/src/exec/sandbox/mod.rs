//! The sandboxes that ship with Trellis: implementations of the
//! [`Sandbox`](trellis_backend::Sandbox) contract of `trellis_backend::sandbox`, beside the
//! `execute` tool that runs commands in them.
//!
//! * [`BubblewrapSandbox`] (Linux, the default): the command runs under `bwrap` in fresh user,
//!   mount, PID, IPC, UTS and network namespaces, sees the materialized files and read-only system
//!   directories and nothing else of the host, with limits on time, processes, memory and file
//!   size, under a seccomp filter (`seccomp`) that refuses the system calls reaching past the
//!   namespaces. What this host actually enforces is in its
//!   [`SandboxReport`](trellis_backend::sandbox::SandboxReport).
//! * [`UnsandboxedShell`]: runs the command on the host, isolating nothing. For trusted development
//!   only; its name says so.
//!
//! Both run a command the same way: the files it can reach are materialized into a private
//! directory on local disk ([`workdir`]; skill folders through a [`FolderCache`], only the ones the
//! command text names), its output is captured under a cap, and afterwards every file it created,
//! changed or deleted there is written back through the backend, version-checked. Bubblewrap
//! mounts a directory that is already on local disk and owned by the commands' user (a
//! `--workdir`) through an overlay instead of copying it, and writes back from the overlay's upper
//! layer by the same rules ([`workdir::Overlay`]). Files from an object store come, for a call
//! keyed by its thread, from that thread's cached base ([`ThreadCache`]), refreshed to what changed
//! and mounted as the lower layer of an overlay whose upper layer is the command's copy.
//!
//! Every implementation must pass the conformance suite in
//! `crates/fs-tools/tests/fs_tools/sandbox/conformance.rs`; `docs/sandbox.md` says how to add a
//! hosted sandbox.

mod bubblewrap;
mod capture;
mod cgroup;
mod folder_cache;
mod namespace_init;
mod process;
mod proxy;
mod reach;
mod runner;
mod seccomp;
mod thread_cache;
mod unsandboxed;
pub mod workdir;

pub use bubblewrap::{
    BubblewrapConfig, BubblewrapSandbox, SANDBOX_UID, THREAD_CACHE_MAX_BYTES, THREAD_CACHE_MIN_FILES,
};
pub use folder_cache::FolderCache;
pub use proxy::bridge;
pub use thread_cache::{Base, ThreadCache};
pub use unsandboxed::UnsandboxedShell;

/// `1073741824` as `1 GiB`, for reports.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024 && value.is_multiple_of(1024) && unit + 1 < UNITS.len() {
        value /= 1024;
        unit += 1;
    }
    format!("{value} {}", UNITS[unit])
}
