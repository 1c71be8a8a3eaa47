//! What a command is asked to do ([`ExecRequest`]) and what came of it ([`ExecOutput`]).

use std::time::Duration;

use crate::path::VirtualPath;

use super::network::Network;

/// Default wall-clock limit of one command.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// One command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecRequest {
    /// The shell command, run as `/bin/sh -c <command>`. Must not be empty.
    pub command: String,
    /// Working directory, a virtual path (default `/`); created if it does not exist.
    pub cwd: VirtualPath,
    /// Wall-clock limit; when it passes, every process of the command is killed.
    pub timeout: Duration,
    /// Extra environment variables, on top of the clean base (`PATH`, `HOME`, `LANG`).
    pub env: Vec<(String, String)>,
    /// Network access.
    pub network: Network,
    /// Where to save the whole output when it is longer than the cap (a virtual path in a writable
    /// part of the view). `None`: the cut output is all there is.
    pub full_output_path: Option<VirtualPath>,
}

impl ExecRequest {
    /// `command` in `/`, with the default timeout, no extra environment and no network.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            cwd: VirtualPath::root(),
            timeout: DEFAULT_TIMEOUT,
            env: Vec::new(),
            network: Network::None,
            full_output_path: None,
        }
    }

    /// Run in `cwd`.
    pub fn cwd(mut self, cwd: VirtualPath) -> Self {
        self.cwd = cwd;
        self
    }

    /// Kill the command after `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Add an environment variable.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Network access.
    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// Save the whole output at `path` when it is cut.
    pub fn full_output_path(mut self, path: VirtualPath) -> Self {
        self.full_output_path = Some(path);
        self
    }
}

/// What happened to one file the command wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileChangeKind {
    /// A new file.
    Created,
    /// An existing file with new content.
    Modified,
    /// A file the command removed.
    Deleted,
}

/// One file written back to the backend.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileChange {
    /// The virtual path.
    pub path: VirtualPath,
    /// Created, modified or deleted.
    pub kind: FileChangeKind,
}

/// Why a change the command made was not written back.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "reason", content = "detail")]
pub enum NotWrittenReason {
    /// Someone else changed (or created, or deleted) the file while the command ran. The command's
    /// version is kept at `kept_at` when it could be saved there.
    Conflict {
        /// Where the command's version was saved instead, if anywhere.
        kept_at: Option<VirtualPath>,
    },
    /// The permission rules do not let the agent write there.
    Denied,
    /// A file host tools run or obey (a git hook or git configuration, a shell start-up file, an
    /// editor's task folder): never written back from a command, whatever the rules allow. The
    /// message says which kind.
    Protected(String),
    /// Not a regular file (a symbolic link, a FIFO, a socket, a device).
    NotARegularFile,
    /// The path is not a valid virtual path (a name that is not UTF-8, say).
    InvalidName,
    /// The backend refused the write, or the copy could not be read back.
    Failed(String),
    /// Over a bound of the write-back ([`WriteBackLimits`](super::WriteBackLimits)) or of the view
    /// ([`ExecFiles::max_files`](super::ExecFiles::max_files),
    /// [`ExecFiles::max_bytes`](super::ExecFiles::max_bytes)): the message names the bound. The
    /// store keeps what it had.
    TooLarge(String),
}

/// A change the command made that did not reach the backend, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NotWritten {
    /// The virtual path (lossy for a name that is not UTF-8).
    pub path: String,
    /// Why.
    pub reason: NotWrittenReason,
}

/// What came of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecOutput {
    /// stdout and stderr, interleaved as written, lossily decoded as UTF-8; when longer than the
    /// cap, its start and end with a marker line between them saying how much was left out.
    pub output: String,
    /// The exit code; `None` when the command was killed by a signal (or at the timeout).
    pub exit_code: Option<i32>,
    /// True when the timeout killed the command.
    pub timed_out: bool,
    /// True when the kernel killed a process of the command because its processes together went
    /// over [`SandboxLimits::max_total_memory_bytes`](super::SandboxLimits::max_total_memory_bytes).
    pub out_of_memory: bool,
    /// True when `output` is not the whole output.
    pub truncated: bool,
    /// Bytes of output the command wrote in all.
    pub output_bytes: u64,
    /// Where the whole output was saved, when it was cut and a path was asked for.
    pub full_output_path: Option<VirtualPath>,
    /// Files written back to the backend, by path.
    pub changes: Vec<FileChange>,
    /// Changes that were not written back, and why.
    pub not_written: Vec<NotWritten>,
    /// Wall-clock time of the command itself (materialization and write-back excluded).
    pub duration: Duration,
}

impl ExecOutput {
    /// What a command that printed `output` and exited with `exit_code` came to, with nothing cut,
    /// no timeout, no files changed and a zero duration: a [`Sandbox`](super::Sandbox)
    /// implementation builds its answer from this and sets the other fields.
    pub fn new(output: impl Into<String>, exit_code: Option<i32>) -> Self {
        let output = output.into();
        Self {
            output_bytes: output.len() as u64,
            output,
            exit_code,
            timed_out: false,
            out_of_memory: false,
            truncated: false,
            full_output_path: None,
            changes: Vec::new(),
            not_written: Vec::new(),
            duration: Duration::ZERO,
        }
    }

    /// True when the command exited with code 0 and every change was written back.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && self.not_written.is_empty()
    }
}
