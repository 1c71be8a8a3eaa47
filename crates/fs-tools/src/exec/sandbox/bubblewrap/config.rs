//! [`BubblewrapConfig`]: how a [`BubblewrapSandbox`](super::BubblewrapSandbox) is set up.

use std::path::{Path, PathBuf};

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
    /// Who runs commands when Trellis runs as root; default [`SANDBOX_UID`] as uid and gid (a
    /// user of the sandbox's own), or `nobody` (65534) where this host's account databases
    /// claim it. Ignored when Trellis does not run as root (commands then run as Trellis's own
    /// user).
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
    /// The fewest read-write files from the store a view must have for a command keyed by its
    /// thread to use the thread's cached base (mounted through an overlay, which costs a mount
    /// whatever the size) rather than copy them; default [`THREAD_CACHE_MIN_FILES`].
    pub thread_cache_min_files: Option<usize>,
    /// What all threads' cached bases under `work_root` may hold together, in bytes of file
    /// contents; past it the least recently used bases no command holds are removed (their
    /// threads' next commands fetch everything again). Default [`THREAD_CACHE_MAX_BYTES`]; 0 keeps
    /// no base once its command has ended; `u64::MAX`: no bound but the seven idle days.
    pub thread_cache_max_bytes: Option<u64>,
}

/// Below this many files a view is copied rather than served from the thread's base (see
/// `docs/sandbox.md`): copying a few small files costs less than mounting an overlay.
pub const THREAD_CACHE_MIN_FILES: usize = 64;

/// What all threads' cached bases may hold together by default (see `docs/sandbox.md`): 10 GiB,
/// ten views of the largest a command is given by default (1 GiB), a small share of a server's
/// disk that still keeps the bases of many ordinary threads (most hold megabytes).
pub const THREAD_CACHE_MAX_BYTES: u64 = 10 << 30;

impl BubblewrapConfig {
    /// Use the thread's cached base for views with at least `files` read-write files from the
    /// store (0: always).
    pub fn thread_cache_min_files(mut self, files: usize) -> Self {
        self.thread_cache_min_files = Some(files);
        self
    }

    /// Keep at most `bytes` of files in all threads' cached bases together (see
    /// [`BubblewrapConfig::thread_cache_max_bytes`]).
    pub fn thread_cache_max_bytes(mut self, bytes: u64) -> Self {
        self.thread_cache_max_bytes = Some(bytes);
        self
    }

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

/// The user (uid and gid) commands run as when Trellis runs as root, unless
/// [`BubblewrapConfig::run_as_when_root`] names another: a uid of the sandbox's own (security
/// review F13). Under the shared `nobody` (65534), any host daemon running as `nobody` could
/// signal or trace a command's processes and reach its private copy of the files through
/// `/proc/<pid>/root`. 2,000,000,000 lies in the range systemd leaves unused (between the
/// container ranges ending at 0x6FFFFFFF and its foreign range at 0x7FFE0000), below 2³¹ so
/// that no tool reads it as negative; it is used only when no `/etc/passwd`, `/etc/group`,
/// `/etc/subuid` or `/etc/subgid` entry claims it (else commands run as `nobody`, and the
/// report says why).
pub const SANDBOX_UID: u32 = 2_000_000_000;

/// The user commands run as when Trellis is root and the configuration names none:
/// [`SANDBOX_UID`] (as uid and gid) when no account database of this host claims it, else
/// `nobody` (65534), with the reason.
pub(super) fn dedicated_user() -> (Owner, Option<String>) {
    match claimed_by(SANDBOX_UID, Path::new("/etc")) {
        None => (
            Owner {
                uid: SANDBOX_UID,
                gid: SANDBOX_UID,
            },
            None,
        ),
        Some(by) => (
            Owner {
                uid: super::NOBODY,
                gid: super::NOBODY,
            },
            Some(format!(
                "uid {SANDBOX_UID} is taken on this host ({by}), so commands run as the shared nobody (65534); name a free uid in BubblewrapConfig::run_as_when_root"
            )),
        ),
    }
}

/// Which of `etc`'s `passwd`, `group`, `subuid` and `subgid` claims `id` (as a uid or gid, or
/// inside a subordinate range), if any.
fn claimed_by(id: u32, etc: &Path) -> Option<String> {
    let text = |name: &str| std::fs::read_to_string(etc.join(name)).unwrap_or_default();
    for name in ["passwd", "group"] {
        let taken = text(name)
            .lines()
            .filter_map(|l| l.split(':').nth(2))
            .any(|field| field.trim().parse::<u32>() == Ok(id));
        if taken {
            return Some(format!("{}/{name}", etc.display()));
        }
    }
    for name in ["subuid", "subgid"] {
        let taken = text(name).lines().any(|l| {
            let mut f = l.split(':').skip(1).map(|x| x.trim().parse::<u64>());
            match (f.next(), f.next()) {
                (Some(Ok(start)), Some(Ok(count))) => {
                    (start..start.saturating_add(count)).contains(&u64::from(id))
                }
                _ => false,
            }
        });
        if taken {
            return Some(format!("{}/{name}", etc.display()));
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_id_claimed_by_an_account_or_a_subordinate_range_is_not_taken() {
        let etc = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(etc.path().join(name), text).unwrap();
        assert_eq!(claimed_by(SANDBOX_UID, etc.path()), None);
        write(
            "passwd",
            "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
        );
        write("subuid", "alice:100000:65536\n");
        assert_eq!(claimed_by(SANDBOX_UID, etc.path()), None);
        assert!(claimed_by(65534, etc.path()).unwrap().ends_with("passwd"));
        assert!(claimed_by(165535, etc.path()).unwrap().ends_with("subuid"));
        assert_eq!(claimed_by(165536, etc.path()), None);
        write("subgid", &format!("big:{}:10\n", SANDBOX_UID - 5));
        assert!(claimed_by(SANDBOX_UID, etc.path()).unwrap().ends_with("subgid"));
    }
}
