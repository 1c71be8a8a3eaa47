//! [`BubblewrapSandbox`]: commands under `bwrap` (Linux), seeing the agent's files and read-only
//! system directories, nothing else of the host.
//!
//! Each command gets fresh user, mount, PID, IPC, UTS, cgroup and (unless the request asks for the
//! host's) network namespaces. Its root is its private copy of the view ([`Workdir`]), with the
//! view's directories on local disk that belong to the commands' user mounted through overlays
//! (`overlay.rs`) instead of copied; over it go
//! `/usr` and the host's `/bin`, `/lib*` links read-only, a handful of `/etc` files the C library
//! and Python need (never `/etc/shadow`; `passwd` and `group` are generated and name only the
//! sandbox user), a fresh `/proc` of its own PID namespace, a minimal `/dev`, a private `/tmp`, and
//! the view's read-only parts remounted read-only. Everything else of the host — the state
//! directory, other threads' files, `/root`, `/home`, the host's `/proc` — is not mounted at all.
//!
//! Killing `bwrap` (at the timeout) kills the PID namespace's first process, and with it every
//! process of the namespace, however it forked or whatever signals it ignores. When Trellis runs as
//! root, the command runs as an unprivileged user (`nobody`, 65534, unless configured), with no
//! capabilities: root would ignore the process limit, and should not be what a skill script runs
//! as.
//!
//! Where this process may make control groups ([`Cgroups`]), each command also runs in a group of
//! its own that bounds the memory, processes and CPU of all its processes together; the report
//! says whether it does here.
//!
//! Every command also runs under a seccomp filter ([`SyscallFilter`]: io_uring, ptrace, keyrings,
//! namespaces, mounts, … and sockets other than `AF_UNIX` when the network is off fail with
//! `EPERM`), which bwrap installs right before it starts the command. The filter cannot see the
//! namespace flags of `clone3`, so where bwrap has `--disable-userns` (0.8 and later) and it works
//! here, the command cannot make a user namespace of its own either.

use std::ffi::OsString;
use std::path::PathBuf;

use trellis_backend::sandbox::{ExecFiles, Network, SandboxLimits, SandboxReport, SandboxUnavailable};

mod command;
mod config;
mod launch;
mod mounts;
mod network;
mod overlay;
mod report;

use super::cgroup::Cgroups;
use super::folder_cache::FolderCache;
use super::process::{self, find_program};
use super::seccomp::{Launch, SyscallFilter};
use super::thread_cache::ThreadCache;
use super::workdir::Owner;
pub use config::{BubblewrapConfig, SANDBOX_UID, THREAD_CACHE_MAX_BYTES, THREAD_CACHE_MIN_FILES};
use mounts::system_mounts;
use overlay::OverlayTools;
use trellis_backend::LocalDir;

/// The shared `nobody` user's id: who commands run as when Trellis runs as root and
/// [`SANDBOX_UID`] is taken on this host.
pub const NOBODY: u32 = 65534;

/// Commands under bubblewrap. Built by [`BubblewrapSandbox::new`], which probes the host and fails
/// with [`SandboxUnavailable`] rather than ever running a command unsandboxed.
#[derive(Debug)]
pub struct BubblewrapSandbox {
    bwrap: PathBuf,
    prlimit: Option<PathBuf>,
    limits: SandboxLimits,
    work_root: PathBuf,
    run_as: Option<Owner>,
    /// Holds the generated `passwd` and `group`.
    system: tempfile::TempDir,
    /// Reached skill folders kept between commands.
    cache: Option<FolderCache>,
    /// Each thread's object-store files kept between its commands, or why not.
    threads: Result<ThreadCache, String>,
    /// [`BubblewrapConfig::thread_cache_min_files`], resolved.
    thread_cache_min_files: usize,
    /// [`BubblewrapConfig::thread_cache_max_bytes`], resolved.
    thread_cache_max_bytes: u64,
    /// [`mounts::system_mounts`], worked out once.
    system_mounts: Vec<OsString>,
    /// Where each command's control group goes, or why there is none on this host.
    cgroups: Result<Cgroups, String>,
    /// The seccomp programs, or why this host has none.
    syscalls: Result<SyscallFilter, String>,
    /// Whether commands get `--unshare-user --disable-userns`, or why not.
    no_nested_userns: Result<(), String>,
    /// How local directories are mounted through overlays, or why they are copied instead.
    overlays: Result<OverlayTools, String>,
    /// Why commands run as a shared user although Trellis runs as root, if they do.
    user_note: Option<String>,
    /// The bridge program for allowed domains, or why there is none.
    bridge: Result<PathBuf, String>,
    /// Directories whose overlay failed to mount here, and why: copied from then on.
    overlay_failures: std::sync::Mutex<std::collections::BTreeMap<PathBuf, String>>,
    report: SandboxReport,
}

impl BubblewrapSandbox {
    /// Find `bwrap`, check that it can create a sandbox here, and say what it will enforce.
    pub fn new(config: BubblewrapConfig) -> Result<Self, SandboxUnavailable> {
        if !cfg!(target_os = "linux") {
            return Err(SandboxUnavailable::UnsupportedPlatform {
                sandbox: "bubblewrap".into(),
                os: std::env::consts::OS.into(),
            });
        }
        let bwrap = match config.bwrap {
            // Absolute: it is started from `/`, not from where Trellis was.
            Some(path) if path.is_file() => {
                std::fs::canonicalize(&path).map_err(|e| SandboxUnavailable::MissingBinary {
                    program: "bwrap".into(),
                    detail: format!("{}: {e}", path.display()),
                })?
            }
            Some(path) => {
                return Err(SandboxUnavailable::MissingBinary {
                    program: "bwrap".into(),
                    detail: format!("{} does not exist", path.display()),
                });
            }
            None => find_program("bwrap").ok_or_else(|| SandboxUnavailable::MissingBinary {
                program: "bwrap".into(),
                detail: "not on PATH, /usr/bin or /bin".into(),
            })?,
        };
        let help = std::process::Command::new(&bwrap)
            .arg("--help")
            .env_clear()
            .current_dir("/")
            .output()
            .map_err(|e| SandboxUnavailable::MissingBinary {
                program: "bwrap".into(),
                detail: format!("cannot start {}: {e}", bwrap.display()),
            })?;
        if !String::from_utf8_lossy(&help.stdout).contains("--size") {
            return Err(SandboxUnavailable::OutdatedBinary {
                program: "bwrap".into(),
                detail: format!("`{} --help` lists no `--size`", bwrap.display()),
            });
        }
        let prlimit = find_program("prlimit");
        let cgroups = Cgroups::probe(config.cgroup_parent.as_deref());
        if let (Some(dir), Err(why)) = (&config.cgroup_parent, &cgroups) {
            return Err(SandboxUnavailable::ControlGroups {
                parent: dir.display().to_string(),
                detail: why.clone(),
            });
        }
        let work_root = config.work_root.unwrap_or_else(std::env::temp_dir);
        let root = process::current_uid() == 0;
        let (wanted, user_note) = match (root, config.run_as_when_root) {
            (false, _) => (None, None),
            (true, Some(owner)) => (Some(owner), None),
            (true, None) => {
                let (owner, note) = config::dedicated_user();
                (Some(owner), note)
            }
        };
        if let Some(note) = &user_note {
            tracing::warn!(note, "commands run as a shared user");
        }
        let system = tempfile::Builder::new()
            .prefix("trellis-sandbox-etc-")
            .tempdir()
            .map_err(|e| SandboxUnavailable::NamespacesDisabled {
                detail: format!("cannot create a temporary directory: {e}"),
            })?;
        let mut me = Self {
            bwrap,
            prlimit,
            limits: config.limits,
            work_root,
            run_as: wanted,
            system,
            cache: None,
            threads: Err("not probed".into()),
            thread_cache_min_files: config
                .thread_cache_min_files
                .unwrap_or(config::THREAD_CACHE_MIN_FILES),
            thread_cache_max_bytes: config
                .thread_cache_max_bytes
                .unwrap_or(config::THREAD_CACHE_MAX_BYTES),
            system_mounts: Vec::new(),
            cgroups,
            syscalls: SyscallFilter::for_host(),
            no_nested_userns: Err("not probed".into()),
            overlays: Err("not probed".into()),
            bridge: network::find_bridge(config.network_bridge.as_deref()),
            user_note,
            overlay_failures: Default::default(),
            report: SandboxReport {
                sandbox: "bubblewrap".into(),
                limits: Vec::new(),
            },
        };
        me.write_identity()
            .map_err(|e| SandboxUnavailable::NamespacesDisabled {
                detail: format!("cannot write the sandbox's /etc/passwd: {e}"),
            })?;
        me.system_mounts = system_mounts(me.system.path(), me.limits.max_tmp_bytes);
        // As root, commands run as an unprivileged user; if its namespaces are refused, run them
        // as root without capabilities only when the configuration says so.
        if let Err(first) = me.probe() {
            let Some(user) = me.run_as else {
                return Err(SandboxUnavailable::NamespacesDisabled { detail: first });
            };
            if !config.allow_root_commands {
                return Err(SandboxUnavailable::NamespacesDisabled {
                    detail: format!(
                        "as uid {}: {first}; commands do not run as root unless allowed (BubblewrapConfig::allow_root_commands, or TRELLIS_BWRAP_ALLOW_ROOT=1 for the trellis command)",
                        user.uid
                    ),
                });
            }
            me.run_as = None;
            me.write_identity()
                .map_err(|e| SandboxUnavailable::NamespacesDisabled {
                    detail: format!("cannot write the sandbox's /etc/passwd: {e}"),
                })?;
            me.probe()
                .map_err(|detail| SandboxUnavailable::NamespacesDisabled { detail })?;
        }
        me.probe_disable_userns(&String::from_utf8_lossy(&help.stdout));
        me.overlays = me.probe_overlays();
        if let Err(why) = &me.overlays {
            tracing::info!(why, "local directories are copied for each command");
        }
        me.report = me.compute_report();
        // Without a cache every command copies the folders it reaches; that is slower, not wrong.
        me.cache = FolderCache::new(&me.work_root, me.run_as)
            .map_err(|e| tracing::warn!(error = %e, "no skill folder cache"))
            .ok();
        me.threads = me.open_thread_cache();
        if let Err(why) = &me.threads {
            tracing::info!(why, "each command copies the thread's files from the store");
        }
        Ok(me)
    }

    /// The user commands run as (their uid and gid on the host).
    pub fn runs_as(&self) -> Owner {
        self.run_as.unwrap_or(Owner {
            uid: process::current_uid(),
            gid: process::current_gid(),
        })
    }

    fn write_identity(&self) -> std::io::Result<()> {
        let Owner { uid, gid } = self.runs_as();
        std::fs::write(
            self.system.path().join("passwd"),
            format!("sandbox:x:{uid}:{gid}:sandbox:/home:/bin/sh\n"),
        )?;
        std::fs::write(self.system.path().join("group"), format!("sandbox:x:{gid}:\n"))
    }

    /// Whether `--disable-userns` works here: bwrap lists it in `help` and a sandbox starts with it.
    /// It needs an explicit `--unshare-user`, which a host that lets bwrap sandbox only without a
    /// user namespace (root, with user namespaces off) refuses; such a host keeps its sandbox
    /// without the option, and the report says so.
    fn probe_disable_userns(&mut self, help: &str) {
        if !help.contains("--disable-userns") {
            self.no_nested_userns = Err(format!(
                "`{} --help` lists no `--disable-userns` (bubblewrap 0.8 or later has it)",
                self.bwrap.display()
            ));
            return;
        }
        self.no_nested_userns = Ok(());
        if let Err(e) = self.probe() {
            tracing::warn!(error = %e, "bwrap --disable-userns does not work here");
            self.no_nested_userns = Err(format!("`bwrap --disable-userns` fails here: {e}"));
        }
    }

    /// Run `/bin/true` in an empty sandbox.
    fn probe(&self) -> Result<(), String> {
        let root = tempfile::Builder::new()
            .prefix("trellis-sandbox-probe-")
            .tempdir_in(&self.work_root)
            .map_err(|e| format!("cannot create a directory in {}: {e}", self.work_root.display()))?;
        if let Some(owner) = self.run_as {
            std::os::unix::fs::chown(root.path(), Some(owner.uid), Some(owner.gid))
                .map_err(|e| format!("cannot hand {} to uid {}: {e}", root.path().display(), owner.uid))?;
        }
        let args = self.args(root.path(), &[], "/", &Network::None, &[], false);
        let launch = self
            .launch(args, vec!["/bin/true".into()], &Network::None)
            .map_err(|e| format!("cannot write the seccomp program: {e}"))?;
        let out = self.run_probe(launch)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "`bwrap … /bin/true` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// The local directories of `files` a command gets through overlays (none where overlays do
    /// not work here).
    fn local_dirs(&self, files: &ExecFiles) -> Vec<LocalDir> {
        let Ok(_) = &self.overlays else {
            return Vec::new();
        };
        let mut dirs = overlay::chosen(files, self.runs_as().uid);
        let failed = self.overlay_failures.lock().unwrap_or_else(|p| p.into_inner());
        dirs.retain(|d| !failed.contains_key(&d.host));
        dirs
    }

    /// The threads' caches, when their bases can be mounted here: through an overlay, by a user
    /// no other host process runs as (the shared `nobody` could change a base between commands,
    /// as it could a shared skill cache, security review F13).
    fn open_thread_cache(&self) -> Result<ThreadCache, String> {
        if let Err(why) = &self.overlays {
            return Err(format!("no overlays here: {why}"));
        }
        if self.runs_as().uid == NOBODY {
            return Err("commands run as the shared nobody".into());
        }
        ThreadCache::open(
            &self.work_root,
            self.run_as,
            self.thread_cache_min_files,
            self.thread_cache_max_bytes,
        )
        .map_err(|e| e.to_string())
    }

    /// The threads' caches, unless their overlay failed to mount here.
    fn thread_cache(&self) -> Option<&ThreadCache> {
        let threads = self.threads.as_ref().ok()?;
        let failed = self.overlay_failures.lock().unwrap_or_else(|p| p.into_inner());
        (!failed.contains_key(threads.root())).then_some(threads)
    }

    /// Run a probe's `launch` to completion as the commands' user, from `/`, with no environment.
    fn run_probe(&self, launch: Launch) -> Result<std::process::Output, String> {
        let mut cmd = std::process::Command::new(&launch.program);
        cmd.args(&launch.args).env_clear().current_dir("/").stdin(
            launch
                .stdin
                .map_or_else(std::process::Stdio::null, std::process::Stdio::from),
        );
        if let Some(owner) = self.run_as {
            use std::os::unix::process::CommandExt;
            cmd.uid(owner.uid).gid(owner.gid);
        }
        cmd.output()
            .map_err(|e| format!("cannot start {}: {e}", launch.program.display()))
    }
}
