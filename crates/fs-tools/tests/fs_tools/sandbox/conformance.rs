//! The contract of [`Sandbox`], as every implementation must keep it (see the trait's docs). The
//! cases use relative paths only, so the unsandboxed shell (where `/` is the host's root) runs them
//! too; what only an isolating sandbox guarantees is in `escapes` and `limits`.
//!
//! To check a new sandbox (a hosted one, say), call [`run`] with it and a maker of fresh, empty
//! backends it should run over.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use trellis_backend::sandbox::{
    ExecFiles, ExecRequest, FileChangeKind, NotWrittenReason, Sandbox, SandboxError,
};
use trellis_backend::{Backend, PathFilter, WriteMode};

use super::{background, host_hooks, p, seed, text, write_back_caps};

/// Run every case on `sandbox`, each over a fresh backend from `fresh`.
pub async fn run<F, Fut>(name: &str, sandbox: Arc<dyn Sandbox>, fresh: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Backend>>,
{
    let s = sandbox.as_ref();
    output_and_exit_code(s, fresh().await).await;
    working_directory_is_the_requested_one(s, fresh().await).await;
    environment_is_clean(s, fresh().await).await;
    writes_come_back(s, fresh().await).await;
    a_walk_error_deletes_nothing(s, fresh().await).await;
    read_only_parts_are_never_written_back(s, fresh().await).await;
    a_concurrent_change_is_a_conflict(s, fresh().await).await;
    denied_writes_are_listed_not_written(s, fresh().await).await;
    a_conflict_copy_keeps_the_write_rules(s, fresh().await).await;
    unreadable_files_are_not_materialized(s, fresh().await).await;
    on_reach_mounts_bring_only_named_folders(s, fresh().await).await;
    the_timeout_kills_the_command(s, fresh().await).await;
    long_output_is_cut_and_saved(s, fresh().await).await;
    links_are_never_written_back(s, fresh().await).await;
    bad_requests_are_refused(s, fresh().await).await;
    write_back_caps::many_small_files_stop_at_the_entry_bound(s, fresh().await).await;
    write_back_caps::sparse_files_over_the_byte_bound_are_not_read(s, fresh().await).await;
    write_back_caps::the_time_bound_stops_the_write_back(s, fresh().await).await;
    write_back_caps::unchanged_files_count_toward_no_bound(s, fresh().await).await;
    write_back_caps::the_view_never_outgrows_materialization(s, fresh().await).await;
    background::a_late_background_write_is_never_written_back(s, fresh().await).await;
    host_hooks::git_hooks_config_and_startup_files_are_never_written_back(s, fresh().await).await;
    eprintln!("sandbox conformance passed: {name}");
}

async fn exec(s: &dyn Sandbox, files: &ExecFiles, request: ExecRequest) -> trellis_backend::ExecOutput {
    s.execute(files, &request)
        .await
        .unwrap_or_else(|e| panic!("{}: {:?} failed: {e}", s.name(), request.command))
}

async fn output_and_exit_code(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let out = exec(
        s,
        &ExecFiles::new(b),
        ExecRequest::new("echo to-out; echo to-err >&2; exit 3"),
    )
    .await;
    assert_eq!(out.exit_code, Some(3), "{out:?}");
    assert!(
        out.output.contains("to-out") && out.output.contains("to-err"),
        "{out:?}"
    );
    assert!(!out.truncated && !out.timed_out);
    let ok = exec(
        s,
        &ExecFiles::new(Arc::new(trellis_backend::StateBackend::new())),
        ExecRequest::new("true"),
    )
    .await;
    assert!(ok.succeeded(), "{ok:?}");
}

async fn working_directory_is_the_requested_one(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(b.as_ref(), &[("/docs/notes/a.txt", "alpha")]).await;
    let files = ExecFiles::new(b.clone());
    let out = exec(s, &files, ExecRequest::new("cat a.txt").cwd(p("/docs/notes"))).await;
    assert_eq!(out.output, "alpha", "{out:?}");
    // A missing working directory is created.
    let out = exec(
        s,
        &files,
        ExecRequest::new("echo made > here.txt").cwd(p("/new/dir")),
    )
    .await;
    assert!(out.succeeded(), "{out:?}");
    assert_eq!(
        text(b.as_ref(), "/new/dir/here.txt").await.as_deref(),
        Some("made\n")
    );
}

async fn environment_is_clean(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let out = exec(
        s,
        &ExecFiles::new(b),
        ExecRequest::new("env").env("MY_SETTING", "on"),
    )
    .await;
    let allowed = [
        "PATH",
        "HOME",
        "LANG",
        "TMPDIR",
        "PYTHONDONTWRITEBYTECODE",
        "PWD",
        "SHLVL",
        "OLDPWD",
        "_",
        "MY_SETTING",
    ];
    for line in out.output.lines() {
        let name = line.split('=').next().unwrap_or("");
        assert!(
            allowed.contains(&name),
            "{}: unexpected variable {name} in {out:?}",
            s.name()
        );
    }
    assert!(out.output.contains("MY_SETTING=on"), "{out:?}");
}

async fn writes_come_back(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(
        b.as_ref(),
        &[
            ("/docs/a.txt", "old"),
            ("/docs/b.txt", "doomed"),
            ("/docs/c.txt", "same"),
        ],
    )
    .await;
    let files = ExecFiles::new(b.clone());
    let cmd = "echo new > new.txt && echo changed > ../docs/a.txt && rm ../docs/b.txt && cat ../docs/c.txt > /dev/null";
    let out = exec(s, &files, ExecRequest::new(cmd).cwd(p("/out"))).await;
    assert!(out.succeeded(), "{out:?}");
    let changes: Vec<(String, FileChangeKind)> =
        out.changes.iter().map(|c| (c.path.to_string(), c.kind)).collect();
    assert_eq!(
        changes,
        [
            ("/docs/a.txt".to_owned(), FileChangeKind::Modified),
            ("/docs/b.txt".to_owned(), FileChangeKind::Deleted),
            ("/out/new.txt".to_owned(), FileChangeKind::Created),
        ],
        "{out:?}"
    );
    assert_eq!(
        text(b.as_ref(), "/docs/a.txt").await.as_deref(),
        Some("changed\n")
    );
    assert_eq!(text(b.as_ref(), "/docs/b.txt").await, None);
    assert_eq!(text(b.as_ref(), "/out/new.txt").await.as_deref(), Some("new\n"));
    // A same-size rewrite right away is still seen.
    let out = exec(
        s,
        &files,
        ExecRequest::new("printf new > x && printf NEW > x").cwd(p("/out")),
    )
    .await;
    assert_eq!(
        text(b.as_ref(), "/out/x").await.as_deref(),
        Some("NEW"),
        "{out:?}"
    );
    let out = exec(s, &files, ExecRequest::new("printf OLD > x").cwd(p("/out"))).await;
    assert_eq!(out.changes.len(), 1, "{out:?}");
    assert_eq!(text(b.as_ref(), "/out/x").await.as_deref(), Some("OLD"));
}

async fn read_only_parts_are_never_written_back(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(b.as_ref(), &[("/skills/s/SKILL.md", "skill")]).await;
    let files = ExecFiles::new(b.clone()).read_only(p("/skills"));
    let out = exec(
        s,
        &files,
        ExecRequest::new(
            "cat skills/s/SKILL.md; echo evil > skills/s/SKILL.md; echo more > skills/s/new.txt",
        ),
    )
    .await;
    assert!(out.output.starts_with("skill"), "{out:?}");
    assert_eq!(
        text(b.as_ref(), "/skills/s/SKILL.md").await.as_deref(),
        Some("skill")
    );
    assert_eq!(text(b.as_ref(), "/skills/s/new.txt").await, None);
    assert!(out.changes.is_empty(), "{out:?}");
}

async fn a_concurrent_change_is_a_conflict(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(b.as_ref(), &[("/docs/a.txt", "original")]).await;
    let files = ExecFiles::new(b.clone());
    let request = ExecRequest::new("echo mine > docs/a.txt; sleep 1.5");
    let (out, ()) = tokio::join!(exec(s, &files, request), async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        b.write(&p("/docs/a.txt"), "theirs".into(), WriteMode::Overwrite)
            .await
            .unwrap();
    });
    assert_eq!(
        text(b.as_ref(), "/docs/a.txt").await.as_deref(),
        Some("theirs"),
        "{out:?}"
    );
    assert_eq!(out.not_written.len(), 1, "{out:?}");
    let NotWrittenReason::Conflict { kept_at: Some(kept) } = &out.not_written[0].reason else {
        panic!("expected a conflict with a kept copy: {out:?}");
    };
    assert!(kept.as_str().starts_with("/docs/a.txt.conflict-"), "{kept}");
    assert_eq!(text(b.as_ref(), kept.as_str()).await.as_deref(), Some("mine\n"));
    assert!(!out.succeeded());
}

/// The copy kept beside a conflicting file is a write like any other: where the rules do not let
/// the agent write it, it is not kept (review F11).
async fn a_conflict_copy_keeps_the_write_rules(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(b.as_ref(), &[("/notes/a.md", "original")]).await;
    let files = ExecFiles::new(b.clone()).writable(PathFilter::new(|path| path.as_str().ends_with(".md")));
    let request = ExecRequest::new("echo mine > notes/a.md; sleep 1.5");
    let (out, ()) = tokio::join!(exec(s, &files, request), async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        b.write(&p("/notes/a.md"), "theirs".into(), WriteMode::Overwrite)
            .await
            .unwrap();
    });
    assert_eq!(
        text(b.as_ref(), "/notes/a.md").await.as_deref(),
        Some("theirs"),
        "{out:?}"
    );
    assert_eq!(
        out.not_written
            .iter()
            .map(|n| (n.path.as_str(), &n.reason))
            .collect::<Vec<_>>(),
        [("/notes/a.md", &NotWrittenReason::Conflict { kept_at: None })],
        "{}: {out:?}",
        s.name()
    );
    let listed = b.ls(&p("/notes")).await.unwrap();
    assert_eq!(listed.len(), 1, "a conflict copy was kept: {listed:?}");
}

async fn denied_writes_are_listed_not_written(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let files =
        ExecFiles::new(b.clone()).writable(PathFilter::new(|path| !path.as_str().starts_with("/locked")));
    let out = exec(
        s,
        &files,
        ExecRequest::new("mkdir -p locked && echo x > locked/y && echo ok > fine"),
    )
    .await;
    assert_eq!(text(b.as_ref(), "/locked/y").await, None);
    assert_eq!(text(b.as_ref(), "/fine").await.as_deref(), Some("ok\n"));
    assert_eq!(out.not_written.len(), 1, "{out:?}");
    assert_eq!(out.not_written[0].path, "/locked/y");
    assert_eq!(out.not_written[0].reason, NotWrittenReason::Denied);
}

async fn unreadable_files_are_not_materialized(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(
        b.as_ref(),
        &[("/private/key.txt", "SECRET-42"), ("/public/a.txt", "hello")],
    )
    .await;
    let files =
        ExecFiles::new(b.clone()).readable(PathFilter::new(|path| !path.as_str().starts_with("/private")));
    let out = exec(
        s,
        &files,
        ExecRequest::new("cat public/a.txt; cat private/key.txt; ls private"),
    )
    .await;
    assert!(out.output.contains("hello"), "{out:?}");
    assert!(!out.output.contains("SECRET-42"), "{out:?}");
    // And nothing is deleted for not having been copied.
    assert_eq!(
        text(b.as_ref(), "/private/key.txt").await.as_deref(),
        Some("SECRET-42")
    );
}

async fn on_reach_mounts_bring_only_named_folders(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(
        b.as_ref(),
        &[
            ("/skills/team/pdf/SKILL.md", "pdf skill"),
            ("/skills/team/pdf/scripts/run.sh", "echo running pdf"),
            ("/skills/team/docx/SKILL.md", "docx skill"),
        ],
    )
    .await;
    let files = ExecFiles::new(b.clone()).read_only_on_reach(p("/skills/team"));
    let out = exec(
        s,
        &files,
        ExecRequest::new("sh skills/team/pdf/scripts/run.sh && ls skills/team"),
    )
    .await;
    assert!(out.succeeded(), "{out:?}");
    assert!(out.output.contains("running pdf"), "{out:?}");
    assert!(
        out.output.contains("pdf") && !out.output.contains("docx"),
        "{out:?}"
    );
    // Scripts of read-only skills are executable.
    let out = exec(
        s,
        &files,
        ExecRequest::new("test -x scripts/run.sh").cwd(p("/skills/team/pdf")),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
}

async fn the_timeout_kills_the_command(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let started = std::time::Instant::now();
    let out = exec(
        s,
        &ExecFiles::new(b),
        ExecRequest::new("echo before; sleep 30; echo after").timeout(Duration::from_secs(1)),
    )
    .await;
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert!(
        out.output.contains("before") && !out.output.contains("after"),
        "{out:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

async fn long_output_is_cut_and_saved(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let request = ExecRequest::new("seq 1 200000").full_output_path(p("/large_tool_results/exec-1.txt"));
    let out = exec(s, &ExecFiles::new(b.clone()), request).await;
    assert!(out.truncated, "{}", out.output.len());
    assert!(out.output.len() < 40 * 1024, "{}", out.output.len());
    assert!(out.output.starts_with("1\n2\n3\n"), "{}", &out.output[..20]);
    assert!(out.output.ends_with("199999\n200000\n"));
    assert!(out.output.contains("/large_tool_results/exec-1.txt"));
    assert_eq!(out.full_output_path, Some(p("/large_tool_results/exec-1.txt")));
    let whole = text(b.as_ref(), "/large_tool_results/exec-1.txt").await.unwrap();
    assert_eq!(whole.lines().count(), 200_000);
    assert_eq!(out.output_bytes, whole.len() as u64);
}

async fn links_are_never_written_back(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let out = exec(
        s,
        &ExecFiles::new(b.clone()),
        ExecRequest::new("ln -s /etc/passwd link && mkfifo pipe"),
    )
    .await;
    assert_eq!(text(b.as_ref(), "/link").await, None);
    let reasons: Vec<(&str, &NotWrittenReason)> = out
        .not_written
        .iter()
        .map(|n| (n.path.as_str(), &n.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            ("/link", &NotWrittenReason::NotARegularFile),
            ("/pipe", &NotWrittenReason::NotARegularFile)
        ],
        "{out:?}"
    );
}

/// A part of the copy the write-back cannot walk is an error, never a deletion (review F4): a
/// directory the command made unreadable (`chmod 000`, which stops a walk by a non-root Trellis),
/// and one moved to a path longer than a virtual path may be (which stops a root one too).
async fn a_walk_error_deletes_nothing(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(
        b.as_ref(),
        &[("/w/a.txt", "keep me"), ("/v/b.txt", "keep me too")],
    )
    .await;
    let files = ExecFiles::new(b.clone());
    let out = exec(s, &files, ExecRequest::new("chmod 000 w")).await;
    assert_eq!(
        text(b.as_ref(), "/w/a.txt").await.as_deref(),
        Some("keep me"),
        "{}: {out:?}",
        s.name()
    );
    assert!(
        !out.changes.iter().any(|c| c.kind == FileChangeKind::Deleted),
        "{out:?}"
    );
    let walk_stopped = |out: &trellis_backend::ExecOutput| {
        out.not_written
            .iter()
            .any(|n| matches!(n.reason, NotWrittenReason::Failed(_)))
    };
    if rustix::process::geteuid().is_root() {
        // Root reads the directory anyway: nothing failed, nothing changed.
        assert!(out.not_written.is_empty() || walk_stopped(&out), "{out:?}");
    } else {
        assert!(walk_stopped(&out), "{out:?}");
    }
    // b.txt moved 24 levels of 200-character names down, built by renames (no long path is
    // ever used inside): its path is past the 4,096 bytes of a virtual path (and its host path
    // past PATH_MAX).
    let deep = "d=$(printf 'd%.0s' $(seq 200)); mkdir $d && mv b.txt $d/ && \
                for i in $(seq 23); do mkdir n && mv $d n/ && mv n $d || exit 1; done";
    let out = exec(s, &files, ExecRequest::new(deep).cwd(p("/v"))).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(
        text(b.as_ref(), "/v/b.txt").await.as_deref(),
        Some("keep me too"),
        "{}: {out:?}",
        s.name()
    );
    assert!(walk_stopped(&out), "{out:?}");
    assert!(!out.succeeded(), "{out:?}");
}

async fn bad_requests_are_refused(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let files = ExecFiles::new(b);
    for request in [
        ExecRequest::new("  "),
        ExecRequest::new("true").env("BAD NAME", "x"),
        // Variables the dynamic loader or the C library act on would reach the host-side helpers
        // (prlimit, bwrap) too (review F12).
        ExecRequest::new("true").env("LD_PRELOAD", "./x.so"),
        ExecRequest::new("true").env("LD_LIBRARY_PATH", "."),
        ExecRequest::new("true").env("LD_AUDIT", "./x.so"),
        ExecRequest::new("true").env("GCONV_PATH", "."),
        ExecRequest::new("true").env("GLIBC_TUNABLES", "glibc.malloc.check=3"),
        ExecRequest::new("true").cwd(p("/proc/1")),
    ] {
        match s.execute(&files, &request).await {
            Err(SandboxError::InvalidRequest(_)) => {}
            other => panic!("{}: {request:?} gave {other:?}", s.name()),
        }
    }
}
