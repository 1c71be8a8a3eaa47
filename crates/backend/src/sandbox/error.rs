//! The sandbox's errors: [`SandboxError`], and [`SandboxUnavailable`] for a host that cannot run a
//! sandbox at all.

use crate::error::BackendError;

/// Why a sandbox cannot run on this host, with the fix in the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxUnavailable {
    /// The sandbox binary is not installed (or not where it was configured).
    #[error(
        "the {program} binary was not found ({detail}); install it (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`) or choose another sandbox"
    )]
    MissingBinary {
        /// The program looked for.
        program: String,
        /// What the lookup said.
        detail: String,
    },
    /// The binary is there but lacks an option the sandbox needs.
    #[error(
        "the {program} binary is too old: {detail}; bubblewrap 0.5 or later is needed (for `--size`); upgrade it or choose another sandbox"
    )]
    OutdatedBinary {
        /// The program.
        program: String,
        /// What is missing.
        detail: String,
    },
    /// The binary is there but cannot create namespaces here.
    #[error(
        "bubblewrap cannot create a sandbox on this host: {detail}. Unprivileged user namespaces are probably disabled: enable them (`sysctl -w kernel.unprivileged_userns_clone=1`, `sysctl -w user.max_user_namespaces=15000`, or on Ubuntu 24.04+ `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`), or run inside a container that allows them"
    )]
    NamespacesDisabled {
        /// What bubblewrap printed.
        detail: String,
    },
    /// The control-group parent the configuration names cannot hold command groups.
    #[error(
        "the configured cgroup parent {parent} cannot be used: {detail}; give a cgroup v2 directory this process may write whose cgroup.subtree_control enables memory and pids (for example a systemd unit's subgroup with Delegate=yes), or leave it unset"
    )]
    ControlGroups {
        /// The directory configured.
        parent: String,
        /// What was wrong.
        detail: String,
    },
    /// Not available on this operating system.
    #[error("the {sandbox} sandbox is not available on {os}")]
    UnsupportedPlatform {
        /// The sandbox.
        sandbox: String,
        /// The operating system.
        os: String,
    },
}

/// Every failure of [`Sandbox::execute`](super::Sandbox::execute). A command that runs and fails
/// is not an error: its exit code is in the [`ExecOutput`](super::ExecOutput).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The sandbox cannot run on this host.
    #[error(transparent)]
    Unavailable(#[from] SandboxUnavailable),
    /// The request is unusable (an empty command, a working directory outside the view, a bad
    /// environment variable name).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The files could not be read from, or written back to, the backend.
    #[error("files: {0}")]
    Backend(#[from] BackendError),
    /// The files the command can reach are more than the limits allow materializing.
    #[error("too many files to materialize: {0}")]
    TooLarge(String),
    /// Local disk or process creation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    /// A `map_err` adapter for an [`Io`](Self::Io) failure while `context` was being done, as
    /// implementations use it: `fs::create_dir_all(&dir).map_err(SandboxError::io("creating the workdir"))`.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}
