//! Resource limits ([`SandboxLimits`]) and what a sandbox enforces on this host
//! ([`SandboxReport`]).

use std::fmt;
use std::time::Duration;

/// Limits on one command. `Default` gives the documented values.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SandboxLimits {
    /// Most processes (and threads) the command may have at once. Default 256.
    pub max_processes: u64,
    /// Most address space one process may map, in bytes (`RLIMIT_AS`). Default 4 GiB.
    pub max_memory_bytes: u64,
    /// Most memory all the command's processes may use together, in bytes: their pages, the
    /// page cache they fill and what they write into the in-memory `/tmp` (a control group's
    /// `memory.max`). Past it the kernel reclaims, then kills a process of the command. Default
    /// 4 GiB.
    pub max_total_memory_bytes: u64,
    /// Most CPU time the command may use, in percent of one core per wall-clock second (a control
    /// group's `cpu.max`): 200 is two cores' worth. Default 200.
    pub max_cpu_percent: u32,
    /// Largest file a process may write, in bytes (`RLIMIT_FSIZE`). Default 1 GiB.
    pub max_file_bytes: u64,
    /// Size of the sandbox's private `/tmp`, a tmpfs in the host's memory, in bytes. Default
    /// 1 GiB.
    pub max_tmp_bytes: u64,
    /// Most bytes of output the result keeps: half from the start, half from the end. Default
    /// 32 KiB.
    pub output_bytes: usize,
    /// Most bytes of output saved in the full-output file. Default 64 MiB.
    pub full_output_bytes: u64,
    /// Longest timeout a request may ask for. Default 30 minutes.
    pub max_timeout: Duration,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            max_processes: 256,
            max_memory_bytes: 4 << 30,
            max_total_memory_bytes: 4 << 30,
            max_cpu_percent: 200,
            max_file_bytes: 1 << 30,
            max_tmp_bytes: 1 << 30,
            output_bytes: 32 * 1024,
            full_output_bytes: 64 << 20,
            max_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// One property a sandbox may or may not enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// The command sees only the agent's files and read-only system directories.
    Filesystem,
    /// No network unless the request asks for the host's.
    Network,
    /// A clean environment: none of the caller's variables.
    Environment,
    /// The timeout kills every process the command started.
    Timeout,
    /// At most `max_processes` processes.
    Processes,
    /// At most `max_memory_bytes` of address space per process.
    Memory,
    /// At most `max_total_memory_bytes` of memory for all the command's processes together.
    TotalMemory,
    /// At most `max_cpu_percent` of one core.
    Cpu,
    /// No file larger than `max_file_bytes`.
    FileSize,
    /// The private `/tmp` (in memory) holds at most `max_tmp_bytes`.
    Tmp,
    /// Output capped in the result, the whole of it saved as a file.
    Output,
    /// System calls that reach past the isolation (io_uring, ptrace, keyrings, namespaces, mounts,
    /// sockets other than Unix ones without network, …) fail.
    Syscalls,
}

impl LimitKind {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Filesystem => "filesystem",
            Self::Network => "network",
            Self::Environment => "environment",
            Self::Timeout => "timeout",
            Self::Processes => "processes",
            Self::Memory => "memory",
            Self::TotalMemory => "total_memory",
            Self::Cpu => "cpu",
            Self::FileSize => "file_size",
            Self::Tmp => "tmp",
            Self::Output => "output",
            Self::Syscalls => "syscalls",
        }
    }
}

/// Whether one limit holds on this host, and by what mechanism.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LimitStatus {
    /// Which limit.
    pub kind: LimitKind,
    /// True when it is enforced.
    pub enforced: bool,
    /// How it is enforced, or why it is not.
    pub detail: String,
}

/// What a sandbox enforces on this host, probed when it was built.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SandboxReport {
    /// The sandbox's name.
    pub sandbox: String,
    /// Every limit, enforced or not.
    pub limits: Vec<LimitStatus>,
}

impl SandboxReport {
    /// The status of `kind`, if the report lists it.
    pub fn status(&self, kind: LimitKind) -> Option<&LimitStatus> {
        self.limits.iter().find(|l| l.kind == kind)
    }

    /// True when `kind` is listed as enforced.
    pub fn enforces(&self, kind: LimitKind) -> bool {
        self.status(kind).is_some_and(|l| l.enforced)
    }
}

/// One line per limit: `  processes    enforced  RLIMIT_NPROC 256 …`.
impl fmt::Display for SandboxReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "sandbox: {}", self.sandbox)?;
        for l in &self.limits {
            let state = if l.enforced { "enforced" } else { "NOT enforced" };
            writeln!(f, "  {:<12} {:<13} {}", l.kind.as_str(), state, l.detail)?;
        }
        Ok(())
    }
}
