//! Running one command: materializing its view, starting bwrap around it, and writing back.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use async_trait::async_trait;

use trellis_backend::LocalDir;
use trellis_backend::sandbox::{
    ExecFiles, ExecOutput, ExecRequest, LimitKind, Sandbox, SandboxError, SandboxReport,
};

use super::super::capture::Capture;
use super::super::process::{self, Rlimits, Spawn};
use super::super::runner;
use super::super::thread_cache::ThreadCache;
use super::super::workdir::{Overlay, Workdir};
use super::{BubblewrapSandbox, network, overlay};

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
        let thread = self.thread_cache();
        match self.run(files, &request, thread, &local).await? {
            Ran::Done(output) => Ok(output),
            // Nothing ran: the same command again, with those directories copied (still
            // sandboxed), and never an overlay of them again from this sandbox.
            Ran::OverlayFailed { why, base } => {
                tracing::warn!(why, "an overlay could not be mounted; copying instead");
                {
                    let mut failed = self.overlay_failures.lock().unwrap_or_else(|p| p.into_inner());
                    for dir in &local {
                        failed.insert(dir.host.clone(), why.clone());
                    }
                    if let (Some(thread), true) = (thread, base) {
                        failed.insert(thread.root().to_path_buf(), why.clone());
                    }
                }
                match self.run(files, &request, None, &[]).await? {
                    Ran::Done(output) => Ok(output),
                    Ran::OverlayFailed { why, .. } => Err(SandboxError::Io {
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
    OverlayFailed {
        why: String,
        /// Whether the thread's base was among the overlays.
        base: bool,
    },
}

impl BubblewrapSandbox {
    /// Run the checked `request` once, with the directories of `local` mounted through overlays,
    /// and the view's read-write files from the `thread` cache when one is given.
    async fn run(
        &self,
        files: &ExecFiles,
        request: &ExecRequest,
        thread: Option<&ThreadCache>,
        local: &[LocalDir],
    ) -> Result<Ran, SandboxError> {
        let request = request.clone();
        let workdir = Workdir::materialize(
            files,
            &request,
            &self.work_root,
            self.run_as,
            self.cache.as_ref(),
            thread,
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
        // Over the thread's base, the root is the overlay of the base and the copy.
        let mounted: Vec<&Overlay> = workdir
            .root_overlay()
            .into_iter()
            .chain(workdir.overlays())
            .collect();
        let wrapped = !mounted.is_empty();
        let root = workdir
            .root_overlay()
            .map_or_else(|| workdir.root().to_path_buf(), Overlay::merged);
        let mut args = self.args(
            &root,
            &read_only,
            request.cwd.as_str(),
            &request.network,
            workdir.overlays(),
            wrapped,
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
        if let (Ok(tools), true) = (&self.overlays, wrapped) {
            launch = tools.wrap(launch, &mounted, &token);
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
                return Ok(Ran::OverlayFailed {
                    why: text.replace(&token, "trellis").trim().to_owned(),
                    base: workdir.root_overlay().is_some(),
                });
            }
        }
        let mut output = runner::finish(files, &request, workdir, finished).await?;
        output.out_of_memory = out_of_memory;
        Ok(Ran::Done(output))
    }
}
