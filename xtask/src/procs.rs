//! Spawning, probing and stopping emulator processes by pid (Linux: uses /proc).

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// How a spawned emulator relates to the terminal that started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    /// Own process group: survives the xtask process and a later Ctrl-C in the
    /// same terminal (`cargo xtask emulators start`).
    Detached,
    /// Same process group as xtask: a Ctrl-C during `cargo xtask test` reaches
    /// the emulators too, so an interrupted run leaves nothing behind.
    Attached,
}

/// Starts `cmd` with stdin closed and stdout+stderr appended to `log`.
pub fn spawn(mut cmd: Command, log: &Path, attach: Attach) -> Result<Child> {
    let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    if attach == Attach::Detached {
        cmd.process_group(0);
    }
    cmd.spawn()
        .with_context(|| format!("spawning {:?}", cmd.get_program()))
}

/// True while `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Format: `pid (comm) S ...`; comm may contain spaces and parentheses.
    match stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
    {
        Some(state) => state != "Z" && state != "X",
        None => false,
    }
}

/// The process's command line with NULs turned into spaces.
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        String::from_utf8_lossy(&raw)
            .trim_end_matches('\0')
            .replace('\0', " "),
    )
}

/// True if `pid` is alive and its command line contains `marker`: guards
/// against killing an unrelated process that inherited a recycled pid.
pub fn is_ours(pid: u32, marker: &str) -> bool {
    is_alive(pid) && cmdline(pid).is_some_and(|c| c.contains(marker))
}

fn signal(pid: u32, sig: &str) {
    // The shell builtin `kill` is always there (procps may not be) and std has
    // no safe way to send SIGTERM to an arbitrary pid.
    let _ = Command::new("sh")
        .args(["-c", "kill -s \"$0\" \"$1\" 2>/dev/null", sig, &pid.to_string()])
        .stdin(Stdio::null())
        .status();
}

/// SIGTERM, wait up to `grace`, then SIGKILL. Returns true once the pid is gone.
pub fn terminate(pid: u32, grace: Duration) -> bool {
    signal(pid, "TERM");
    if wait_gone(pid, grace) {
        return true;
    }
    signal(pid, "KILL");
    wait_gone(pid, Duration::from_secs(3))
}

fn wait_gone(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if !is_alive(pid) {
            return true;
        }
        sleep(Duration::from_millis(50));
    }
    !is_alive(pid)
}

pub fn write_pid(path: &Path, pid: u32) -> Result<()> {
    fs::write(path, format!("{pid}\n")).with_context(|| format!("writing {}", path.display()))
}

pub fn read_pid(path: &Path) -> Option<u32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The last `lines` lines of a (log) file, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    const MAX_BYTES: u64 = 64 * 1024;
    let Ok(mut file) = File::open(path) else {
        return format!("({} does not exist)", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(MAX_BYTES)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    if all.is_empty() {
        return format!("({} is empty)", path.display());
    }
    all[start..].join("\n")
}

/// Prints the tail of `log` to stderr under a header.
pub fn print_tail(what: &str, log: &Path) {
    eprintln!("---- last lines of {what} log ({}) ----", log.display());
    eprintln!("{}", tail(log, 40));
    eprintln!("---- end of {what} log ----");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_has_a_cmdline() {
        let me = std::process::id();
        assert!(is_alive(me));
        assert!(cmdline(me).is_some_and(|c| !c.is_empty()));
        assert!(!is_alive(u32::MAX));
    }

    #[test]
    fn tail_keeps_last_lines() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("xtask-tail-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let file = dir.join("log");
        fs::write(&file, "a\nb\nc\nd\n")?;
        assert_eq!(tail(&file, 2), "c\nd");
        fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
