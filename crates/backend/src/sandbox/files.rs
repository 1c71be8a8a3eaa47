//! [`ExecFiles`]: the files a command runs over, and which parts of them it may only read.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Backend, PathFilter};
use crate::path::VirtualPath;

/// Most files one command's view may materialize, by default.
pub const DEFAULT_MAX_FILES: usize = 20_000;
/// Most bytes one command's view may materialize, by default (1 GiB).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Most new or changed entries one command's write-back examines, by default.
pub const DEFAULT_WRITE_BACK_MAX_FILES: usize = 20_000;
/// Most bytes one command's write-back reads and writes, by default (1 GiB).
pub const DEFAULT_WRITE_BACK_MAX_BYTES: u64 = 1 << 30;
/// Longest one command's write-back may take, by default (5 minutes).
pub const DEFAULT_WRITE_BACK_MAX_TIME: Duration = Duration::from_secs(300);

/// Bounds on what one command's write-back does after the command ends (review F3): the command
/// can make files far faster than they can be written back (`truncate -s 1G` costs it nothing,
/// `seq 2000000 | xargs touch` little), and the write-back runs in Trellis, not in the sandbox.
///
/// What is over a bound is not written and is named in
/// [`ExecOutput::not_written`](super::ExecOutput::not_written) as
/// [`TooLarge`](super::NotWrittenReason::TooLarge); what the store already held is never lost to
/// it, and when the walk of the copy stopped at a bound, nothing is deleted. Files the command left
/// unchanged count toward none of them, so a view larger than a bound still works. Besides these,
/// the write-back never grows the view past [`ExecFiles::max_files`] and [`ExecFiles::max_bytes`]
/// (as this call counted them), so the next command can still be materialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteBackLimits {
    /// Most entries the walk of the copy examines beyond what was materialized unchanged: new and
    /// changed files, links, pipes, names that are not valid paths and directories that hold no
    /// materialized file all count. The walk stops at the first one over.
    pub max_files: usize,
    /// Most bytes of new and changed files to read back and write, counted by the size the file
    /// system reports before anything is read (a sparse file counts its apparent size). A file that
    /// does not fit is not read; the walk goes on with the next.
    pub max_bytes: u64,
    /// Longest the whole write-back may take; what is not done by then is not done.
    pub max_time: Duration,
}

impl Default for WriteBackLimits {
    fn default() -> Self {
        Self {
            max_files: DEFAULT_WRITE_BACK_MAX_FILES,
            max_bytes: DEFAULT_WRITE_BACK_MAX_BYTES,
            max_time: DEFAULT_WRITE_BACK_MAX_TIME,
        }
    }
}

/// How a command may use a part of the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountAccess {
    /// Read and write; what the command writes here is written back.
    ReadWrite,
    /// Read only: mounted read-only inside the sandbox, never written back.
    ReadOnly,
}

/// A part of the view with its own treatment. Paths outside every mount are read-write and
/// materialized in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecMount {
    /// Where it is in the view.
    pub at: VirtualPath,
    /// Read-only or read-write.
    pub access: MountAccess,
    /// When true, only the folders directly below `at` that the command can reach are
    /// materialized (which ones the command text names; see `crates/fs-tools/src/exec/sandbox/reach.rs`):
    /// a skill source holds hundreds of skill folders,
    /// and a command runs the scripts of one or two. When false, everything below `at` is.
    pub on_reach: bool,
}

/// The files one command runs over: a backend holding the whole view (usually a
/// [`CompositeBackend`](crate::CompositeBackend) of the thread's space, the user's workspace and
/// the shared sources), the parts of it with their own [`ExecMount`] treatment, and the permission
/// predicates of the agent that runs it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExecFiles {
    /// The whole view, at the paths the agent sees.
    pub backend: Arc<dyn Backend>,
    /// Parts with their own treatment, in any order (the deepest containing mount applies).
    pub mounts: Vec<ExecMount>,
    /// Files the agent may read: only these are materialized. `None`: all.
    pub readable: Option<PathFilter>,
    /// Files the agent may write: a change elsewhere is listed as
    /// [`Denied`](super::NotWrittenReason::Denied), not written. `None`: all outside read-only
    /// mounts.
    pub writable: Option<PathFilter>,
    /// Most files to materialize; more is [`TooLarge`](super::SandboxError::TooLarge).
    pub max_files: usize,
    /// Most bytes to materialize; more is [`TooLarge`](super::SandboxError::TooLarge).
    pub max_bytes: u64,
    /// Bounds on the write-back after the command.
    pub write_back: WriteBackLimits,
    /// Whose view this is (a thread's id): a sandbox may keep the view's files on local disk
    /// between the commands that give the same key, and refresh only what changed. It never gives
    /// one key's files to a call with another key, and it refreshes them against this call's own
    /// listing before every command, so a key shared by mistake costs time, never correctness.
    /// `None` (the default): nothing is kept.
    pub cache_key: Option<String>,
}

impl ExecFiles {
    /// All of `backend`, read-write, everything materialized.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            mounts: Vec::new(),
            readable: None,
            writable: None,
            max_files: DEFAULT_MAX_FILES,
            max_bytes: DEFAULT_MAX_BYTES,
            write_back: WriteBackLimits::default(),
            cache_key: None,
        }
    }

    /// Let a sandbox keep this view's files between commands under `key` (see
    /// [`ExecFiles::cache_key`]); an empty key keeps nothing.
    pub fn cache_key(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.cache_key = (!key.is_empty()).then_some(key);
        self
    }

    /// Mark `at` read-only, materializing only the folders below it that a command reaches.
    pub fn read_only_on_reach(self, at: VirtualPath) -> Self {
        self.with_mount(ExecMount {
            at,
            access: MountAccess::ReadOnly,
            on_reach: true,
        })
    }

    /// Mark `at` read-only, materialized in full.
    pub fn read_only(self, at: VirtualPath) -> Self {
        self.with_mount(ExecMount {
            at,
            access: MountAccess::ReadOnly,
            on_reach: false,
        })
    }

    /// Add a mount (replacing one at the same path).
    pub fn with_mount(mut self, mount: ExecMount) -> Self {
        self.mounts.retain(|m| m.at != mount.at);
        self.mounts.push(mount);
        self.mounts.sort_by_key(|m| std::cmp::Reverse(m.at.depth()));
        self
    }

    /// Only materialize what `filter` allows.
    pub fn readable(mut self, filter: PathFilter) -> Self {
        self.readable = Some(filter);
        self
    }

    /// Only write back what `filter` allows.
    pub fn writable(mut self, filter: PathFilter) -> Self {
        self.writable = Some(filter);
        self
    }

    /// Bound the write-back by `limits`.
    pub fn write_back_limits(mut self, limits: WriteBackLimits) -> Self {
        self.write_back = limits;
        self
    }

    /// The deepest mount containing `path`.
    pub fn mount_of(&self, path: &VirtualPath) -> Option<&ExecMount> {
        // Sorted deepest first, so the first match is the deepest.
        self.mounts.iter().find(|m| path.starts_with(&m.at))
    }

    /// True when a command may change `path` and have it written back.
    pub fn may_write(&self, path: &VirtualPath) -> bool {
        let read_write = self
            .mount_of(path)
            .is_none_or(|m| m.access == MountAccess::ReadWrite);
        read_write && self.writable.as_ref().is_none_or(|f| f.allows(path))
    }

    /// True when `path` may be materialized.
    pub fn may_read(&self, path: &VirtualPath) -> bool {
        self.readable.as_ref().is_none_or(|f| f.allows(path))
    }
}
