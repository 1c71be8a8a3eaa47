//! Bubblewrap's resource limits: each limit its report says this host enforces is tried for real.
//! Under `TRELLIS_SANDBOX=required` (CI) every limit must be enforced.

use std::time::Duration;

use trellis_backend::sandbox::{ExecFiles, ExecOutput, ExecRequest, LimitKind, SandboxLimits};
use trellis_fs_tools::sandbox::{BubblewrapConfig, BubblewrapSandbox};

use super::escapes::host_processes;
use super::{bwrap, p, state, text};

fn required() -> bool {
    std::env::var("TRELLIS_SANDBOX").as_deref() == Ok("required")
}

/// True when the test should try `kind`; fails the test when CI requires it and it is not enforced.
pub fn enforced(sandbox: &BubblewrapSandbox, kind: LimitKind) -> bool {
    let report = trellis_backend::Sandbox::report(sandbox);
    let on = report.enforces(kind);
    if !on {
        assert!(
            !required(),
            "{} is not enforced on this host but TRELLIS_SANDBOX=required:\n{report}",
            kind.as_str()
        );
        eprintln!(
            "skipped: {} is not enforced on this host:\n{report}",
            kind.as_str()
        );
    }
    on
}

async fn run(sandbox: &BubblewrapSandbox, request: ExecRequest) -> ExecOutput {
    trellis_backend::Sandbox::execute(sandbox, &ExecFiles::new(state()), &request)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_limit_is_reported_and_enforced_here() {
    let Some(sandbox) = bwrap("limits report") else {
        return;
    };
    let report = trellis_backend::Sandbox::report(sandbox.as_ref());
    for kind in [
        LimitKind::Filesystem,
        LimitKind::Network,
        LimitKind::Environment,
        LimitKind::Timeout,
        LimitKind::Processes,
        LimitKind::Memory,
        LimitKind::TotalMemory,
        LimitKind::Cpu,
        LimitKind::FileSize,
        LimitKind::Tmp,
        LimitKind::Output,
        LimitKind::Syscalls,
    ] {
        assert!(
            report.status(kind).is_some(),
            "{} missing from\n{report}",
            kind.as_str()
        );
        if required() {
            assert!(report.enforces(kind), "{} not enforced:\n{report}", kind.as_str());
        }
    }
    assert!(report.to_string().contains("processes"), "{report}");
    // The unsandboxed shell says it filters nothing.
    let host = trellis_fs_tools::sandbox::UnsandboxedShell::new(SandboxLimits::default());
    assert!(
        !trellis_backend::Sandbox::report(&host).enforces(LimitKind::Syscalls),
        "{}",
        trellis_backend::Sandbox::report(&host)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_hits_the_process_limit_and_is_gone_after() {
    let Some(sandbox) = bwrap("fork bomb") else { return };
    if !enforced(&sandbox, LimitKind::Processes) {
        return;
    }
    let uid = sandbox.runs_as().uid;
    let out = run(
        &sandbox,
        ExecRequest::new("bomb() { bomb | bomb & }; bomb; sleep 3; echo survived")
            .timeout(Duration::from_secs(5)),
    )
    .await;
    let text = out.output.to_lowercase();
    assert!(
        text.contains("fork")
            || text.contains("resource temporarily unavailable")
            || text.contains("cannot create"),
        "{out:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = host_processes(|dir, cmdline| {
        use std::os::unix::fs::MetadataExt;
        dir.metadata().is_ok_and(|m| m.uid() == uid) && cmdline.starts_with("/bin/sh")
    })
    .len();
    // Other sandbox tests of this binary may run a shell as the same user meanwhile; a surviving
    // bomb would be hundreds.
    assert!(left < 20, "{left} shells of uid {uid} survived the bomb");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_fails_at_the_memory_limit() {
    let Some(_) = bwrap("memory bomb") else { return };
    let mut limits = SandboxLimits::default();
    limits.max_memory_bytes = 512 << 20;
    let small = BubblewrapSandbox::new(BubblewrapConfig::default().limits(limits)).unwrap();
    if !enforced(&small, LimitKind::Memory) {
        return;
    }
    let out = run(
        &small,
        ExecRequest::new("python3 -c \"x = []\nwhile True: x.append(bytearray(50 * 1024 * 1024))\"")
            .timeout(Duration::from_secs(30)),
    )
    .await;
    assert!(!out.timed_out, "{out:?}");
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    assert!(out.output.contains("MemoryError"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_larger_than_the_limit_cannot_be_written() {
    let Some(_) = bwrap("file size") else { return };
    let mut limits = SandboxLimits::default();
    limits.max_file_bytes = 1 << 20;
    let small = BubblewrapSandbox::new(BubblewrapConfig::default().limits(limits)).unwrap();
    if !enforced(&small, LimitKind::FileSize) {
        return;
    }
    let backend = state();
    let out = trellis_backend::Sandbox::execute(
        &small,
        &ExecFiles::new(backend.clone()),
        &ExecRequest::new("head -c 5000000 /dev/zero > big.bin; ls -l big.bin"),
    )
    .await
    .unwrap();
    assert!(
        out.output.to_lowercase().contains("file size limit exceeded") || out.exit_code != Some(0),
        "{out:?}"
    );
    let kept = backend
        .read(&p("/big.bin"), None)
        .await
        .map(|r| r.size)
        .unwrap_or(0);
    assert!(kept <= 1 << 20, "{kept} bytes written past a 1 MiB limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_megabytes_of_output_are_cut_and_bounded() {
    let Some(sandbox) = bwrap("200 MB of output") else {
        return;
    };
    let backend = state();
    let request = ExecRequest::new("head -c 200000000 /dev/zero | tr '\\0' x; echo; echo the-end")
        .full_output_path(p("/large_tool_results/big.txt"))
        .timeout(Duration::from_secs(120));
    let out = trellis_backend::Sandbox::execute(sandbox.as_ref(), &ExecFiles::new(backend.clone()), &request)
        .await
        .unwrap();
    assert_eq!(
        out.exit_code,
        Some(0),
        "{}",
        &out.output[..200.min(out.output.len())]
    );
    assert!(out.truncated);
    assert!(out.output.len() <= 33 * 1024, "{}", out.output.len());
    assert!(out.output.ends_with("the-end\n"));
    assert_eq!(out.output_bytes, 200_000_000 + "\nthe-end\n".len() as u64);
    let saved = backend
        .read(&p("/large_tool_results/big.txt"), None)
        .await
        .unwrap();
    assert_eq!(saved.size, SandboxLimits::default().full_output_bytes);
    assert!(
        out.output
            .contains("the first 67108864 bytes of it are in /large_tool_results/big.txt")
    );
    assert!(
        text(backend.as_ref(), "/large_tool_results/big.txt")
            .await
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_ignores_sigterm_and_double_forks_is_gone_after_the_timeout() {
    let Some(sandbox) = bwrap("double fork") else {
        return;
    };
    let marker = format!("{}", 40_000 + std::process::id() % 20_000);
    let cmd = format!(
        "( ( trap '' TERM HUP INT; exec sleep {marker} ) & ) ; trap '' TERM; echo started; sleep {marker}"
    );
    let out = run(&sandbox, ExecRequest::new(cmd).timeout(Duration::from_secs(2))).await;
    assert!(out.timed_out, "{out:?}");
    assert!(out.output.contains("started"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let needle = format!("sleep {marker}");
    let left = host_processes(|_, cmdline| cmdline.contains(&needle));
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tmp_is_capped_at_its_size() {
    let Some(_) = bwrap("/tmp size") else { return };
    let mut limits = SandboxLimits::default();
    limits.max_tmp_bytes = 64 << 20;
    let small = BubblewrapSandbox::new(BubblewrapConfig::default().limits(limits)).unwrap();
    if !enforced(&small, LimitKind::Tmp) {
        return;
    }
    let out = run(
        &small,
        ExecRequest::new("head -c 100M /dev/zero > /tmp/f; echo status=$?; du -m /tmp/f")
            .timeout(Duration::from_secs(60)),
    )
    .await;
    assert!(out.output.contains("No space left on device"), "{out:?}");
    assert!(!out.output.contains("status=0"), "{out:?}");
    // /dev is a tmpfs too: its only writable part is /dev/shm, capped the same way.
    let out = run(
        &small,
        ExecRequest::new(
            "touch /dev/x && echo dev-writable; head -c 100M /dev/zero > /dev/shm/f; echo shm=$?",
        )
        .timeout(Duration::from_secs(60)),
    )
    .await;
    assert!(!out.output.contains("dev-writable"), "{out:?}");
    assert!(out.output.contains("shm=1"), "{out:?}");
}
