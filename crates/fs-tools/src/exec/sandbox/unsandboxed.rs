//! [`UnsandboxedShell`]: commands on the host, isolating nothing. For trusted development only.

use std::time::Duration;

use async_trait::async_trait;

use trellis_backend::sandbox::{
    ExecFiles, ExecOutput, ExecRequest, LimitKind, LimitStatus, Sandbox, SandboxError, SandboxLimits,
    SandboxReport,
};

use super::capture::Capture;
use super::process::{self, Rlimits, Spawn, find_program};
use super::workdir::Workdir;
use super::{human_bytes, runner};

/// Runs commands directly on the host, as the user Trellis runs as, with that user's view of the
/// whole machine and network. **It isolates nothing**: a command can read any file the user can,
/// reach any host, and leave processes behind. Use it only to develop skills you trust, on a
/// machine where [`BubblewrapSandbox`](super::BubblewrapSandbox) is not available.
///
/// It still works like a sandbox where that costs nothing: the command runs in a private copy of
/// the view (its working directory is the copy of `request.cwd`, so relative paths work; absolute
/// virtual paths such as `/skills/…` do **not** resolve, since `/` is the host's root), with a
/// clean environment, the timeout (killing the command's process group; a process that leaves the
/// group survives it), the memory and file-size limits, the output cap, and the same version-checked
/// write-back.
#[derive(Debug)]
pub struct UnsandboxedShell {
    sh: std::path::PathBuf,
    prlimit: Option<std::path::PathBuf>,
    limits: SandboxLimits,
    work_root: std::path::PathBuf,
}

impl UnsandboxedShell {
    /// A shell with these limits, putting its copies in the system's temporary directory.
    pub fn new(limits: SandboxLimits) -> Self {
        Self {
            sh: find_program("sh").unwrap_or_else(|| "/bin/sh".into()),
            prlimit: find_program("prlimit"),
            limits,
            work_root: std::env::temp_dir(),
        }
    }
}

impl Default for UnsandboxedShell {
    fn default() -> Self {
        Self::new(SandboxLimits::default())
    }
}

#[async_trait]
impl Sandbox for UnsandboxedShell {
    fn name(&self) -> &str {
        "unsandboxed"
    }

    fn report(&self) -> SandboxReport {
        let l = &self.limits;
        let none = |kind, detail: &str| LimitStatus {
            kind,
            enforced: false,
            detail: detail.to_owned(),
        };
        let rl = self.prlimit.is_some();
        let uid = process::current_uid();
        SandboxReport {
            sandbox: "unsandboxed".into(),
            limits: vec![
                none(
                    LimitKind::Filesystem,
                    "runs on the host: every file the user can reach",
                ),
                none(LimitKind::Network, "the host's network"),
                LimitStatus {
                    kind: LimitKind::Environment,
                    enforced: true,
                    detail: "cleared, as in the sandbox".into(),
                },
                none(
                    LimitKind::Timeout,
                    "kills the process group; a process that leaves it survives",
                ),
                LimitStatus {
                    kind: LimitKind::Processes,
                    enforced: rl && uid != 0,
                    detail: if uid == 0 {
                        "runs as root, which RLIMIT_NPROC does not bind".into()
                    } else {
                        format!(
                            "RLIMIT_NPROC: {} beyond what the user already runs",
                            l.max_processes
                        )
                    },
                },
                LimitStatus {
                    kind: LimitKind::Memory,
                    enforced: rl,
                    detail: format!("RLIMIT_AS {} per process", human_bytes(l.max_memory_bytes)),
                },
                LimitStatus {
                    kind: LimitKind::FileSize,
                    enforced: rl,
                    detail: format!("RLIMIT_FSIZE {}", human_bytes(l.max_file_bytes)),
                },
                none(
                    LimitKind::TotalMemory,
                    "no control group: the command runs on the host",
                ),
                none(LimitKind::Cpu, "no control group: the command runs on the host"),
                none(LimitKind::Tmp, "the host's temporary directory"),
                LimitStatus {
                    kind: LimitKind::Output,
                    enforced: true,
                    detail: format!("{} kept (both ends)", human_bytes(l.output_bytes as u64)),
                },
                none(
                    LimitKind::Syscalls,
                    "no seccomp filter: every system call the user may make",
                ),
            ],
        }
    }

    async fn execute(&self, files: &ExecFiles, request: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        let request = runner::checked(request, &self.limits)?;
        let workdir = Workdir::materialize(files, &request, &self.work_root, None, None, None, &[]).await?;
        let home = workdir.host_path(&runner::home());
        let _ = std::fs::create_dir_all(&home);
        let cwd = workdir.host_path(&request.cwd);
        let uid = process::current_uid();
        let limits = self.prlimit.as_deref().map(|prlimit| {
            (
                prlimit,
                Rlimits {
                    processes: (uid != 0).then(|| process::processes_of(uid) + self.limits.max_processes),
                    address_space: self.limits.max_memory_bytes,
                    file_size: self.limits.max_file_bytes,
                },
            )
        });
        let tmp = std::env::temp_dir();
        let finished = process::run(
            Spawn {
                program: &self.sh,
                args: vec!["-c".into(), request.command.clone().into()],
                env: runner::environment(&request, &home.to_string_lossy(), &tmp.to_string_lossy()),
                cwd: &cwd,
                limits,
                run_as: None,
                timeout: request.timeout.max(Duration::from_millis(1)),
                group: None,
                stdin: None,
                pid_namespace: None,
            },
            Capture::new(self.limits.output_bytes, self.limits.full_output_bytes),
        )
        .await?;
        runner::finish(files, &request, workdir, finished).await
    }
}
