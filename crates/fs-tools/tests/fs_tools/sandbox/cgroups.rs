//! Control groups: the bounds on all of a command's processes together (memory, CPU), the group
//! gone after the command, and the groups of a killed Trellis removed by the next one.
//!
//! Under `TRELLIS_SANDBOX=required` (CI, as root on a cgroup v1 or v2 host) the groups must be
//! available; elsewhere a host without them skips with the report's reason.

use std::path::PathBuf;
use std::time::Duration;

use trellis_backend::sandbox::{ExecFiles, ExecOutput, ExecRequest, LimitKind, SandboxLimits};
use trellis_fs_tools::sandbox::{BubblewrapConfig, BubblewrapSandbox};

use super::escapes::host_processes;
use super::limits::enforced;
use super::{bwrap, state};

fn sandbox_with(test: &str, limits: SandboxLimits, kind: LimitKind) -> Option<BubblewrapSandbox> {
    bwrap(test)?;
    let sandbox = BubblewrapSandbox::new(BubblewrapConfig::default().limits(limits)).unwrap();
    enforced(&sandbox, kind).then_some(sandbox)
}

async fn run(sandbox: &BubblewrapSandbox, command: &str) -> ExecOutput {
    let request = ExecRequest::new(command).timeout(Duration::from_secs(60));
    trellis_backend::Sandbox::execute(sandbox, &ExecFiles::new(state()), &request)
        .await
        .unwrap()
}

/// The directory command groups are made in (the memory one under cgroup v1), from the report.
fn group_parent(sandbox: &BubblewrapSandbox) -> PathBuf {
    let report = trellis_backend::Sandbox::report(sandbox);
    let detail = &report.status(LimitKind::TotalMemory).unwrap().detail;
    let start = detail.find(" under ").expect("the report names the parent") + " under ".len();
    PathBuf::from(detail[start..].trim_end_matches(')'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_that_each_stay_under_the_per_process_limit_are_bounded_together() {
    let mut limits = SandboxLimits::default();
    limits.max_total_memory_bytes = 96 << 20;
    let Some(sandbox) = sandbox_with("total memory", limits, LimitKind::TotalMemory) else {
        return;
    };
    // Four processes of 48 MiB each: every one is far under RLIMIT_AS (4 GiB), together they
    // are twice the group's bound.
    let out = run(
        &sandbox,
        "for i in 1 2 3 4; do python3 -c \"import time; x = b'x' * (48 << 20); time.sleep(3); print('lived')\" & done; \
         wait",
    )
    .await;
    assert!(out.out_of_memory, "{out:?}");
    assert!(out.output.matches("lived").count() < 4, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_command_writes_into_its_in_memory_tmp_counts_toward_its_memory() {
    let mut limits = SandboxLimits::default();
    limits.max_total_memory_bytes = 64 << 20;
    // The tmpfs alone would take 1 GiB.
    limits.max_tmp_bytes = 1 << 30;
    let Some(sandbox) = sandbox_with("tmp in memory", limits, LimitKind::TotalMemory) else {
        return;
    };
    let out = run(&sandbox, "head -c 200M /dev/zero > /tmp/fill; echo wrote $?").await;
    assert!(out.out_of_memory, "{out:?}");
    assert!(!out.output.contains("wrote 0"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_loop_gets_no_more_cpu_than_its_share() {
    let mut limits = SandboxLimits::default();
    limits.max_cpu_percent = 20;
    let Some(sandbox) = sandbox_with("cpu", limits, LimitKind::Cpu) else {
        return;
    };
    let out = run(
        &sandbox,
        "python3 -c \"import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass\nprint('cpu', time.process_time())\"",
    )
    .await;
    let cpu: f64 = out
        .output
        .lines()
        .find_map(|l| l.strip_prefix("cpu "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out:?}"));
    // 20% of 1.5 s is 0.3 s (plus start-up); unbounded it would be near 1.5 s.
    assert!(cpu < 0.7, "{cpu} s of CPU in 1.5 s at 20%: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_and_everything_in_it_are_gone_after_the_command() {
    let Some(sandbox) = sandbox_with("group removed", SandboxLimits::default(), LimitKind::TotalMemory)
    else {
        return;
    };
    let parent = group_parent(&sandbox);
    let marker = "2.3456";
    let watch = {
        let parent = parent.clone();
        tokio::task::spawn_blocking(move || {
            // The group whose cgroup.procs holds the command's marked sleep.
            for _ in 0..400 {
                let marked = host_processes(|_, cmdline| cmdline.starts_with("sleep 2.3456"));
                for dir in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
                    let procs = std::fs::read_to_string(dir.path().join("cgroup.procs")).unwrap_or_default();
                    let pids: Vec<&str> = procs.lines().collect();
                    if marked.iter().any(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| pids.contains(&n))
                    }) {
                        return Some(dir.path());
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            None
        })
    };
    let out = run(&sandbox, &format!("sleep {marker} & sleep 1.5; echo started")).await;
    assert!(out.output.contains("started"), "{out:?}");
    let group = watch
        .await
        .unwrap()
        .expect("the command ran in a group under the parent");
    assert!(
        group
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("trellis-{}-", std::process::id())),
        "{group:?}"
    );
    assert!(!group.exists(), "{group:?} is still there");
    assert!(
        host_processes(|_, cmdline| cmdline.starts_with("sleep 2.3456")).is_empty(),
        "the background sleep outlived its command"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_groups_of_a_trellis_that_was_killed_are_removed_by_the_next() {
    let Some(sandbox) = sandbox_with("stale groups", SandboxLimits::default(), LimitKind::TotalMemory) else {
        return;
    };
    let parent = group_parent(&sandbox);
    // What kill -9 leaves: an empty group named for a process that is gone (above any pid_max),
    // beside one of a process that lives (this one), which must stay.
    let stale = parent.join("trellis-999999999-deadbeef");
    let live = parent.join(format!("trellis-{}-0000live", std::process::id()));
    std::fs::create_dir(&stale).unwrap();
    std::fs::create_dir(&live).unwrap();
    let _next = BubblewrapSandbox::new(BubblewrapConfig::default()).unwrap();
    let stale_left = stale.exists();
    let live_left = live.exists();
    let _ = std::fs::remove_dir(&live);
    let _ = std::fs::remove_dir(&stale);
    assert!(!stale_left, "{stale:?} was not removed");
    assert!(live_left, "{live:?} of a live process was removed");
}

#[test]
fn a_configured_parent_that_is_not_a_usable_group_fails_the_sandbox() {
    if bwrap("configured cgroup parent").is_none() {
        return;
    }
    let err = BubblewrapSandbox::new(BubblewrapConfig::default().cgroup_parent("/tmp")).unwrap_err();
    assert!(err.to_string().contains("cgroup parent /tmp"), "{err}");
}
