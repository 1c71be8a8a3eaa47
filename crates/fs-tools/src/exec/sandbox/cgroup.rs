//! One control group per command: the bound on all of a command's processes together.
//!
//! Resource limits (`prlimit`) bind one process at a time (`RLIMIT_AS`) or one user across the
//! host (`RLIMIT_NPROC`): forty processes of 4 GiB each, or pages written into the in-memory
//! `/tmp`, escape them. A control group counts the command's processes together: `memory.max`
//! (pages, page cache and tmpfs pages they fill), `pids.max` (processes and threads) and
//! `cpu.max`. After the command, whatever is left in the group is killed and the group removed.
//!
//! [`Cgroups::probe`] looks for a place to make groups, in this order:
//! 1. a directory the operator gives ([`BubblewrapConfig::cgroup_parent`](super::BubblewrapConfig)),
//!    which must be a cgroup v2 directory whose `cgroup.subtree_control` enables `memory` and
//!    `pids` (a `Delegate=yes` systemd unit's subgroup, a container's cgroup namespace root);
//! 2. this process's own cgroup v2 group, when its `cgroup.subtree_control` already enables them
//!    (the root of a container's cgroup namespace);
//! 3. this process's cgroup v1 `memory` and `pids` (and `cpu`, when mounted) groups, when this
//!    process may make groups there (root on a v1 or hybrid host).
//!
//! Elsewhere — an unprivileged user on a host that delegates nothing — there is no group, and the
//! sandbox's report says so: [`LimitKind::TotalMemory`](trellis_backend::sandbox::LimitKind) and
//! `Cpu` are not enforced and processes fall back to `RLIMIT_NPROC`.
//!
//! Groups are named `trellis-<pid>-<random>`. When Trellis is killed (kill -9) while a command
//! runs, bwrap's `--die-with-parent` ends the command and its group is left empty; the next
//! probe in this parent removes empty groups whose Trellis process is gone (`/proc/<pid>` missing).
//!
//! No crate: managing a group is `mkdir`, writing four files and `rmdir`; `cgroups-rs` would add
//! a dozen crates for that.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use trellis_backend::sandbox::SandboxLimits;

/// The CPU period `cpu.max` and `cpu.cfs_period_us` are given in, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// Where command groups are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cgroups {
    /// cgroup v2: one directory holds every controller.
    V2 {
        parent: PathBuf,
        /// `cpu` is enabled for children too.
        cpu: bool,
    },
    /// cgroup v1: one directory per controller.
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: Option<PathBuf>,
    },
}

/// A mount of the cgroup file system, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CgroupMount {
    /// The group the mount shows at its mount point (`/` unless a container mounted a subtree).
    root: String,
    mount_point: PathBuf,
    /// `None` for cgroup2; the v1 controllers otherwise.
    controllers: Option<Vec<String>>,
}

impl Cgroups {
    /// Find where this process may make command groups; `Err` says why there is nowhere.
    pub(crate) fn probe(configured: Option<&Path>) -> Result<Self, String> {
        let found = match configured {
            Some(dir) => {
                let found = v2_at(dir)?;
                make_and_remove_probe(&found)?;
                return Ok(found);
            }
            None => {
                let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
                    .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
                let own = std::fs::read_to_string("/proc/self/cgroup")
                    .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
                find(&parse_mounts(&mountinfo), &own)?
            }
        };
        make_and_remove_probe(&found)?;
        found.remove_stale();
        Ok(found)
    }

    /// What the report says: the version and where.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::V2 { parent, .. } => format!("cgroup v2 under {}", parent.display()),
            Self::V1 { memory, .. } => format!("cgroup v1 under {}", memory.display()),
        }
    }

    /// True when `cpu.max` (or `cpu.cfs_quota_us`) can be set.
    pub(crate) fn limits_cpu(&self) -> bool {
        match self {
            Self::V2 { cpu, .. } => *cpu,
            Self::V1 { cpu, .. } => cpu.is_some(),
        }
    }

    fn parents(&self) -> Vec<&Path> {
        match self {
            Self::V2 { parent, .. } => vec![parent],
            Self::V1 { memory, pids, cpu } => {
                let mut p = vec![memory.as_path(), pids.as_path()];
                p.extend(cpu.as_deref());
                p
            }
        }
    }

    /// Make a group for one command, with `limits` written into it.
    pub(crate) fn create(&self, limits: &SandboxLimits) -> io::Result<CommandGroup> {
        let name = format!("trellis-{}-{}", std::process::id(), super::runner::tag());
        let mut group = CommandGroup {
            dirs: Vec::new(),
            v2: matches!(self, Self::V2 { .. }),
        };
        for parent in self.parents() {
            let dir = parent.join(&name);
            std::fs::create_dir(&dir)?;
            group.dirs.push(dir);
        }
        let quota = u64::from(limits.max_cpu_percent.max(1)) * CPU_PERIOD_US / 100;
        let memory = limits.max_total_memory_bytes.max(1 << 20).to_string();
        let pids = limits.max_processes.max(1).to_string();
        match self {
            Self::V2 { cpu, .. } => {
                let dir = &group.dirs[0];
                write(dir, "memory.max", &memory)?;
                // Swap would let the command hold more than memory.max; not every kernel has it.
                let _ = write(dir, "memory.swap.max", "0");
                write(dir, "pids.max", &pids)?;
                if *cpu {
                    write(dir, "cpu.max", &format!("{quota} {CPU_PERIOD_US}"))?;
                }
            }
            Self::V1 { cpu, .. } => {
                write(&group.dirs[0], "memory.limit_in_bytes", &memory)?;
                // memory + swap, where swap accounting is on: the same bound.
                let _ = write(&group.dirs[0], "memory.memsw.limit_in_bytes", &memory);
                write(&group.dirs[1], "pids.max", &pids)?;
                if cpu.is_some() {
                    write(&group.dirs[2], "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                    write(&group.dirs[2], "cpu.cfs_quota_us", &quota.to_string())?;
                }
            }
        }
        Ok(group)
    }

    /// Remove the empty groups of Trellis processes that are gone (killed while a command ran).
    fn remove_stale(&self) {
        for parent in self.parents() {
            let Ok(entries) = std::fs::read_dir(parent) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(pid) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("trellis-"))
                    .and_then(|rest| rest.split('-').next())
                    .and_then(|pid| pid.parse::<u32>().ok())
                else {
                    continue;
                };
                if !Path::new("/proc").join(pid.to_string()).exists() {
                    // Fails (busy) when processes are still in it; those are left alone.
                    let _ = std::fs::remove_dir(entry.path());
                }
            }
        }
    }
}

/// One command's group; [`CommandGroup::finish`] kills what is left in it and removes it.
#[derive(Debug)]
pub(crate) struct CommandGroup {
    /// One directory (v2), or memory, pids and maybe cpu (v1).
    dirs: Vec<PathBuf>,
    v2: bool,
}

impl CommandGroup {
    /// Move process `pid` (not yet running the command) into the group.
    pub(crate) fn add(&self, pid: u32) -> io::Result<()> {
        for dir in &self.dirs {
            write(dir, "cgroup.procs", &pid.to_string())?;
        }
        Ok(())
    }

    /// True when the kernel killed a process of the group for going over `memory.max`.
    pub(crate) fn out_of_memory(&self) -> bool {
        let (file, key) = if self.v2 {
            ("memory.events", "oom_kill")
        } else {
            ("memory.oom_control", "oom_kill")
        };
        std::fs::read_to_string(self.dirs[0].join(file))
            .ok()
            .and_then(|text| counter(&text, key))
            .is_some_and(|n| n > 0)
    }

    /// Kill every process still in the group, then remove it; gives up after about five seconds
    /// on a group that will not empty (it is then left for [`Cgroups::probe`] to remove later).
    pub(crate) async fn finish(self) {
        for _ in 0..500 {
            if self.kill_all() == 0 && self.remove() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tracing::warn!(group = %self.dirs[0].display(), "a command's control group did not empty");
    }

    /// Send SIGKILL to every process in the group; how many there were.
    fn kill_all(&self) -> usize {
        if self.v2 && write(&self.dirs[0], "cgroup.kill", "1").is_ok() {
            return self.members().len();
        }
        let members = self.members();
        for pid in &members {
            if let Some(pid) = i32::try_from(*pid).ok().and_then(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        members.len()
    }

    fn members(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dirs[0].join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Remove every directory; true when none is left.
    fn remove(&self) -> bool {
        self.dirs
            .iter()
            .all(|d| std::fs::remove_dir(d).is_ok() || !d.exists())
    }
}

impl Drop for CommandGroup {
    /// A group whose [`CommandGroup::finish`] never ran (a cancelled command): one attempt.
    fn drop(&mut self) {
        if self.dirs.iter().any(|d| d.exists()) {
            self.kill_all();
            self.remove();
        }
    }
}

/// The cgroup v2 directory `dir`, if its children can have memory and pids limits.
fn v2_at(dir: &Path) -> Result<Cgroups, String> {
    let control = std::fs::read_to_string(dir.join("cgroup.subtree_control")).map_err(|e| {
        format!(
            "{} is not a cgroup v2 directory (no cgroup.subtree_control: {e})",
            dir.display()
        )
    })?;
    let enabled: Vec<&str> = control.split_whitespace().collect();
    let missing: Vec<&str> = ["memory", "pids"]
        .into_iter()
        .filter(|c| !enabled.contains(c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{}'s cgroup.subtree_control does not enable {}",
            dir.display(),
            missing.join(" and ")
        ));
    }
    Ok(Cgroups::V2 {
        parent: dir.to_path_buf(),
        cpu: enabled.contains(&"cpu"),
    })
}

/// Where to make groups, from the mounts and `/proc/self/cgroup`.
fn find(mounts: &[CgroupMount], own: &str) -> Result<Cgroups, String> {
    let mut why = Vec::new();
    // cgroup v2: the line `0::/path`.
    if let Some(mount) = mounts.iter().find(|m| m.controllers.is_none())
        && let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::"))
    {
        match under(mount, path) {
            Some(dir) => match v2_at(&dir) {
                Ok(found) => return Ok(found),
                Err(e) => why.push(e),
            },
            None => why.push(format!(
                "this process's cgroup {path} is not under {}",
                mount.mount_point.display()
            )),
        }
    }
    // cgroup v1: `N:memory:/path`, `N:pids:/path`, `N:cpu,cpuacct:/path`.
    let v1 = |controller: &str| -> Option<PathBuf> {
        let mount = mounts.iter().find(|m| {
            m.controllers
                .as_ref()
                .is_some_and(|c| c.iter().any(|c| c == controller))
        })?;
        let path = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            names.split(',').any(|n| n == controller).then_some(path)
        })?;
        under(mount, path)
    };
    match (v1("memory"), v1("pids")) {
        (Some(memory), Some(pids)) => Ok(Cgroups::V1 {
            memory,
            pids,
            cpu: v1("cpu"),
        }),
        _ => {
            why.push("no cgroup v1 memory and pids hierarchies are mounted".into());
            Err(why.join("; "))
        }
    }
}

/// The directory of group `path` under `mount`, when the mount shows it.
fn under(mount: &CgroupMount, path: &str) -> Option<PathBuf> {
    let root = mount.root.trim_end_matches('/');
    let rest = path.strip_prefix(root)?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return None;
    }
    let rest = rest.trim_start_matches('/');
    if rest.split('/').any(|seg| seg == "..") {
        return None;
    }
    Some(if rest.is_empty() {
        mount.mount_point.clone()
    } else {
        mount.mount_point.join(rest)
    })
}

/// The cgroup mounts of a `/proc/self/mountinfo` text.
fn parse_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let mut after = after.split(' ');
            let fstype = after.next()?;
            let _source = after.next()?;
            let options = after.next().unwrap_or("");
            let root = unescape(fields.get(3)?);
            let mount_point = PathBuf::from(unescape(fields.get(4)?));
            let controllers = match fstype {
                "cgroup2" => None,
                "cgroup" => Some(
                    options
                        .split(',')
                        .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains('='))
                        .map(str::to_owned)
                        .collect(),
                ),
                _ => return None,
            };
            Some(CgroupMount {
                root,
                mount_point,
                controllers,
            })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\\ooo` (three octal digits).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                out.push(
                    d.iter()
                        .fold(0u8, |n, b| n.wrapping_mul(8).wrapping_add(b - b'0')),
                );
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Make and remove a group, to learn that this process may.
fn make_and_remove_probe(found: &Cgroups) -> Result<(), String> {
    let group = found
        .create(&SandboxLimits::default())
        .map_err(|e| format!("cannot make a control group ({}): {e}", found.describe()))?;
    if !group.remove() {
        return Err(format!("cannot remove a control group ({})", found.describe()));
    }
    Ok(())
}

fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    std::fs::write(dir.join(file), value)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.join(file).display())))
}

/// The value of `key` in a `key value` per line file.
fn counter(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn a_hybrid_host_uses_its_v1_controllers_at_this_process_s_groups() {
        let own = "9:name=systemd:/\n8:pids:/\n4:memory:/api/abc\n1:cpu:/\n0::/\n";
        // The v2 root here enables nothing (no such file on this test's fake path), so v1 wins.
        let found = find(&parse_mounts(HYBRID), own).unwrap();
        assert_eq!(
            found,
            Cgroups::V1 {
                memory: "/sys/fs/cgroup/memory/api/abc".into(),
                pids: "/sys/fs/cgroup/pids".into(),
                cpu: Some("/sys/fs/cgroup/cpu".into()),
            }
        );
    }

    #[test]
    fn a_mount_of_a_subtree_maps_paths_below_it_and_refuses_others() {
        let m = CgroupMount {
            root: "/kube/pod1".into(),
            mount_point: "/sys/fs/cgroup".into(),
            controllers: None,
        };
        assert_eq!(under(&m, "/kube/pod1/app"), Some("/sys/fs/cgroup/app".into()));
        assert_eq!(under(&m, "/kube/pod1"), Some("/sys/fs/cgroup".into()));
        assert_eq!(under(&m, "/kube/pod10"), None);
        assert_eq!(under(&m, "/other"), None);
        assert_eq!(under(&m, "/kube/pod1/../x"), None);
    }

    #[test]
    fn no_cgroup_mounts_is_an_error_that_says_so() {
        let err = find(&[], "0::/\n").unwrap_err();
        assert!(err.contains("no cgroup v1 memory and pids"), "{err}");
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/end\04"), r"/end\04");
    }

    #[test]
    fn counters_are_read_by_key() {
        let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(counter(text, "oom_kill"), Some(3));
        assert_eq!(counter(text, "missing"), None);
    }
}
