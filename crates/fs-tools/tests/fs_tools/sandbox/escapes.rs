//! The escape suite: each case tries to get out of bubblewrap, and asserts that the attempt failed
//! and that the host is unchanged.
//!
//! The host side of every case: a state directory on local disk holding two threads' files
//! (`threads/t1/files/…`, `threads/t2/files/…`), a canary file outside it, `/root` and
//! `/etc/shadow`. The command runs over thread `t1`'s space only (a [`ScopedBackend`]), as the
//! agent would. [`Host::unchanged`] compares a fingerprint of all of that (every path and content
//! byte of the state directory except `t1`'s own space, the canary, `/etc/shadow`, `/root`'s
//! names) before and after.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use trellis_backend::sandbox::{ExecFiles, ExecOutput, ExecRequest, NotWrittenReason, Sandbox};
use trellis_backend::{Backend, FilesystemBackend, ScopeId, ScopedBackend};

use super::{bwrap, p, seed};

/// A host with a state directory of two threads, and the view of thread `t1`.
struct Host {
    state: tempfile::TempDir,
    canary: tempfile::NamedTempFile,
    view: Arc<dyn Backend>,
    before: BTreeMap<String, Vec<u8>>,
}

impl Host {
    async fn new() -> Self {
        let state = tempfile::tempdir().unwrap();
        let disk: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(state.path()).unwrap());
        let t1 = thread(&disk, "t1");
        let t2 = thread(&disk, "t2");
        seed(
            t1.as_ref(),
            &[("/uploads/data.csv", "a,b\n1,2\n"), ("/notes.md", "mine")],
        )
        .await;
        seed(
            t2.as_ref(),
            &[("/secret.txt", "T2-SECRET"), ("/uploads/x.csv", "other")],
        )
        .await;
        seed(
            disk.as_ref(),
            &[("/checkpoints/t1.json", "{}"), ("/config/api-key", "sk-HOST-KEY")],
        )
        .await;
        let canary = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(canary.path(), "canary").unwrap();
        let mut host = Self {
            state,
            canary,
            view: t1,
            before: BTreeMap::new(),
        };
        host.before = host.fingerprint();
        host
    }

    fn state_dir(&self) -> &Path {
        self.state.path()
    }

    fn fingerprint(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        let own = self.state.path().join("threads/t1/files");
        let mut stack = vec![self.state.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path == own {
                    continue;
                }
                let meta = std::fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    stack.push(path);
                } else {
                    out.insert(
                        path.display().to_string(),
                        std::fs::read(&path).unwrap_or_default(),
                    );
                }
            }
        }
        out.insert("canary".into(), std::fs::read(self.canary.path()).unwrap());
        out.insert(
            "/etc/shadow".into(),
            std::fs::read("/etc/shadow").unwrap_or_default(),
        );
        let mut root: Vec<String> = std::fs::read_dir("/root")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        root.sort();
        out.insert("/root".into(), root.join("\n").into_bytes());
        out
    }

    fn unchanged(&self) {
        let now = self.fingerprint();
        assert_eq!(
            self.before.keys().collect::<Vec<_>>(),
            now.keys().collect::<Vec<_>>(),
            "host paths changed"
        );
        for (k, v) in &self.before {
            assert!(now.get(k) == Some(v), "host file {k} changed");
        }
    }
}

fn thread(disk: &Arc<dyn Backend>, id: &str) -> Arc<dyn Backend> {
    let scope = ScopeId::thread(id).unwrap();
    Arc::new(ScopedBackend::new(
        disk.clone(),
        p(&format!("/threads/{}/files", scope.as_str())),
    ))
}

/// Run `command` in thread t1's space (working directory `/uploads`).
async fn attempt(sandbox: &dyn Sandbox, host: &Host, command: &str) -> ExecOutput {
    let request = ExecRequest::new(command)
        .cwd(p("/uploads"))
        .timeout(Duration::from_secs(20));
    sandbox
        .execute(&ExecFiles::new(host.view.clone()), &request)
        .await
        .unwrap()
}

fn failed(out: &ExecOutput) -> bool {
    out.exit_code != Some(0)
}

/// Declares one escape case: the command, then what proves the attempt failed.
macro_rules! escape {
    ($name:ident, $cmd:expr, |$host:ident, $out:ident| $check:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(sandbox) = bwrap(stringify!($name)) else {
                return;
            };
            let $host = Host::new().await;
            let make: fn(&Host) -> String = $cmd;
            let command = make(&$host);
            let $out = attempt(sandbox.as_ref(), &$host, &command).await;
            assert!(
                $check,
                "{}: attempt `{command}` was not stopped: {:?}",
                stringify!($name),
                $out
            );
            $host.unchanged();
        }
    };
}

fn sd(host: &Host) -> String {
    host.state_dir().display().to_string()
}

// Reads of what is not the thread's.
escape!(read_etc_shadow, |_: &Host| "cat /etc/shadow".into(), |h, out| {
    failed(&out)
});
escape!(list_root_home, |_: &Host| "ls /root".into(), |h, out| failed(
    &out
));
escape!(
    read_state_dir_checkpoint,
    |h: &Host| format!("cat {}/checkpoints/t1.json", sd(h)),
    |h, out| failed(&out)
);
escape!(
    read_host_api_key,
    |h: &Host| format!("cat {}/config/api-key", sd(h)),
    |h, out| { failed(&out) && !out.output.contains("sk-HOST-KEY") }
);
escape!(
    read_other_thread_by_host_path,
    |h: &Host| format!("cat {}/threads/t2/files/secret.txt", sd(h)),
    |h, out| { !out.output.contains("T2-SECRET") }
);
escape!(
    read_other_thread_by_virtual_path,
    |_: &Host| "cat /secret.txt; ls /".into(),
    |h, out| { !out.output.contains("T2-SECRET") && !out.output.lines().any(|l| l == "secret.txt") }
);
escape!(list_state_dir, |h: &Host| format!("ls {}", sd(h)), |h, out| {
    failed(&out)
});
escape!(
    read_canary_outside,
    |h: &Host| format!("cat {}", h.canary.path().display()),
    |h, out| { !out.output.contains("canary") }
);
escape!(
    python_open_shadow,
    |_: &Host| "python3 -c \"import os; os.open('/etc/shadow', os.O_RDONLY)\"".into(),
    |h, out| { failed(&out) }
);
escape!(
    host_work_tree_invisible,
    |_: &Host| "ls /work /home/* /opt /var 2>&1; true".into(),
    |h, out| { out.output.contains("No such file") && !out.output.contains("main") }
);

// `..` and absolute paths.
escape!(
    dotdot_to_shadow,
    |_: &Host| "cat ../../../../../../etc/shadow".into(),
    |h, out| failed(&out)
);
escape!(
    dotdot_above_root_is_root,
    |_: &Host| "cd /../../.. && pwd && ls".into(),
    |h, out| {
        out.output.starts_with("/\n") && !out.output.contains("root\n") && !out.output.contains("work\n")
    }
);
escape!(
    write_above_root_stays_in_thread,
    |_: &Host| "echo x > /../../../escaped.txt && ls /".into(),
    |h, out| {
        // It landed in the thread's own space, not anywhere on the host.
        out.changes.iter().all(|c| c.path.as_str() == "/escaped.txt") && !Path::new("/escaped.txt").exists()
    }
);

// Writes outside the thread space.
escape!(
    write_etc,
    |_: &Host| "echo x > /etc/evil".into(),
    |h, out| failed(&out)
);
escape!(write_usr, |_: &Host| "echo x > /usr/bin/evil".into(), |h, out| {
    failed(&out)
});
escape!(
    write_state_dir,
    |h: &Host| format!("echo x > {}/checkpoints/t1.json", sd(h)),
    |h, out| failed(&out)
);
escape!(
    write_other_thread,
    |h: &Host| format!("echo x > {}/threads/t2/files/secret.txt", sd(h)),
    |h, out| { failed(&out) }
);
escape!(
    write_canary,
    |h: &Host| format!("echo x > {}", h.canary.path().display()),
    |h, out| {
        // /tmp is the sandbox's own: a write there may succeed, but never reaches the host's file.
        out.changes.is_empty()
    }
);
escape!(
    sysrq_trigger,
    |_: &Host| "echo b > /proc/sysrq-trigger".into(),
    |h, out| failed(&out)
);
escape!(
    remount_root,
    |_: &Host| "mount -o remount,rw /usr".into(),
    |h, out| failed(&out)
);
escape!(
    mount_tmpfs,
    |_: &Host| "mkdir -p m && mount -t tmpfs none m".into(),
    |h, out| failed(&out)
);
escape!(chroot_out, |_: &Host| "chroot / true".into(), |h, out| failed(
    &out
));

// Links planted in the thread space pointing out.
escape!(
    symlink_to_state_dir,
    |h: &Host| format!("ln -s {}/config/api-key k && cat k", sd(h)),
    |h, out| {
        failed(&out)
            && !out.output.contains("sk-HOST-KEY")
            && out
                .not_written
                .iter()
                .any(|n| n.path == "/uploads/k" && n.reason == NotWrittenReason::NotARegularFile)
    }
);
escape!(
    symlink_dir_to_root,
    |_: &Host| "ln -s / up && ls up/root".into(),
    |h, out| { failed(&out) && out.not_written.iter().any(|n| n.path == "/uploads/up") }
);
escape!(
    symlink_replacing_a_thread_file,
    |_: &Host| "rm data.csv && ln -s /etc/passwd data.csv".into(),
    |h, out| {
        // The link is not followed on the way back; the original file is not deleted for it.
        out.not_written
            .iter()
            .any(|n| n.path == "/uploads/data.csv" && n.reason == NotWrittenReason::NotARegularFile)
            && out.changes.is_empty()
    }
);
escape!(
    hardlink_to_etc_passwd,
    |_: &Host| "ln /etc/passwd hl".into(),
    |h, out| failed(&out)
);
escape!(
    hardlink_to_system_binary,
    |_: &Host| "ln /usr/bin/env hl".into(),
    |h, out| failed(&out)
);

// Processes, network, identity.
escape!(
    host_processes_invisible,
    |_: &Host| "ls /proc | grep -c '^[0-9]'".into(),
    |h, out| { out.output.trim().parse::<u32>().is_ok_and(|n| n < 10) }
);
escape!(
    host_environment_invisible,
    |_: &Host| "cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n'".into(),
    |h, out| {
        !out.output.contains("CARGO") && !out.output.contains("TRELLIS") && !out.output.contains("RUST")
    }
);
escape!(no_secrets_in_environment, |_: &Host| "env".into(), |h, out| {
    out.output.lines().all(|l| {
        let name = l.split('=').next().unwrap_or("");
        !name.contains("KEY")
            && !name.contains("TOKEN")
            && !name.contains("SECRET")
            && !name.starts_with("TRELLIS")
            && !name.starts_with("AWS")
            && !name.starts_with("CARGO")
    })
});
escape!(
    not_root_on_the_host,
    |_: &Host| "id -u; cat /proc/self/status | grep CapEff".into(),
    |h, out| { out.output.contains("CapEff:\t0000000000000000") }
);
escape!(
    kill_everything_kills_only_the_sandbox,
    |_: &Host| "kill -9 -1; true".into(),
    |h, out| {
        // This test process (and the host) survived to check.
        std::process::id() > 0
    }
);
escape!(
    no_route_out,
    |_: &Host| "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\"".into(),
    |h, out| { failed(&out) }
);
escape!(
    no_devices,
    |_: &Host| "ls /dev/sda /dev/mem /dev/kmsg 2>&1; cat /dev/mem".into(),
    |h, out| failed(&out)
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_to_host_loopback() {
    let Some(sandbox) = bwrap("tcp_to_host_loopback") else {
        return;
    };
    let host = Host::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let cmd =
        format!("python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)\"");
    let out = attempt(sandbox.as_ref(), &host, &cmd).await;
    assert!(failed(&out), "{out:?}");
    // The kernel completes a handshake before `accept`: had the command connected, the connection
    // would be waiting in the backlog by the time the command has exited.
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(
        accepted.is_err(),
        "the host listener got a connection from the sandbox"
    );
    host.unchanged();
}

/// Host processes (their `/proc/<pid>` directories) for which `keep(dir, command line)` holds; the
/// command line has its NULs as spaces.
pub fn host_processes(keep: impl Fn(&std::fs::DirEntry, &str) -> bool) -> Vec<PathBuf> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| keep(e, &String::from_utf8_lossy(&c).replace('\0', " ")))
        })
        .map(|e| e.path())
        .collect()
}
