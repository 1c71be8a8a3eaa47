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
use std::path::{Path, PathBuf};
use std::time::Instant;

use async_trait::async_trait;

use trellis_backend::sandbox::{
    ExecFiles, ExecOutput, ExecRequest, LimitKind, Network, Sandbox, SandboxError, SandboxLimits,
    SandboxReport, SandboxUnavailable,
};

mod config;
mod mounts;
mod network;
mod overlay;
mod report;

use super::capture::Capture;
use super::cgroup::Cgroups;
use super::folder_cache::FolderCache;
use super::process::{self, Rlimits, Spawn, find_program};
use super::runner;
use super::seccomp::{BWRAP_ARGS, Launch, SyscallFilter};
use super::workdir::{Overlay, Owner, Workdir};
pub use config::{BubblewrapConfig, SANDBOX_UID};
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
        let args = self.args(root.path(), &[], "/", &Network::None, &[]);
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

    /// How to start bwrap with the options `args` and then `command` (its program and
    /// arguments): with the seccomp program for `network` when there is one, and then the
    /// options in a file bwrap reads (`--args`), so that the sandbox's init, a copy of bwrap that
    /// every command can see as its process 1, does not show them, with the host paths they name,
    /// in `/proc/1/cmdline` (security review F17).
    fn launch(
        &self,
        args: Vec<OsString>,
        command: Vec<OsString>,
        network: &Network,
    ) -> std::io::Result<Launch> {
        match &self.syscalls {
            Ok(filter) => {
                let options = options_file(&self.work_root, self.run_as, &args)?;
                filter.launch(&self.bwrap, options, command, network)
            }
            Err(_) => {
                let mut argv = args;
                argv.push("--".into());
                argv.extend(command);
                Ok(Launch::direct(&self.bwrap, argv))
            }
        }
    }

    /// `bwrap` arguments for a sandbox rooted at `root`, with `overlays` bound over it, up to (not
    /// including) `--`.
    fn args(
        &self,
        root: &Path,
        read_only: &[(PathBuf, String)],
        cwd: &str,
        network: &Network,
        overlays: &[Overlay],
    ) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::with_capacity(64);
        let mut push = |items: &[&std::ffi::OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
        push(&[
            "--unshare-all".as_ref(),
            "--die-with-parent".as_ref(),
            "--new-session".as_ref(),
        ]);
        if *network == Network::Host {
            push(&["--share-net".as_ref()]);
        }
        if self.no_nested_userns.is_ok() {
            push(&["--unshare-user".as_ref(), "--disable-userns".as_ref()]);
        } else if !overlays.is_empty() {
            push(&["--unshare-user".as_ref()]);
        }
        if !overlays.is_empty() {
            // bwrap starts as the overlay wrapper's namespace root: the command gets its own ids.
            let Owner { uid, gid } = self.runs_as();
            let (uid, gid) = (uid.to_string(), gid.to_string());
            push(&["--uid".as_ref(), uid.as_ref(), "--gid".as_ref(), gid.as_ref()]);
        }
        if self.runs_as().uid == 0 {
            push(&["--cap-drop".as_ref(), "ALL".as_ref()]);
        }
        push(&["--hostname".as_ref(), "sandbox".as_ref()]);
        push(&["--bind".as_ref(), root.as_os_str(), "/".as_ref()]);
        a.extend(self.system_mounts.iter().cloned());
        a.extend(overlay::binds(overlays));
        let mut push = |items: &[&std::ffi::OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
        for (host, inside) in read_only {
            push(&["--ro-bind".as_ref(), host.as_os_str(), inside.as_ref()]);
        }
        push(&["--chdir".as_ref(), cwd.as_ref()]);
        if self.syscalls.is_ok() {
            a.extend(BWRAP_ARGS.iter().map(OsString::from));
        }
        a
    }
}

/// The mounts every sandbox on this host gets after its root: `/usr`, the host's `/bin`·`/lib*`

#[async_trait]
impl Sandbox for BubblewrapSandbox {
    fn name(&self) -> &str {
        "bubblewrap"
    }

    fn report(&self) -> SandboxReport {
        let mut report = self.report.clone();
        let failed = self.overlay_failures.lock().unwrap_or_else(|p| p.into_inner());
        if !failed.is_empty()
            && let Some(filesystem) = report.limits.iter_mut().find(|l| l.kind == LimitKind::Filesystem)
        {
            for (dir, why) in failed.iter() {
                filesystem.detail.push_str(&format!(
                    "; {} is copied for each command: its overlay could not be mounted ({why})",
                    dir.display()
                ));
            }
        }
        report
    }

    async fn execute(&self, files: &ExecFiles, request: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        let request = runner::checked(request, &self.limits)?;
        let local = self.local_dirs(files);
        match self.run(files, &request, &local).await? {
            Ran::Done(output) => Ok(output),
            // Nothing ran: the same command again, with those directories copied (still
            // sandboxed), and never an overlay of them again from this sandbox.
            Ran::OverlayFailed(why) => {
                tracing::warn!(why, "an overlay could not be mounted; copying instead");
                {
                    let mut failed = self.overlay_failures.lock().unwrap_or_else(|p| p.into_inner());
                    for dir in &local {
                        failed.insert(dir.host.clone(), why.clone());
                    }
                }
                match self.run(files, &request, &[]).await? {
                    Ran::Done(output) => Ok(output),
                    Ran::OverlayFailed(why) => Err(SandboxError::Io {
                        context: "running the command".into(),
                        source: std::io::Error::other(why),
                    }),
                }
            }
        }
    }
}

/// How one attempt at a command ended.
enum Ran {
    Done(ExecOutput),
    /// An overlay could not be mounted, so the command did not run; the wrapper's words.
    OverlayFailed(String),
}

impl BubblewrapSandbox {
    /// Run the checked `request` once, with the directories of `local` mounted through overlays.
    async fn run(
        &self,
        files: &ExecFiles,
        request: &ExecRequest,
        local: &[LocalDir],
    ) -> Result<Ran, SandboxError> {
        let request = request.clone();
        let workdir = Workdir::materialize(
            files,
            &request,
            &self.work_root,
            self.run_as,
            self.cache.as_ref(),
            local,
        )
        .await?;
        let home = workdir.host_path(&runner::home());
        let _ = std::fs::create_dir_all(&home);
        if let Some(owner) = self.run_as {
            let _ = std::os::unix::fs::chown(&home, Some(owner.uid), Some(owner.gid));
        }
        // The read-only parts, outermost first, then the cached folders mounted inside them.
        let mut parts = workdir.read_only().to_vec();
        parts.sort_by_key(|p| p.depth());
        let read_only: Vec<(PathBuf, String)> = parts
            .iter()
            .map(|p| (workdir.host_path(p), p.to_string()))
            .chain(
                workdir
                    .bound()
                    .iter()
                    .map(|(host, p)| (host.clone(), p.to_string())),
            )
            .collect();
        let mut args = self.args(
            workdir.root(),
            &read_only,
            request.cwd.as_str(),
            &request.network,
            workdir.overlays(),
        );

        // The command's environment is set by bwrap inside the sandbox; prlimit and bwrap
        // themselves run on the host with none, from `/`.
        args.push("--clearenv".into());
        for (name, value) in runner::environment(&request, runner::home().as_str(), "/tmp") {
            args.extend(["--setenv".into(), name.into(), value.into()]);
        }
        // After `--clearenv`: it announces the proxy in the environment.
        let proxied = self.proxied(&request.network)?;
        if let Some(proxied) = &proxied {
            args.extend(proxied.args());
        }
        let mut command: Vec<OsString> = Vec::new();
        if proxied.is_some() {
            command.extend(network::Proxied::prefix());
        }
        command.extend(["/bin/sh".into(), "-c".into(), request.command.clone().into()]);
        let group = match &self.cgroups {
            Ok(groups) => Some(
                groups
                    .create(&self.limits)
                    .map_err(SandboxError::io("making the command's control group"))?,
            ),
            Err(_) => None,
        };
        let limits = self.prlimit.as_deref().map(|prlimit| {
            let uid = self.runs_as().uid;
            (
                prlimit,
                Rlimits {
                    // The group's pids.max counts the command alone; RLIMIT_NPROC counts the
                    // sandbox user's processes anywhere on the host, scanned from /proc.
                    processes: (uid != 0 && group.is_none())
                        .then(|| process::processes_of(uid) + self.limits.max_processes),
                    address_space: self.limits.max_memory_bytes,
                    file_size: self.limits.max_file_bytes,
                },
            )
        });
        let mut launch = self
            .launch(args, command, &request.network)
            .map_err(SandboxError::io("writing the seccomp program"))?;
        let token = format!("trellis-overlay-{}{}", runner::tag(), runner::tag());
        let wrapped = !workdir.overlays().is_empty();
        if let (Ok(tools), true) = (&self.overlays, wrapped) {
            launch = tools.wrap(launch, workdir.overlays(), &token);
            for overlay in workdir.overlays() {
                overlay.wait_past_start();
            }
        }
        let started = Instant::now();
        let finished = process::run(
            Spawn {
                program: &launch.program,
                args: launch.args,
                env: Vec::new(),
                cwd: Path::new("/"),
                limits,
                run_as: self.run_as,
                timeout: request.timeout,
                group: group.as_ref(),
                stdin: launch.stdin,
                pid_namespace: Some(&self.bwrap),
            },
            Capture::new(self.limits.output_bytes, self.limits.full_output_bytes),
        )
        .await?;
        tracing::debug!(elapsed = ?started.elapsed(), exit = ?finished.exit_code, "bubblewrap command finished");
        // Every connection of the command ends with it.
        drop(proxied);
        let out_of_memory = match group {
            Some(group) => {
                let oom = group.out_of_memory();
                // Nothing of the command may outlive it, and the write-back must not race it.
                group.finish().await;
                oom
            }
            None => false,
        };
        if wrapped {
            let text = finished.captured.text(None);
            if overlay::mount_failed(&token, finished.exit_code, &text) {
                return Ok(Ran::OverlayFailed(
                    text.replace(&token, "trellis").trim().to_owned(),
                ));
            }
        }
        let mut output = runner::finish(files, &request, workdir, finished).await?;
        output.out_of_memory = out_of_memory;
        Ok(Ran::Done(output))
    }
}

/// A file holding bwrap's options `args`, NUL-separated as `bwrap --args` reads them: private to
/// the commands' user (`run_as`, when Trellis is root), removed when dropped.
fn options_file(
    work_root: &Path,
    run_as: Option<Owner>,
    args: &[OsString],
) -> std::io::Result<tempfile::NamedTempFile> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let mut file = tempfile::Builder::new()
        .prefix("trellis-bwrap-args-")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(work_root)?;
    if let Some(owner) = run_as {
        std::os::unix::fs::chown(file.path(), Some(owner.uid), Some(owner.gid))?;
    }
    for arg in args {
        file.write_all(arg.as_bytes())?;
        file.write_all(b"\0")?;
    }
    file.flush()?;
    Ok(file)
}
