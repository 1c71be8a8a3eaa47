//! What a [`BubblewrapSandbox`] enforces on this host: its [`SandboxReport`], worked out once when
//! the sandbox is built.

use trellis_backend::sandbox::{LimitKind, LimitStatus, SandboxReport};

use super::super::human_bytes;
use super::BubblewrapSandbox;

impl BubblewrapSandbox {
    /// How the view reaches the command: which parts are mounted through overlays and which are
    /// copied, and why.
    fn exposure(&self) -> String {
        let uid = self.runs_as().uid;
        match &self.overlays {
            Ok(_) => format!(
                "directories on local disk owned by uid {uid} (the commands' user), such as a --workdir, are mounted through an overlay (the real directory read-only below a private upper layer; git hooks and config and start-up files bound read-only; what the command changed written back from the upper layer, version-checked); the rest of the view, local directories of other owners (uid {uid} could not change their files through an overlay) and every directory while a permission rule limits reads are copied for each command"
            ),
            Err(why) => {
                format!("every part of the view is copied for each command: no overlays here ({why})")
            }
        }
    }

    /// Who commands run as.
    fn user(&self) -> String {
        let uid = self.runs_as().uid;
        match (&self.run_as, &self.user_note) {
            (None, _) => format!("commands run as Trellis's own user (uid {uid}) in a user namespace"),
            (Some(_), Some(note)) => note.clone(),
            (Some(_), None) if uid == super::SANDBOX_UID => {
                format!(
                    "commands run as uid {uid}, a user of the sandbox's own that no account of this host has"
                )
            }
            (Some(_), None) => format!("commands run as uid {uid}"),
        }
    }

    pub(super) fn compute_report(&self) -> SandboxReport {
        let l = &self.limits;
        let status = |kind, enforced, detail: String| LimitStatus {
            kind,
            enforced,
            detail,
        };
        let unprivileged = self.runs_as().uid != 0;
        let rl = self.prlimit.is_some();
        let no_prlimit = "prlimit(1) not found (install util-linux)".to_owned();
        let no_cgroup = |why: &String| format!("no control group: {why}");
        SandboxReport {
            sandbox: "bubblewrap".into(),
            limits: vec![
                status(
                    LimitKind::Filesystem,
                    true,
                    format!(
                        "mount namespace: the agent's files at their virtual paths, read-only parts and system directories read-only, nothing else of the host; {}; {}",
                        self.exposure(),
                        self.user()
                    ),
                ),
                status(
                    LimitKind::Network,
                    true,
                    super::network::report_detail(&self.bridge),
                ),
                status(
                    LimitKind::Environment,
                    true,
                    "cleared: PATH, HOME, LANG, TMPDIR, PYTHONDONTWRITEBYTECODE and the request's variables only".into(),
                ),
                status(
                    LimitKind::Timeout,
                    true,
                    format!("PID namespace torn down at the timeout (at most {} s)", l.max_timeout.as_secs()),
                ),
                match (&self.cgroups, rl, unprivileged) {
                    (Ok(groups), _, _) => status(
                        LimitKind::Processes,
                        true,
                        format!("pids.max {} per command ({})", l.max_processes, groups.describe()),
                    ),
                    (Err(_), true, true) => status(
                        LimitKind::Processes,
                        true,
                        format!(
                            "RLIMIT_NPROC: {} beyond what uid {} already runs",
                            l.max_processes,
                            self.runs_as().uid
                        ),
                    ),
                    (Err(_), false, _) => status(LimitKind::Processes, false, no_prlimit.clone()),
                    (Err(_), true, false) => status(
                        LimitKind::Processes,
                        false,
                        "commands run as root (an unprivileged user's namespaces were refused), which RLIMIT_NPROC does not bind".into(),
                    ),
                },
                if rl {
                    status(
                        LimitKind::Memory,
                        true,
                        format!("RLIMIT_AS {} per process", human_bytes(l.max_memory_bytes)),
                    )
                } else {
                    status(LimitKind::Memory, false, no_prlimit.clone())
                },
                match &self.cgroups {
                    Ok(groups) => status(
                        LimitKind::TotalMemory,
                        true,
                        format!(
                            "memory.max {} for all the command's processes ({})",
                            human_bytes(l.max_total_memory_bytes),
                            groups.describe()
                        ),
                    ),
                    Err(why) => status(LimitKind::TotalMemory, false, no_cgroup(why)),
                },
                match &self.cgroups {
                    Ok(groups) if groups.limits_cpu() => status(
                        LimitKind::Cpu,
                        true,
                        format!("cpu.max {}% of one core ({})", l.max_cpu_percent, groups.describe()),
                    ),
                    Ok(groups) => status(
                        LimitKind::Cpu,
                        false,
                        format!("the cpu controller is not available ({})", groups.describe()),
                    ),
                    Err(why) => status(LimitKind::Cpu, false, no_cgroup(why)),
                },
                if rl {
                    status(LimitKind::FileSize, true, format!("RLIMIT_FSIZE {}", human_bytes(l.max_file_bytes)))
                } else {
                    status(LimitKind::FileSize, false, no_prlimit)
                },
                status(
                    LimitKind::Tmp,
                    true,
                    format!(
                        "/tmp and /dev/shm: tmpfs (memory) of at most {} each; /dev read-only",
                        human_bytes(l.max_tmp_bytes)
                    ),
                ),
                status(
                    LimitKind::Output,
                    true,
                    format!(
                        "{} kept (both ends), up to {} saved as a file",
                        human_bytes(l.output_bytes as u64),
                        human_bytes(l.full_output_bytes)
                    ),
                ),
                {
                    let userns = match &self.no_nested_userns {
                        Ok(()) => "no nested user namespaces (bwrap --disable-userns)".to_owned(),
                        Err(why) => format!("nested user namespaces allowed: {why}"),
                    };
                    match &self.syscalls {
                        Ok(filter) => status(
                            LimitKind::Syscalls,
                            true,
                            format!(
                                "seccomp ({}): EPERM for io_uring, ptrace, process_vm_*, keyrings, bpf, perf_event_open, userfaultfd, unshare, setns, mounts, modules, kexec{}; sockets but AF_UNIX without network, AF_VSOCK always; {userns}",
                                filter.arch(),
                                if filter.arch() == "x86_64" { ", the x32 ABI" } else { "" }
                            ),
                        ),
                        Err(why) => status(LimitKind::Syscalls, false, format!("{why}; {userns}")),
                    }
                },
            ],
        }
    }
}
