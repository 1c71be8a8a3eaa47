//! Waiting for a sandbox's PID namespace to be empty before the write-back (review F5).
//!
//! `bwrap` (with `--unshare-pid`) forks one child, the namespace's init, which forks the command
//! and then reaps whatever the command leaves behind. The outer `bwrap` exits as soon as the command
//! itself does; init dies a moment later (`--die-with-parent` sends it `SIGKILL`), and only when
//! init has exited has the kernel killed every other process of the namespace and waited for them
//! (`zap_pid_ns_processes`, before init's exit is reported). So `bwrap` returning does not prove a
//! background job of the command is gone; init's exit does.
//!
//! [`find`] learns init's pid from the kernel's list of the outer `bwrap`'s children
//! (`/proc/<pid>/task/<pid>/children`), opens init's `/proc/<pid>` directory and checks through it
//! that the process is still `bwrap`'s child, with `bwrap`'s own name (its program's file name, as
//! the kernel keeps it): the spawned process may still be a wrapper that has not yet become
//! `bwrap` (the overlay mounts run `mount` as children of a shell first), and a child of such a
//! wrapper — even one just forked, still named like the shell — is not init. A descriptor of a `/proc/<pid>` directory stays
//! bound to that one process: once it is reaped, reads through it fail, even if the pid is reused.
//! [`Init::exited`] then reads its `stat` through that descriptor until the process is a zombie
//! (`Z`/`X`) or gone, which it becomes only after the kernel emptied the namespace. No `unsafe`
//! and no signal: `--die-with-parent` already kills init when `bwrap` exits.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};

/// How often [`find`] looks for init while `bwrap` sets up.
const POLL: Duration = Duration::from_micros(200);

/// How often [`Init::exited`] looks at init once `bwrap` is gone.
const EXIT_POLL: Duration = Duration::from_millis(1);

/// The init of a sandbox's PID namespace, by its `/proc/<pid>` directory.
#[derive(Debug)]
pub(crate) struct Init {
    proc_dir: OwnedFd,
}

/// Look for the one child of `bwrap` (the process with pid `bwrap`, spawned by us and not yet
/// reaped) and hold its `/proc` directory. Blocking: it polls until the child appears, `done` is
/// set (the caller reaped `bwrap`, so its pid may be reused), or `within` passes. `None` when it
/// could not be found (`bwrap` failed before forking, or this kernel has no children list).
pub(crate) fn find(bwrap: u32, name: &str, done: &AtomicBool, within: Duration) -> Option<Init> {
    let started = Instant::now();
    let children = format!("/proc/{bwrap}/task/{bwrap}/children");
    while !done.load(Ordering::Acquire) && started.elapsed() < within {
        // Gone, or no children list on this kernel: not found.
        let listed = std::fs::read_to_string(&children).ok()?;
        let Some(child) = listed.split_whitespace().next() else {
            std::thread::sleep(POLL);
            continue;
        };
        let dir = format!("/proc/{child}");
        let proc_dir = rustix::fs::open(
            dir.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        // Through the descriptor: still bwrap's child, so the descriptor is that child's and not
        // a process that took a recycled pid.
        let (_, parent, found) = status(&proc_dir)?;
        // A wrapper's child (`mount`, or a fork of the shell about to become it): look again once
        // it is gone and the wrapper has become `bwrap`.
        if found != name {
            std::thread::sleep(POLL);
            continue;
        }
        return (parent == bwrap && !done.load(Ordering::Acquire)).then_some(Init { proc_dir });
    }
    None
}

/// The state letter, the parent pid and the name (`comm`) of the process whose `/proc` directory
/// `dir` is; `None` once it has been reaped.
fn status(dir: &OwnedFd) -> Option<(char, u32, String)> {
    let fd = rustix::fs::openat(dir, "stat", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut stat = String::new();
    std::fs::File::from(fd)
        .take(4096)
        .read_to_string(&mut stat)
        .ok()?;
    // `pid (comm) state ppid …`, where comm may hold spaces and parentheses.
    let close = stat.rfind(')')?;
    let name = stat.get(stat.find('(')? + 1..close)?.to_owned();
    let mut fields = stat.get(close + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent, name))
}

impl Init {
    /// Wait until init has exited (and so every process of its namespace is gone), at most
    /// `grace`. Blocking. False when it had not by then.
    pub(crate) fn exited(&self, grace: Duration) -> bool {
        let started = Instant::now();
        loop {
            match status(&self.proc_dir) {
                None | Some(('Z' | 'X', _, _)) => return true,
                Some(_) if started.elapsed() >= grace => return false,
                Some(_) => std::thread::sleep(EXIT_POLL),
            }
        }
    }
}

/// A [`find`] running beside the command: started right after `bwrap` is spawned, asked for its
/// answer once `bwrap` has been reaped.
#[derive(Debug)]
pub(crate) struct Finder {
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Option<Init>>,
}

impl Finder {
    /// Start looking for the init of `bwrap` (the pid of the spawned process, which becomes the
    /// program `program`).
    pub(crate) fn start(bwrap: u32, program: &std::path::Path) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let name = comm(program);
        let task = tokio::task::spawn_blocking(move || find(bwrap, &name, &flag, Duration::from_secs(30)));
        Self { done, task }
    }

    /// Stop looking (call once `bwrap` was reaped) and wait, at most `grace`, for the init found
    /// to exit. True when it was found and exited; false when it was not found or did not exit
    /// in time.
    pub(crate) async fn wait(self, grace: Duration) -> bool {
        self.done.store(true, Ordering::Release);
        match self.task.await {
            Ok(Some(init)) => tokio::task::spawn_blocking(move || init.exited(grace))
                .await
                .unwrap_or(false),
            _ => false,
        }
    }
}

/// The name the kernel gives a process running `program`: its file name, cut to 15 bytes.
pub(crate) fn comm(program: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let name = program.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    String::from_utf8_lossy(&name[..name.len().min(15)]).into_owned()
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    /// `bwrap`, or `None` where it is missing (a failure under `TRELLIS_SANDBOX=required`).
    fn bwrap() -> Option<std::path::PathBuf> {
        let found = super::super::process::find_program("bwrap");
        assert!(
            found.is_some() || std::env::var("TRELLIS_SANDBOX").as_deref() != Ok("required"),
            "bwrap is missing"
        );
        found
    }

    /// `bwrap` started behind a wrapper that runs a child of its own first (as the overlay
    /// wrapper runs `mount`), then `exec`s `bwrap`: the process found is `bwrap`'s init, not the
    /// wrapper's child. The child here is a subshell, named like the wrapper for all of its 0.3 s
    /// (a fork about to `exec` `mount` is, briefly): taking the first child listed, or one named
    /// like its parent, found it.
    #[tokio::test]
    async fn a_wrappers_child_is_not_taken_for_init() {
        let Some(bwrap) = bwrap() else {
            return;
        };
        let mut child = tokio::process::Command::new("/bin/sh")
            .args(["-c", "(sleep 0.3; true); exec \"$@\"", "sh"])
            .arg(bwrap)
            .args(["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/"])
            .args(["--dev", "/dev", "--proc", "/proc", "--"])
            .args(["/bin/sh", "-c", "sleep 1"])
            .kill_on_drop(true)
            .spawn()
            .expect("sh");
        let pid = child.id().expect("pid");
        let done = AtomicBool::new(false);
        let found = tokio::task::spawn_blocking(move || {
            find(pid, "bwrap", &done, Duration::from_secs(10)).and_then(|init| status(&init.proc_dir))
        })
        .await
        .expect("find");
        let status = child.wait().await.expect("wait");
        if !status.success() {
            // No user namespaces here: nothing to find.
            assert_ne!(std::env::var("TRELLIS_SANDBOX").as_deref(), Ok("required"));
            return;
        }
        let (_, parent, name) = found.expect("init not found");
        assert_eq!((parent, name.as_str()), (pid, "bwrap"));
    }

    /// Against a real `bwrap`: init is found while the command runs, and once `bwrap` is reaped
    /// the wait sees init exit (and with it the background job the command left).
    #[tokio::test]
    async fn init_is_found_and_seen_to_exit() {
        let Some(bwrap) = bwrap() else {
            return;
        };
        let mut child = tokio::process::Command::new(&bwrap)
            .args(["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/"])
            .args(["--dev", "/dev", "--proc", "/proc", "--"])
            .args(["/bin/sh", "-c", "sleep 31.4159 & sleep 0.2"])
            .kill_on_drop(true)
            .spawn()
            .expect("bwrap");
        let finder = Finder::start(child.id().expect("pid"), &bwrap);
        let started = Instant::now();
        let status = child.wait().await.expect("wait");
        if !status.success() {
            // No user namespaces here (a container without them): nothing to find.
            assert_ne!(std::env::var("TRELLIS_SANDBOX").as_deref(), Ok("required"));
            return;
        }
        assert!(
            finder.wait(Duration::from_secs(5)).await,
            "init not found or still alive"
        );
        // The background `sleep` did not keep the namespace alive, and is gone.
        assert!(started.elapsed() < Duration::from_secs(10));
        let alive = std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|cmdline| cmdline.windows(7).any(|w| w == b"31.4159"));
        assert!(!alive, "the background job outlived the wait");
    }
}
