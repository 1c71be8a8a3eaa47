//! [`BubblewrapConfig`]: how a [`BubblewrapSandbox`](super::BubblewrapSandbox) is set up.

use std::path::PathBuf;

use trellis_backend::sandbox::SandboxLimits;

use super::super::workdir::Owner;

/// How a [`BubblewrapSandbox`](super::BubblewrapSandbox) is set up. `Default` finds `bwrap` on `PATH`.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct BubblewrapConfig {
    /// The `bwrap` binary; default: the first on `PATH`.
    pub bwrap: Option<PathBuf>,
    /// Resource limits.
    pub limits: SandboxLimits,
    /// Where commands' private copies go; default: the system's temporary directory.
    pub work_root: Option<PathBuf>,
    /// Who runs commands when Trellis runs as root; default `nobody` (65534:65534). Ignored when
    /// Trellis does not run as root (commands then run as Trellis's own user).
    pub run_as_when_root: Option<Owner>,
    /// A cgroup v2 directory to make each command's control group in (its `cgroup.subtree_control`
    /// must enable `memory` and `pids`); default: found from this process's own groups (see
    /// `docs/sandbox.md`). When given and unusable, [`BubblewrapSandbox::new`](super::BubblewrapSandbox::new) fails.
    pub cgroup_parent: Option<PathBuf>,
    /// When Trellis runs as root and the unprivileged user's namespaces are refused, run commands
    /// as root without capabilities instead of failing. Off by default: root needs no capability
    /// to read the root-owned files that are mounted, and no `RLIMIT_NPROC` binds it.
    pub allow_root_commands: bool,
    /// The bridge program that carries a command's connections to the proxy of allowed domains
    /// (`trellis-sandbox-bridge`, or a program that runs `sandbox::bridge::main` when its first
    /// argument is `sandbox::bridge::BRIDGE_ARG`); default: `trellis-sandbox-bridge` beside the
    /// running executable. Without one, a request for allowed domains fails.
    pub network_bridge: Option<PathBuf>,
}

impl BubblewrapConfig {
    /// Use these limits.
    pub fn limits(mut self, limits: SandboxLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Put commands' private copies under `dir`.
    pub fn work_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.work_root = Some(dir.into());
        self
    }

    /// Run commands as root without capabilities when Trellis runs as root and the unprivileged
    /// user's namespaces are refused (see [`BubblewrapConfig::allow_root_commands`]).
    pub fn allow_root_commands(mut self, allow: bool) -> Self {
        self.allow_root_commands = allow;
        self
    }

    /// Carry allowed domains' connections through the bridge program `program` (see
    /// [`BubblewrapConfig::network_bridge`]).
    pub fn network_bridge(mut self, program: impl Into<PathBuf>) -> Self {
        self.network_bridge = Some(program.into());
        self
    }

    /// Make each command's control group under the cgroup v2 directory `dir`.
    pub fn cgroup_parent(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cgroup_parent = Some(dir.into());
        self
    }
}
