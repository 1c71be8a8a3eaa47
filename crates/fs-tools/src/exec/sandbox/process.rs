//! Running one process under limits: a clean environment, resource limits set by `prlimit(1)`,
//! stdout and stderr through one pipe into a [`Capture`], and a wall-clock timeout that kills the
//! process group.
//!
//! The limits go through the `prlimit` program (util-linux, on every Linux distribution) because
//! the workspace forbids `unsafe` code, and setting limits between `fork` and `exec` needs a
//! `pre_exec` hook, which is unsafe. `prlimit` sets them on itself and `exec`s the command, which
//! costs one extra `exec` (about 1 ms on the development machine, see `cargo xtask bench`).
//!
//! A command with a control group ([`CommandGroup`]) starts behind a gate: `/bin/sh` waits for a
//! line on its stdin ([`GATE`]), Trellis moves it into the group, sends the line, and only then
//! does it `exec` the command, so no process of the command ever runs outside the group. Moving
//! the process from inside (a shell writing its own pid into `cgroup.procs`) would need the
//! sandbox user to write the parent's `cgroup.procs` too under cgroup v2; from outside it needs
//! nothing beyond what made the group. If Trellis dies first, the shell reads end of file and
//! exits without running anything.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use trellis_backend::sandbox::SandboxError;

use super::capture::{Capture, Captured};
use super::cgroup::CommandGroup;
use super::namespace_init::Finder;
use super::workdir::Owner;

/// Resource limits for `prlimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rlimits {
    /// `RLIMIT_NPROC`, already adjusted for the processes the user runs elsewhere.
    pub processes: Option<u64>,
    /// `RLIMIT_AS`.
    pub address_space: u64,
    /// `RLIMIT_FSIZE`.
    pub file_size: u64,
}

/// One process to run.
#[derive(Debug)]
pub(crate) struct Spawn<'a> {
    pub program: &'a Path,
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
    pub cwd: &'a Path,
    /// Limits, applied by the `prlimit` program at this path.
    pub limits: Option<(&'a Path, Rlimits)>,
    pub run_as: Option<Owner>,
    pub timeout: Duration,
    /// The control group the command runs in, joined before it starts.
    pub group: Option<&'a CommandGroup>,
    /// The process's standard input; `None`: `/dev/null`. With a `group`, its bytes follow the
    /// gate's line on the gate's pipe (so it must be small: a seccomp program).
    pub stdin: Option<std::fs::File>,
    /// The spawned process becomes `bwrap` (at this path) with a PID namespace: after it exits,
    /// wait for the namespace's init to exit too (see `namespace_init.rs`), so nothing of the
    /// command runs on.
    pub pid_namespace: Option<&'a Path>,
}

/// The `sh -c` script of a gated start: wait for one line, then become the command (`"$@"`) with
/// stdin from `/dev/null`. Exits 125 without running it when the line never comes.
const GATE: &str = "read -r go || exit 125; exec \"$@\" </dev/null";

/// [`GATE`] for a command that has a standard input of its own: it gets the rest of the gate's
/// pipe (`read` takes no byte past the line's end from a pipe), which Trellis fills with the
/// [`Spawn::stdin`] bytes and closes.
const GATE_THEN_STDIN: &str = "read -r go || exit 125; exec \"$@\"";

/// How it ended.
#[derive(Debug)]
pub(crate) struct Finished {
    pub captured: Captured,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub duration: Duration,
}

/// How long to wait for the output pipe to close once the process is gone (a process that
/// escaped the group may hold it; its output after that is not captured).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How long to wait for a sandbox's PID namespace to empty once `bwrap` is gone.
const INIT_GRACE: Duration = Duration::from_secs(5);

/// Run `spawn`, capturing its output into `capture`.
pub(crate) async fn run(spawn: Spawn<'_>, capture: Capture) -> Result<Finished, SandboxError> {
    let (mut reader, writer) = std::io::pipe().map_err(SandboxError::io("creating the output pipe"))?;
    let writer_too = writer
        .try_clone()
        .map_err(SandboxError::io("creating the output pipe"))?;
    let mut cmd = if spawn.group.is_some() {
        let mut cmd = tokio::process::Command::new("/bin/sh");
        let gate = if spawn.stdin.is_some() {
            GATE_THEN_STDIN
        } else {
            GATE
        };
        cmd.args(["-c", gate, "sh"]);
        cmd
    } else {
        tokio::process::Command::new(match spawn.limits {
            Some((prlimit, _)) => prlimit,
            None => spawn.program,
        })
    };
    match spawn.limits {
        Some((prlimit, limits)) => {
            if spawn.group.is_some() {
                cmd.arg(prlimit);
            }
            if let Some(n) = limits.processes {
                cmd.arg(format!("--nproc={n}"));
            }
            cmd.arg(format!("--as={}", limits.address_space))
                .arg(format!("--fsize={}", limits.file_size))
                .arg("--core=0")
                .arg("--")
                .arg(spawn.program);
        }
        None if spawn.group.is_some() => {
            cmd.arg(spawn.program);
        }
        None => {}
    }
    cmd.args(&spawn.args)
        .env_clear()
        .envs(spawn.env.iter().map(|(k, v)| (k, v)))
        .current_dir(spawn.cwd)
        .stdin(match (spawn.group, &spawn.stdin) {
            (Some(_), _) => Stdio::piped(),
            (None, Some(file)) => match file.try_clone() {
                Ok(file) => Stdio::from(file),
                Err(e) => return Err(SandboxError::io("passing the standard input")(e)),
            },
            (None, None) => Stdio::null(),
        })
        .stdout(writer_too)
        .stderr(writer)
        .process_group(0)
        .kill_on_drop(true);
    if let Some(owner) = spawn.run_as {
        cmd.uid(owner.uid).gid(owner.gid);
    }
    let started = Instant::now();
    let spawned = cmd.spawn();
    // The parent's copies of the pipe's write end must close, or the reader never sees EOF.
    drop(cmd);
    let mut child = spawned.map_err(SandboxError::io(format!("starting {}", spawn.program.display())))?;
    let pgid = child.id();
    if let Some(group) = spawn.group {
        let joined = match pgid {
            Some(pid) => group.add(pid),
            None => Err(std::io::Error::other("the process exited before it started")),
        };
        let opened = match (joined, child.stdin.take()) {
            (Ok(()), Some(mut gate)) => {
                use tokio::io::AsyncWriteExt;
                let mut bytes = b"\n".to_vec();
                if let Some(mut file) = spawn.stdin {
                    use std::io::Seek;
                    let read = file
                        .seek(std::io::SeekFrom::Start(0))
                        .and_then(|_| file.read_to_end(&mut bytes));
                    if let Err(e) = read {
                        let _ = child.kill().await;
                        return Err(SandboxError::io("reading the standard input")(e));
                    }
                }
                // Dropping `gate` afterwards closes the pipe: end of file for the reader.
                gate.write_all(&bytes).await
            }
            (Ok(()), None) => Err(std::io::Error::other("no pipe to the gate")),
            (Err(e), _) => Err(e),
        };
        if let Err(e) = opened {
            let _ = child.kill().await;
            return Err(SandboxError::Io {
                context: "moving the command into its control group".into(),
                source: e,
            });
        }
    }
    let init = match (spawn.pid_namespace, pgid) {
        (Some(bwrap), Some(pid)) => Some(Finder::start(pid, bwrap)),
        _ => None,
    };

    let capture = Arc::new(Mutex::new(capture));
    let sink = Arc::clone(&capture);
    let drained = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut c) = sink.lock() {
                        c.push(&buf[..n]);
                    }
                }
            }
        }
    });

    let leader = pgid.and_then(Leader::watch);
    let (status, timed_out) = match tokio::time::timeout(
        spawn.timeout,
        exit_and_kill_group(&mut child, leader.as_ref(), pgid),
    )
    .await
    {
        Ok(status) => (status, false),
        Err(_) => {
            kill_group(pgid);
            let _ = child.kill().await;
            (child.wait().await.ok(), true)
        }
    };
    let duration = started.elapsed();
    if let Some(init) = init
        && !init.wait(INIT_GRACE).await
    {
        tracing::warn!("the sandbox's PID namespace was not seen to end; writing back anyway");
    }
    let _ = tokio::time::timeout(DRAIN_GRACE, drained).await;
    let captured = match Arc::try_unwrap(capture) {
        Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()).finish(),
        // The reader is still blocked on an escaped process: take what it has so far.
        Err(shared) => {
            let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut *guard, Capture::new(64, 0)).finish()
        }
    };
    Ok(Finished {
        captured,
        exit_code: if timed_out {
            None
        } else {
            status.and_then(|s| s.code())
        },
        timed_out,
        duration,
    })
}

/// A child process of ours watched through a pidfd: [`Leader::exited`] resolves when it has
/// exited, without reaping it.
struct Leader(Arc<std::os::fd::OwnedFd>);

impl Leader {
    /// `None` where pidfds are unavailable (Linux before 5.3).
    fn watch(pid: u32) -> Option<Self> {
        let pid = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw)?;
        let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()?;
        Some(Self(Arc::new(fd)))
    }

    /// Resolves once the process has exited: `waitid(P_PIDFD, …, WEXITED | WNOWAIT)` on a blocking
    /// thread (tokio's `AsyncFd` needs `unsafe` to register a descriptor). The process stays a
    /// zombie, holding its pid, until it is waited for. If this future is dropped, the thread ends
    /// when the process does (at the timeout, it is killed).
    async fn exited(&self) {
        use std::os::fd::AsFd;
        let fd = Arc::clone(&self.0);
        let _ = tokio::task::spawn_blocking(move || {
            let options = rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT;
            loop {
                match rustix::process::waitid(rustix::process::WaitId::PidFd(fd.as_fd()), options) {
                    Err(rustix::io::Errno::INTR) => continue,
                    _ => return,
                }
            }
        })
        .await;
    }
}

/// Wait for the command's first process (the leader of process group `pgid`) to exit, kill what is
/// left of its group (a background job of the command), and only then reap it.
///
/// Security review F17: killing the group after reaping its leader left a window in which the
/// leader's pid, and so the group id, could be given to an unrelated process that made a group of
/// its own, which the kill would then hit. While the leader is an unreaped zombie its pid cannot be
/// reused. Without a pidfd ([`Leader::watch`] is `None`), the group is killed after the reaping, as
/// before.
async fn exit_and_kill_group(
    child: &mut tokio::process::Child,
    leader: Option<&Leader>,
    pgid: Option<u32>,
) -> Option<std::process::ExitStatus> {
    if let Some(leader) = leader {
        leader.exited().await;
        kill_group(pgid);
        child.wait().await.ok()
    } else {
        let status = child.wait().await.ok();
        kill_group(pgid);
        status
    }
}

fn kill_group(pgid: Option<u32>) {
    let Some(pid) = pgid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
}

/// The first executable called `name` in an absolute directory of `PATH`, else in `/usr/bin` or
/// `/bin` (a relative `PATH` entry would resolve against whatever the working directory is when
/// the program is started).
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// How many tasks (processes and their threads) user `uid` runs now, by the owners of
/// `/proc/<pid>`: what `RLIMIT_NPROC` counts, since Linux counts threads against it too (review
/// F17: counting processes only set the limit too low on a host where the user runs threads).
pub(crate) fn processes_of(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .map(|e| tasks_of(&e.path()))
        .sum()
}

/// The tasks of the process at `/proc/<pid>` (at least 1: a process that exits meanwhile still
/// counted as one).
fn tasks_of(proc_dir: &Path) -> u64 {
    std::fs::read_dir(proc_dir.join("task")).map_or(1, |t| t.count().max(1) as u64)
}

/// The effective user id of this process.
pub(crate) fn current_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The effective group id of this process.
pub(crate) fn current_gid() -> u32 {
    rustix::process::getegid().as_raw()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The state letter of `/proc/<pid>/stat` (`Z` for a zombie), or `None` when the pid is free.
    fn state_of(pid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.chars().next()
    }

    /// Review F17: the group is killed while its leader is still an unreaped zombie (so its pid,
    /// the group's id, cannot have gone to another process), and a job it left behind is gone.
    #[tokio::test]
    async fn the_group_is_killed_while_its_leader_still_holds_its_pid() {
        let mut child = tokio::process::Command::new("/bin/sh")
            .args(["-c", "sleep 30 >/dev/null & echo $! ; exit 3"])
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id().unwrap();
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut child.stdout.take().unwrap(), &mut out)
            .await
            .unwrap_or_default();
        let job: u32 = out.trim().parse().unwrap();
        let leader = Leader::watch(pid).unwrap();
        leader.exited().await;
        assert_eq!(
            state_of(pid),
            Some('Z'),
            "the leader was reaped before the group was killed"
        );
        kill_group(Some(pid));
        let status = exit_and_kill_group(&mut child, Some(&leader), Some(pid))
            .await
            .unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(state_of(pid), None);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while state_of(job).is_some_and(|s| s != 'Z') && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            state_of(job).is_none_or(|s| s == 'Z'),
            "the background job survived"
        );
    }

    #[test]
    fn a_process_counts_as_many_tasks_as_it_has_threads() {
        // A child with 8 threads besides its main one, alive for a few seconds.
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import threading, time\n\
                 for _ in range(8): threading.Thread(target=time.sleep, args=(3,)).start()\n\
                 print('up', flush=True)\ntime.sleep(3)",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "up");
        let tasks = tasks_of(&Path::new("/proc").join(child.id().to_string()));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(tasks, 9);
    }
}
