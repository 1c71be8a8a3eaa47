//! Side doors: kernel interfaces that reach past bubblewrap's namespaces (io_uring, ptrace,
//! keyrings, nested namespaces, mounts, VM and raw sockets, …). Each is tried from inside the
//! sandbox and must fail with `EPERM` ("Operation not permitted"), the answer of the seccomp filter.
//!
//! The system calls are made from Python through `ctypes`, by the host's numbers (`libc::SYS_*`),
//! and where the kernel itself would refuse them for another reason their arguments are chosen so
//! that, without the filter, the answer would be something else (success, `EBADF`, `EINVAL`,
//! `EFAULT`): an `EPERM` then comes from the filter. The calls the kernel refuses a process without
//! capabilities before it looks at any argument (`pivot_root`, `fsopen`, `fsmount`, `fspick`,
//! `move_mount`) are listed as well; for them the test shows the refusal, not who refused. Modules
//! and `kexec` answer `ENOSYS` on a kernel built without them, `EPERM` from the filter.

use std::collections::BTreeMap;
use std::time::Duration;

use std::sync::Arc;

use trellis_backend::sandbox::{ExecFiles, ExecOutput, ExecRequest, LimitKind, Network, Sandbox};
use trellis_fs_tools::sandbox::BubblewrapSandbox;

use super::limits::enforced;
use super::{bwrap, seed, state};

/// The shared bubblewrap sandbox when its report says it filters system calls here (skipped
/// otherwise; under `TRELLIS_SANDBOX=required` that is a failure).
fn filtered(test: &str) -> Option<Arc<BubblewrapSandbox>> {
    bwrap(test).filter(|s| enforced(s, LimitKind::Syscalls))
}

const EPERM: &str = "Operation not permitted";

/// The Python preamble: `call(name, number, *args)` makes the system call and prints
/// `name: ok` or `name: <strerror>`; `s(text)` is the address of a NUL-terminated copy of `text`,
/// `BUF` of 4 KiB of zeros.
const PREAMBLE: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
_keep = []
def s(text):
    b = ctypes.create_string_buffer(text.encode())
    _keep.append(b)
    return ctypes.addressof(b)
_buf = ctypes.create_string_buffer(4096)
BUF = ctypes.addressof(_buf)
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno()
    print(name + ": " + ("ok" if r != -1 else os.strerror(e)), flush=True)
"#;

/// One system call to try: its name, its number here, and its arguments as Python expressions.
struct Call {
    name: &'static str,
    nr: libc::c_long,
    args: &'static str,
}

const fn call(name: &'static str, nr: libc::c_long, args: &'static str) -> Call {
    Call { name, nr, args }
}

/// Run `command` in bubblewrap with `network`.
async fn run(sandbox: &dyn Sandbox, command: &str, network: Network) -> ExecOutput {
    let backend = state();
    sandbox
        .execute(
            &ExecFiles::new(backend),
            &ExecRequest::new(command)
                .network(network)
                .timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap()
}

/// Run the Python `script` in the sandbox with `network`. It prints one `name: answer` line per
/// attempt; the answers by name, checked to be `expected` many.
async fn answers(
    sandbox: &dyn Sandbox,
    script: &str,
    network: Network,
    expected: usize,
) -> BTreeMap<String, String> {
    let backend = state();
    seed(backend.as_ref(), &[("/probe.py", script)]).await;
    let out = sandbox
        .execute(
            &ExecFiles::new(backend),
            &ExecRequest::new("python3 /probe.py")
                .network(network)
                .timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let answers: BTreeMap<String, String> = out
        .output
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert_eq!(answers.len(), expected, "the probe did not finish: {out:?}");
    answers
}

/// Make `calls` in the sandbox; what each returned (`ok` or the error message), by name.
async fn attempt(sandbox: &dyn Sandbox, calls: &[Call], network: Network) -> BTreeMap<String, String> {
    let mut script = PREAMBLE.to_owned();
    for c in calls {
        script.push_str(&format!("call({:?}, {}, {})\n", c.name, c.nr, c.args));
    }
    answers(sandbox, &script, network, calls.len()).await
}

/// Assert every call of `calls` failed with `EPERM`.
async fn all_denied(test: &str, calls: &[Call]) {
    let Some(sandbox) = filtered(test) else { return };
    let answers = attempt(sandbox.as_ref(), calls, Network::None).await;
    let through: Vec<_> = answers.iter().filter(|(_, v)| v.as_str() != EPERM).collect();
    assert!(through.is_empty(), "{test}: not refused with EPERM: {through:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_uring_is_refused() {
    all_denied(
        "io_uring_is_refused",
        &[
            // Without the filter: a ring (the parameters are all zero but the entries).
            call("io_uring_setup", libc::SYS_io_uring_setup, "8, BUF"),
            call("io_uring_enter", libc::SYS_io_uring_enter, "-1, 0, 0, 0, 0, 0"),
            call("io_uring_register", libc::SYS_io_uring_register, "-1, 0, 0, 0"),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ptrace_and_other_processes_memory_are_refused() {
    all_denied(
        "ptrace_and_other_processes_memory_are_refused",
        &[
            // PTRACE_TRACEME: allowed to anyone without the filter.
            call("ptrace", libc::SYS_ptrace, "0, 0, 0, 0"),
            // Of its own memory, no vectors: 0 without the filter.
            call(
                "process_vm_readv",
                libc::SYS_process_vm_readv,
                "os.getpid(), 0, 0, 0, 0, 0",
            ),
            call(
                "process_vm_writev",
                libc::SYS_process_vm_writev,
                "os.getpid(), 0, 0, 0, 0, 0",
            ),
        ],
    )
    .await;
}

/// Security review F17: the session keyring Trellis was started with is inherited and not
/// namespaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keyrings_are_out_of_reach() {
    all_denied(
        "the_keyrings_are_out_of_reach",
        &[
            // KEYCTL_GET_KEYRING_ID of KEY_SPEC_SESSION_KEYRING (-3), then KEYCTL_DESCRIBE it.
            call("keyctl get session keyring", libc::SYS_keyctl, "0, -3, 0"),
            call(
                "keyctl describe session keyring",
                libc::SYS_keyctl,
                "6, -3, BUF, 4096",
            ),
            call(
                "add_key",
                libc::SYS_add_key,
                "s('user'), s('trellis'), s('x'), 1, -3",
            ),
            call(
                "request_key",
                libc::SYS_request_key,
                "s('user'), s('trellis'), 0, 0",
            ),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bpf_perf_events_and_userfaultfd_are_refused() {
    all_denied(
        "bpf_perf_events_and_userfaultfd_are_refused",
        &[
            // An unknown command: EINVAL without the filter.
            call("bpf", libc::SYS_bpf, "9999, 0, 0"),
            // No attributes: EFAULT without the filter.
            call("perf_event_open", libc::SYS_perf_event_open, "0, 0, -1, -1, 0"),
            // UFFD_USER_MODE_ONLY | O_CLOEXEC: allowed to anyone without the filter (Linux 5.11+).
            call("userfaultfd", libc::SYS_userfaultfd, "1 | os.O_CLOEXEC"),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_new_namespaces_or_mounts() {
    all_denied(
        "no_new_namespaces_or_mounts",
        &[
            // CLONE_NEWUSER: a user namespace of its own, where it would be root. Allowed without
            // the filter.
            call("unshare", libc::SYS_unshare, "0x10000000"),
            call("setns", libc::SYS_setns, "-1, 0"),
            // A bad target address: EFAULT without the filter.
            call("mount", libc::SYS_mount, "0, 1, 0, 0, 0"),
            // Unknown flags: EINVAL without the filter.
            call("umount2", libc::SYS_umount2, "s('/'), 0x7fff0000"),
            call("pivot_root", libc::SYS_pivot_root, "s('/'), s('/')"),
            call("fsopen", libc::SYS_fsopen, "s('tmpfs'), 0"),
            call("fsmount", libc::SYS_fsmount, "-1, 0, 0"),
            call("fsconfig", libc::SYS_fsconfig, "-1, 0, 0, 0, 0"),
            call("fspick", libc::SYS_fspick, "-1, s(''), 0"),
            call("move_mount", libc::SYS_move_mount, "-1, s(''), -1, s(''), 0"),
            call("open_tree", libc::SYS_open_tree, "-1, s(''), 0x7fff0000"),
            call(
                "mount_setattr",
                libc::SYS_mount_setattr,
                "-1, s(''), 0x7fff0000, 0, 0",
            ),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_kernel_modules_or_kexec() {
    all_denied(
        "no_kernel_modules_or_kexec",
        &[
            call("init_module", libc::SYS_init_module, "0, 0, s('')"),
            call("finit_module", libc::SYS_finit_module, "-1, s(''), 0"),
            call("delete_module", libc::SYS_delete_module, "s('trellis'), 0"),
            call("kexec_load", libc::SYS_kexec_load, "0, 0, 0, 0"),
            call("kexec_file_load", libc::SYS_kexec_file_load, "-1, -1, 0, 0, 0"),
        ],
    )
    .await;
}

/// The x32 ABI shares x86_64's architecture value, so the filter must refuse its numbers
/// (`0x40000000 | n`) as a whole. Without the filter `getpid` there answers `ENOSYS` (x32
/// disabled, as on most kernels) or the process id.
#[cfg(target_arch = "x86_64")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_x32_abi_is_refused() {
    all_denied(
        "the_x32_abi_is_refused",
        &[
            call("x32 getpid", 0x4000_0000 | libc::SYS_getpid, ""),
            call(
                "x32 io_uring_setup",
                0x4000_0000 | libc::SYS_io_uring_setup,
                "8, BUF",
            ),
        ],
    )
    .await;
}

/// `unshare(1)` and a new mount, as a script would try them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unshare_and_mount_commands_fail() {
    let Some(sandbox) = filtered("unshare_and_mount_commands_fail") else {
        return;
    };
    let out = run(
        sandbox.as_ref(),
        "unshare -U true; echo unshare=$?; unshare -Urm sh -c 'mount -t tmpfs none /tmp && echo mounted'; echo mount=$?",
        Network::None,
    )
    .await;
    assert!(out.output.contains("unshare=1"), "{out:?}");
    assert!(out.output.contains(EPERM), "{out:?}");
    assert!(!out.output.contains("mounted"), "{out:?}");
}

/// A Python program that opens a socket of each `(name, domain, type)` and an `AF_INET` socket
/// pair, printing `name: ok` or `name: <strerror>` for each.
fn socket_probe(sockets: &[(&str, &str, &str)]) -> String {
    let mut script = String::from("import os, socket\n");
    let mut attempt = |name: &str, code: &str| {
        script.push_str(&format!(
            "try:\n    {code}\n    print('{name}: ok')\nexcept OSError as e:\n    print('{name}: ' + os.strerror(e.errno))\n"
        ));
    };
    for (name, domain, kind) in sockets {
        attempt(
            name,
            &format!("socket.socket(socket.{domain}, socket.{kind}).close()"),
        );
    }
    attempt("inet pair", "socket.socketpair(socket.AF_INET)");
    script
}

async fn sockets(sandbox: &dyn Sandbox, network: Network) -> BTreeMap<String, String> {
    let script = socket_probe(&[
        ("vsock", "AF_VSOCK", "SOCK_STREAM"),
        ("inet", "AF_INET", "SOCK_STREAM"),
        ("inet6", "AF_INET6", "SOCK_STREAM"),
        ("netlink", "AF_NETLINK", "SOCK_RAW"),
        ("packet", "AF_PACKET", "SOCK_RAW"),
        ("unix", "AF_UNIX", "SOCK_STREAM"),
    ]);
    answers(sandbox, &script, network, 7).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_network_only_unix_sockets_open() {
    let Some(sandbox) = filtered("without_network_only_unix_sockets_open") else {
        return;
    };
    let answers = sockets(sandbox.as_ref(), Network::None).await;
    for name in ["vsock", "inet", "inet6", "netlink", "packet", "inet pair"] {
        assert_eq!(answers[name], EPERM, "{name}: {answers:?}");
    }
    assert_eq!(answers["unix"], "ok", "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_network_vm_sockets_stay_refused() {
    let Some(sandbox) = filtered("with_network_vm_sockets_stay_refused") else {
        return;
    };
    let answers = sockets(sandbox.as_ref(), Network::Host).await;
    assert_eq!(answers["vsock"], EPERM, "{answers:?}");
    // (Not AF_INET6: a host may have IPv6 off.)
    for name in ["inet", "unix"] {
        assert_eq!(answers[name], "ok", "{name}: {answers:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_allowed_domains_only_ip_and_unix_sockets_open() {
    let Some(sandbox) = filtered("with_allowed_domains_only_ip_and_unix_sockets_open") else {
        return;
    };
    let allowed = trellis_backend::sandbox::AllowedDomains::parse(["example.com"]).unwrap();
    let answers = sockets(sandbox.as_ref(), Network::Domains(allowed)).await;
    for name in ["vsock", "netlink", "packet"] {
        assert_eq!(answers[name], EPERM, "{name}: {answers:?}");
    }
    for name in ["inet", "unix"] {
        assert_eq!(answers[name], "ok", "{name}: {answers:?}");
    }
}

/// What scripts ordinarily do still works under the filter: a shell pipeline, Python with threads
/// and a subprocess, a Unix socket pair, and standard input is `/dev/null` as it always was, with
/// the program's descriptor (3) not left open (bwrap closes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_commands_still_work() {
    let Some(sandbox) = filtered("ordinary_commands_still_work") else {
        return;
    };
    let out = run(
        sandbox.as_ref(),
        "printf 'b\\na\\n' | sort | tr a-z A-Z | head -1; \
         readlink /proc/$$/fd/0; test -e /proc/$$/fd/3 && echo fd3-open || echo fd3-closed; \
         cat; echo stdin-done",
        Network::None,
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(
        out.output.lines().collect::<Vec<_>>(),
        ["A", "/dev/null", "fd3-closed", "stdin-done"],
        "{out:?}"
    );
    let script = "import socket, subprocess, threading\n\
                  a, b = socket.socketpair()\n\
                  t = threading.Thread(target=lambda: a.sendall(b'over a unix pair'))\n\
                  t.start(); t.join()\n\
                  print(b.recv(100).decode())\n\
                  print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout.strip())\n";
    let backend = state();
    seed(backend.as_ref(), &[("/ordinary.py", script)]).await;
    let out = sandbox
        .execute(
            &ExecFiles::new(backend),
            &ExecRequest::new("python3 /ordinary.py"),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.output, "over a unix pair\nchild\n", "{out:?}");
}

/// `clone` and `clone3` with namespace flags get past the filter (`clone3` passes its flags in
/// memory); where bwrap has `--disable-userns` (0.8 and later), a nested user namespace is refused
/// all the same: the namespace count is capped at the sandbox's own (`ENOSPC`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_user_namespaces_are_refused_where_bwrap_can() {
    let Some(sandbox) = filtered("nested_user_namespaces_are_refused_where_bwrap_can") else {
        return;
    };
    let report = sandbox.report();
    let detail = report
        .status(LimitKind::Syscalls)
        .map(|s| s.detail.as_str())
        .unwrap_or("");
    if !detail.contains("no nested user namespaces") {
        assert!(
            std::env::var("TRELLIS_SANDBOX").as_deref() != Ok("required") || !bwrap_disables_userns(),
            "bwrap has --disable-userns but the sandbox does not use it:\n{report}"
        );
        return eprintln!("skipped: nested user namespaces are not disabled here:\n{report}");
    }
    // A raw clone(CLONE_NEWUSER | SIGCHLD): the child (0) leaves at once, the parent waits.
    let script = format!(
        "{PREAMBLE}\
         ctypes.set_errno(0)\n\
         r = libc.syscall(ctypes.c_long({clone}), ctypes.c_long(0x10000000 | 17), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))\n\
         if r == 0:\n    os._exit(0)\n\
         if r > 0:\n    os.waitpid(r, 0)\n    print('clone newuser: ok')\n\
         else:\n    print('clone newuser: ' + os.strerror(ctypes.get_errno()))\n",
        clone = libc::SYS_clone
    );
    let answers = answers(sandbox.as_ref(), &script, Network::None, 1).await;
    assert_eq!(answers["clone newuser"], "No space left on device", "{answers:?}");
}

/// True when the host's `bwrap --help` lists `--disable-userns`.
fn bwrap_disables_userns() -> bool {
    std::process::Command::new("bwrap")
        .arg("--help")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--disable-userns"))
}
