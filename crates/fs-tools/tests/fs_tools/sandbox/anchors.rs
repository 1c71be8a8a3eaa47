//! The escape and abuse cases `sandbox-anchors.md` §7 lists that `escapes` and the other suites do
//! not already cover: special files in the written tree (§7.3), privilege and terminal (§7.8),
//! the network denial matrix without a proxy (§7.6) and binaries planted in the view (§7.9).
//! Each goes through the real `execute` path of bubblewrap and checks what the host got back.

use std::sync::Arc;
use std::time::Duration;

use trellis_backend::sandbox::{ExecFiles, ExecOutput, ExecRequest, NotWrittenReason};
use trellis_backend::{Backend, StateBackend};
use trellis_fs_tools::sandbox::BubblewrapSandbox;

use super::{bwrap, seed, text};

async fn run(sandbox: &BubblewrapSandbox, view: &Arc<dyn Backend>, command: &str) -> ExecOutput {
    let request = ExecRequest::new(command).timeout(Duration::from_secs(30));
    trellis_backend::Sandbox::execute(sandbox, &ExecFiles::new(view.clone()), &request)
        .await
        .unwrap()
}

fn view() -> Arc<dyn Backend> {
    Arc::new(StateBackend::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_files_in_the_copy_are_never_written_back_and_never_block() {
    let Some(sandbox) = bwrap("special files") else {
        return;
    };
    let view = view();
    let out = run(
        &sandbox,
        &view,
        "mkfifo fifo; \
         python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"; \
         mknod dev c 1 3 2>/dev/null; \
         ln -s /etc/passwd link; ln /etc/passwd hard 2>/dev/null; \
         echo plain > plain; true",
    )
    .await;
    assert_eq!(
        text(view.as_ref(), "/plain").await.as_deref(),
        Some("plain\n"),
        "{out:?}"
    );
    for special in ["/fifo", "/sock", "/dev", "/link", "/hard"] {
        assert_eq!(text(view.as_ref(), special).await, None, "{special}: {out:?}");
    }
    let skipped: Vec<&str> = out
        .not_written
        .iter()
        .filter(|n| n.reason == NotWrittenReason::NotARegularFile)
        .map(|n| n.path.as_str())
        .collect();
    for listed in ["/fifo", "/sock", "/link"] {
        assert!(skipped.contains(&listed), "{listed} not listed: {out:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_privilege_can_be_gained() {
    let Some(sandbox) = bwrap("privilege") else { return };
    let out = run(
        &sandbox,
        &view(),
        "grep -E '^(NoNewPrivs|CapEff|CapPrm):' /proc/self/status; \
         cp /bin/sh ./sh && chmod u+s ./sh 2>/dev/null; ./sh -c 'echo euid=$(id -u)'; \
         sudo -n true 2>/dev/null; echo sudo=$?; su -c true root </dev/null 2>/dev/null; echo su=$?",
    )
    .await;
    let o = &out.output;
    assert!(o.contains("NoNewPrivs:\t1"), "{out:?}");
    assert!(o.contains("CapEff:\t0000000000000000"), "{out:?}");
    assert!(o.contains("CapPrm:\t0000000000000000"), "{out:?}");
    assert!(!o.contains("euid=0") || sandbox.runs_as().uid == 0, "{out:?}");
    assert!(!o.contains("sudo=0") && !o.contains("su=0"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_commands_own_processes_are_visible_and_there_is_no_terminal() {
    let Some(sandbox) = bwrap("pids and tty") else {
        return;
    };
    let out = run(
        &sandbox,
        &view(),
        "echo pids=$(ls /proc | grep -c '^[0-9]'); \
         python3 -c \"open('/dev/tty')\" 2>/dev/null; echo tty=$?",
    )
    .await;
    let pids: usize = out
        .output
        .lines()
        .find_map(|l| l.strip_prefix("pids="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(pids < 30, "{pids} processes visible: {out:?}");
    // No controlling terminal: TIOCSTI has nothing to push input into.
    assert!(!out.output.contains("tty=0"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_denial_matrix_holds_without_network() {
    let Some(sandbox) = bwrap("network matrix") else {
        return;
    };
    let out = run(
        &sandbox,
        &view(),
        "getent ahosts example.com >/dev/null 2>&1; echo getent=$?; \
         python3 -c \"import socket; socket.getaddrinfo('example.com', 80)\" 2>/dev/null; echo dns=$?; \
         python3 -c \"import urllib.request; urllib.request.urlopen('http://1.1.1.1', timeout=3)\" 2>/dev/null; echo http=$?; \
         python3 -c \"import socket; socket.create_connection(('169.254.169.254', 80), timeout=3)\" 2>/dev/null; echo metadata=$?; \
         python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('8.8.8.8', 53))\" 2>/dev/null; echo udp=$?; \
         if command -v bash >/dev/null; then bash -c 'echo > /dev/tcp/127.0.0.1/80' 2>/dev/null; echo devtcp=$?; fi",
    )
    .await;
    for probe in ["getent", "dns", "http", "metadata", "udp", "devtcp"] {
        assert!(
            !out.output.contains(&format!("{probe}=0")),
            "{probe} got through: {out:?}"
        );
    }
    assert!(out.output.contains("metadata="), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_abstract_unix_socket_is_out_of_reach() {
    let Some(sandbox) = bwrap("abstract socket") else {
        return;
    };
    let name = format!("trellis-test-{}", std::process::id());
    let listener = std::os::unix::net::UnixListener::bind_addr(
        &<std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(
            name.as_bytes(),
        )
        .unwrap(),
    )
    .unwrap();
    listener.set_nonblocking(true).unwrap();
    let out = run(
        &sandbox,
        &view(),
        &format!(
            "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect(b'\\0{name}')\" 2>&1; echo connect=$?"
        ),
    )
    .await;
    assert!(!out.output.contains("connect=0"), "{out:?}");
    assert!(listener.accept().is_err(), "the host socket got a connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binaries_planted_in_the_view_do_not_replace_the_systems() {
    let Some(sandbox) = bwrap("planted binaries") else {
        return;
    };
    let view = view();
    let fake = "#!/bin/sh\necho HIJACKED\n";
    seed(
        view.as_ref(),
        &[
            ("/bin/sh", fake),
            ("/usr/bin/env", fake),
            ("/usr/bin/python3", fake),
            ("/usr/local/bin/python3", fake),
            ("/bin/bwrap", fake),
        ],
    )
    .await;
    let out = run(&sandbox, &view, "env true; python3 -c 'print(6 * 7)'").await;
    assert!(!out.output.contains("HIJACKED"), "{out:?}");
    assert!(out.output.contains("42"), "{out:?}");
}

/// §7.4: a cancelled call (a chat step the user interrupts drops its `execute` future) ends the
/// command and everything it started, as the timeout does: no marked process survives on the
/// host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_command_leaves_no_process_behind() {
    let Some(sandbox) = bwrap("cancelled command") else {
        return;
    };
    let marker = "3.14159265";
    let command = format!(
        "(while :; do sleep {marker}; done) & setsid sh -c 'sleep {marker}' & sleep {marker}; sleep 30"
    );
    let view = view();
    cancelled_after_3_s_leaves_nothing(run(&sandbox, &view, &command), marker).await;
}

/// Drop `running` (a command that starts at least two processes whose command lines hold `marker`
/// and runs for longer) after 3 s, as an interrupted chat step does, and check that no process
/// with `marker` outlives it.
pub async fn cancelled_after_3_s_leaves_nothing<T: std::fmt::Debug>(
    running: impl std::future::Future<Output = T>,
    marker: &str,
) {
    let alive = || super::escapes::host_processes(|_, cmdline| cmdline.contains(marker)).len();
    let seen = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        alive()
    };
    // After 3 s the future is dropped: the call was cancelled.
    let (started, seen) = tokio::join!(tokio::time::timeout(Duration::from_secs(3), running), seen);
    assert!(started.is_err(), "the command ended by itself: {started:?}");
    assert!(seen >= 2, "the marked processes never ran ({seen} seen)");
    let mut left = alive();
    for _ in 0..50 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = alive();
    }
    assert_eq!(left, 0, "{left} marked processes outlived the cancelled command");
}

/// Review F17: the sandbox's process 1 is a copy of `bwrap`, whose command line every command can
/// read in `/proc/1/cmdline`. It held every option, with the host paths of the command's copy,
/// the generated `/etc/passwd` and the skill cache; they now go to bwrap in a file (`--args`), so
/// process 1 shows none of them. `/proc/self/mountinfo` still names the sources of the mounts
/// (the kernel writes it; docs/security.md says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_one_shows_no_host_paths() {
    let Some(sandbox) = bwrap("process 1") else { return };
    let out = run(&sandbox, &view(), "tr '\\0' ' ' < /proc/1/cmdline").await;
    let cmdline = out.output.trim();
    assert!(cmdline.contains("--args 4"), "{cmdline}");
    for host in [
        "trellis-exec-",
        "trellis-sandbox-etc-",
        "--bind",
        "--ro-bind",
        "--setenv",
    ] {
        assert!(!cmdline.contains(host), "{host} in {cmdline}");
    }
    let work_root = std::env::temp_dir();
    assert!(!cmdline.contains(work_root.to_str().unwrap()), "{cmdline}");
}
