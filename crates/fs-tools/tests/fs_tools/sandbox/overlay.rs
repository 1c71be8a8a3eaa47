//! Local directories exposed through overlays (issue #33 item 1): a user's workspace on local disk,
//! owned by the commands' user, is mounted at `/workspace` instead of copied, and what the command
//! changed comes back from the overlay's upper layer with the copy's rules. Each test checks the
//! mount is an overlay (`/proc/self/mountinfo`), so none passes by falling back to the copy.
//!
//! As root (CI), commands run as `nobody`: the workspaces here are handed to it, as a user would
//! own their own `--workdir`. A host where overlays do not work skips these tests, saying so,
//! unless `TRELLIS_SANDBOX=required` (then they fail).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use trellis_backend::sandbox::{
    ExecFiles, ExecOutput, ExecRequest, FileChangeKind, NotWrittenReason, WriteBackLimits,
};
use trellis_backend::{Backend, CompositeBackend, FilesystemBackend, PathFilter, Sandbox};
use trellis_fs_tools::sandbox::BubblewrapSandbox;

use super::{bwrap, p, state};

/// Proves `/workspace` is an overlay mount, or says so.
const IS_OVERLAY: &str = "grep -q ' /workspace [^ ]*.* - overlay ' /proc/self/mountinfo || { echo NOT-AN-OVERLAY; cat /proc/self/mountinfo; exit 99; }";

/// The shared sandbox (when overlays work here) and a workspace holding `files`, handed to the
/// commands' user, in a thread's view (see [`workspace`]).
fn given(
    test: &str,
    files: &[(&str, &str)],
) -> Option<(Arc<BubblewrapSandbox>, tempfile::TempDir, Arc<dyn Backend>)> {
    let sandbox = sandbox(test)?;
    let (dir, view) = workspace(files, sandbox.runs_as().uid);
    Some((sandbox, dir, view))
}

/// A workspace directory holding `files`, handed to `uid`, and the thread's view with it at
/// `/workspace` (the thread's own files in memory at `/`).
fn workspace(files: &[(&str, &str)], uid: u32) -> (tempfile::TempDir, Arc<dyn Backend>) {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let host = dir.path().join(path);
        std::fs::create_dir_all(host.parent().unwrap()).unwrap();
        std::fs::write(host, content).unwrap();
    }
    chown_tree(dir.path(), uid);
    let view = view_of(&dir);
    (dir, view)
}

/// A thread's view with `dir` at `/workspace`.
fn view_of(dir: &tempfile::TempDir) -> Arc<dyn Backend> {
    let view = CompositeBackend::new(state())
        .mount(
            "/workspace",
            Arc::new(FilesystemBackend::new(dir.path()).unwrap()),
        )
        .unwrap();
    Arc::new(view)
}

fn chown_tree(dir: &Path, uid: u32) {
    if rustix::process::geteuid().as_raw() != 0 {
        return;
    }
    std::os::unix::fs::lchown(dir, Some(uid), Some(uid)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_type().unwrap().is_dir() {
            chown_tree(&entry.path(), uid);
        } else {
            std::os::unix::fs::lchown(entry.path(), Some(uid), Some(uid)).unwrap();
        }
    }
}

async fn run(sandbox: &BubblewrapSandbox, files: &ExecFiles, command: &str) -> ExecOutput {
    let request = ExecRequest::new(command)
        .cwd(p("/workspace"))
        .timeout(Duration::from_secs(30));
    sandbox.execute(files, &request).await.unwrap()
}

fn read(dir: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(path)).ok()
}

fn sandbox(test: &str) -> Option<Arc<BubblewrapSandbox>> {
    let sandbox = bwrap(test)?;
    let filesystem = sandbox
        .report()
        .limits
        .into_iter()
        .find(|l| l.kind == trellis_backend::sandbox::LimitKind::Filesystem)
        .unwrap();
    if filesystem.detail.contains("mounted through an overlay") {
        return Some(sandbox);
    }
    // `cargo xtask test` sets TRELLIS_SANDBOX=required: there a host without overlays fails.
    assert_ne!(
        std::env::var("TRELLIS_SANDBOX").as_deref(),
        Ok("required"),
        "{test}: no overlays on this host: {}",
        filesystem.detail
    );
    eprintln!("skipped: {test} (no overlays here: {})", filesystem.detail);
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_of_the_commands_user_is_mounted_and_its_writes_come_back() {
    let Some((sandbox, dir, view)) = given(
        "overlay writes",
        &[("a.txt", "alpha\n"), ("src/lib.rs", "fn x() {}\n")],
    ) else {
        return;
    };
    let out = run(
        &sandbox,
        &ExecFiles::new(view.clone()),
        &format!(
            "{IS_OVERLAY}; cat a.txt src/lib.rs && echo new > new.txt && echo more >> a.txt && mkdir -p deep/er && echo d > deep/er/f"
        ),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(
        out.output.contains("alpha") && out.output.contains("fn x()"),
        "{out:?}"
    );
    assert_eq!(read(dir.path(), "new.txt").as_deref(), Some("new\n"));
    assert_eq!(read(dir.path(), "a.txt").as_deref(), Some("alpha\nmore\n"));
    assert_eq!(read(dir.path(), "deep/er/f").as_deref(), Some("d\n"));
    let kinds: Vec<(&str, FileChangeKind)> = out.changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            ("/workspace/a.txt", FileChangeKind::Modified),
            ("/workspace/deep/er/f", FileChangeKind::Created),
            ("/workspace/new.txt", FileChangeKind::Created),
        ],
        "{out:?}"
    );
    assert!(out.not_written.is_empty(), "{out:?}");
    // What the write-back made is the commands' user's, as its copy was: the next command
    // changes it in place, in the directories the write-back made too.
    for made in ["new.txt", "deep", "deep/er", "deep/er/f"] {
        assert_eq!(
            std::fs::metadata(dir.path().join(made)).unwrap().uid(),
            sandbox.runs_as().uid,
            "{made}"
        );
    }
    let files = ExecFiles::new(view_of(&dir));
    let again = run(
        &sandbox,
        &files,
        &format!("{IS_OVERLAY}; echo again >> new.txt && echo g > deep/er/g"),
    )
    .await;
    assert_eq!(again.exit_code, Some(0), "{again:?}");
    assert_eq!(read(dir.path(), "new.txt").as_deref(), Some("new\nagain\n"));
    assert_eq!(read(dir.path(), "deep/er/g").as_deref(), Some("g\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletions_come_back_from_whiteouts_and_opaque_directories() {
    let Some((sandbox, dir, view)) = given(
        "overlay deletions",
        &[
            ("gone.txt", "1"),
            ("tree/a", "a"),
            ("tree/sub/b", "b"),
            ("redo/old", "old"),
            ("redo/kept", "k"),
            ("stay.txt", "s"),
        ],
    ) else {
        return;
    };
    let out = run(
        &sandbox,
        &ExecFiles::new(view),
        &format!("{IS_OVERLAY}; rm gone.txt && rm -r tree && rm -r redo && mkdir redo && echo again > redo/kept && echo n > redo/new"),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    for gone in ["gone.txt", "tree/a", "tree/sub/b", "redo/old"] {
        assert_eq!(read(dir.path(), gone), None, "{gone}: {out:?}");
    }
    assert_eq!(read(dir.path(), "redo/kept").as_deref(), Some("again\n"));
    assert_eq!(read(dir.path(), "redo/new").as_deref(), Some("n\n"));
    assert_eq!(read(dir.path(), "stay.txt").as_deref(), Some("s"));
    let deleted: Vec<&str> = out
        .changes
        .iter()
        .filter(|c| c.kind == FileChangeKind::Deleted)
        .map(|c| c.path.as_str())
        .collect();
    assert_eq!(
        deleted,
        vec![
            "/workspace/gone.txt",
            "/workspace/redo/old",
            "/workspace/tree/a",
            "/workspace/tree/sub/b"
        ],
        "{out:?}"
    );
    assert!(out.not_written.is_empty(), "{out:?}");
}

/// Someone changes a file outside Trellis while the command changes it too, keeping its size and
/// putting its modification time back (the backend's version tag is both): the store's file stays,
/// the command's version is kept beside it. On the copy this was an overwrite: the tag the copy
/// recorded still matched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_underneath_is_a_conflict_even_with_the_same_version_tag() {
    let Some((sandbox, dir, view)) = given("overlay conflict", &[("a.txt", "base\n"), ("b.txt", "base\n")])
    else {
        return;
    };
    let host = dir.path().join("a.txt");
    let before = std::fs::metadata(&host).unwrap().modified().unwrap();
    let files = ExecFiles::new(view);
    let command = format!("{IS_OVERLAY}; echo mine > a.txt; echo mine > b.txt; sleep 1.5");
    let running = run(&sandbox, &files, &command);
    let outside = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        std::fs::write(&host, "them\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&host)
            .unwrap()
            .set_modified(before)
            .unwrap();
    };
    let (out, ()) = tokio::join!(running, outside);
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(read(dir.path(), "a.txt").as_deref(), Some("them\n"), "{out:?}");
    let kept = out
        .not_written
        .iter()
        .find_map(|n| match &n.reason {
            NotWrittenReason::Conflict { kept_at: Some(at) } if n.path == "/workspace/a.txt" => {
                Some(at.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no conflict for a.txt: {out:?}"));
    let kept = kept.as_str().trim_start_matches("/workspace/");
    assert_eq!(read(dir.path(), kept).as_deref(), Some("mine\n"));
    // The file nobody else touched was written.
    assert_eq!(read(dir.path(), "b.txt").as_deref(), Some("mine\n"));
}

/// Git hooks and config and start-up files of the mounted workspace are read-only inside (the
/// copy let the command change them and refused them only at write-back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_files_are_not_writable_from_inside() {
    let Some((sandbox, dir, view)) = given(
        "overlay protected files",
        &[
            (".git/config", "[core]\n"),
            (".git/hooks/pre-commit.sample", "#!/bin/sh\n"),
            (".git/HEAD", "ref: refs/heads/main\n"),
            (".bashrc", "# rc\n"),
            (".vscode/tasks.json", "{}\n"),
        ],
    ) else {
        return;
    };
    let out = run(
        &sandbox,
        &ExecFiles::new(view),
        &format!(
            "{IS_OVERLAY}; for f in .git/config .bashrc .vscode/tasks.json .git/hooks/post-checkout; do \
             if (echo evil >> $f) 2>/dev/null; then echo WROTE $f; fi; done; \
             rm -f .git/config 2>/dev/null && echo REMOVED; \
             echo 'ref: refs/heads/other' > .git/HEAD"
        ),
    )
    .await;
    assert!(
        !out.output.contains("WROTE") && !out.output.contains("REMOVED"),
        "{out:?}"
    );
    assert!(!out.output.contains("NOT-AN-OVERLAY"), "{out:?}");
    assert_eq!(read(dir.path(), ".git/config").as_deref(), Some("[core]\n"));
    assert_eq!(read(dir.path(), ".bashrc").as_deref(), Some("# rc\n"));
    assert_eq!(read(dir.path(), ".vscode/tasks.json").as_deref(), Some("{}\n"));
    assert_eq!(read(dir.path(), ".git/hooks/post-checkout"), None);
    // The rest of the repository is the command's to change.
    assert_eq!(
        read(dir.path(), ".git/HEAD").as_deref(),
        Some("ref: refs/heads/other\n")
    );
}

/// A path the rules do not let the agent write is refused at write-back (a glob cannot be turned
/// into mounts), and a planted link is never followed nor written back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_paths_and_planted_links_are_refused_at_write_back() {
    let Some((sandbox, dir, view)) = given(
        "overlay denied and links",
        &[("a.txt", "a\n"), ("secret/x", "x\n")],
    ) else {
        return;
    };
    let files = ExecFiles::new(view).writable(PathFilter::new(|p| {
        !p.starts_with(&super::p("/workspace/secret"))
    }));
    let out = run(
        &sandbox,
        &files,
        &format!("{IS_OVERLAY}; echo y > secret/y; echo changed > secret/x; ln -s /etc/passwd link; rm a.txt; ln -s /etc/passwd a.txt"),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(read(dir.path(), "secret/y"), None);
    assert_eq!(read(dir.path(), "secret/x").as_deref(), Some("x\n"));
    assert!(std::fs::symlink_metadata(dir.path().join("link")).is_err());
    assert_eq!(read(dir.path(), "a.txt").as_deref(), Some("a\n"), "{out:?}");
    let reasons: Vec<(&str, &NotWrittenReason)> = out
        .not_written
        .iter()
        .map(|n| (n.path.as_str(), &n.reason))
        .collect();
    for (path, reason) in [
        ("/workspace/secret/y", NotWrittenReason::Denied),
        ("/workspace/secret/x", NotWrittenReason::Denied),
        ("/workspace/link", NotWrittenReason::NotARegularFile),
        ("/workspace/a.txt", NotWrittenReason::NotARegularFile),
    ] {
        assert!(reasons.contains(&(path, &reason)), "{path}: {out:?}");
    }
}

/// The write-back's entry bound holds for the upper layer: past it the walk stops, what it did
/// not reach is not written, and nothing is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_back_caps_hold_for_the_upper_layer() {
    let Some((sandbox, dir, view)) = given("overlay caps", &[("keep.txt", "k\n")]) else {
        return;
    };
    let mut files = ExecFiles::new(view);
    files.write_back = WriteBackLimits {
        max_files: 20,
        ..WriteBackLimits::default()
    };
    let out = run(
        &sandbox,
        &files,
        &format!(
            "{IS_OVERLAY}; mkdir many && for i in $(seq 1 100); do echo $i > many/$i; done; rm keep.txt"
        ),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let written = std::fs::read_dir(dir.path().join("many")).map_or(0, |d| d.count());
    assert!(written < 20, "{written} files written past a bound of 20");
    assert_eq!(read(dir.path(), "keep.txt").as_deref(), Some("k\n"), "{out:?}");
    assert!(
        out.not_written
            .iter()
            .any(|n| matches!(n.reason, NotWrittenReason::TooLarge(_))),
        "{out:?}"
    );
}

/// A workspace another user owns, and any view while a rule limits reads, is copied (and still
/// works); the report says which exposure gets which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_owners_and_read_rules_get_the_copy() {
    let Some(sandbox) = sandbox("overlay fallbacks") else {
        return;
    };
    let uid = sandbox.runs_as().uid;
    let probe = "grep -q ' /workspace [^ ]*.* - overlay ' /proc/self/mountinfo && echo OVERLAY || echo COPY";
    let (dir, view) = workspace(&[("a.txt", "a\n"), ("hidden.txt", "h\n")], uid);
    let files = ExecFiles::new(view).readable(PathFilter::new(|p| !p.as_str().ends_with("hidden.txt")));
    let out = run(
        &sandbox,
        &files,
        &format!("{probe}; cat hidden.txt; echo w > w.txt"),
    )
    .await;
    assert!(
        out.output.contains("COPY") && !out.output.contains("h\n"),
        "{out:?}"
    );
    assert_eq!(read(dir.path(), "w.txt").as_deref(), Some("w\n"));
    if rustix::process::geteuid().as_raw() == 0 {
        // As root, a workspace root owns: nobody could not change its files through an overlay.
        let (dir, view) = workspace(&[("a.txt", "a\n")], 0);
        let out = run(
            &sandbox,
            &ExecFiles::new(view),
            &format!("{probe}; echo more >> a.txt"),
        )
        .await;
        assert!(out.output.contains("COPY"), "{out:?}");
        assert_eq!(read(dir.path(), "a.txt").as_deref(), Some("a\nmore\n"), "{out:?}");
    }
}

/// A cancelled command over an overlay leaves no process behind either (the wrapper `exec`s into
/// `bwrap`, which is what is killed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_command_over_an_overlay_leaves_no_process_behind() {
    let Some((sandbox, _dir, view)) = given("overlay cancelled", &[("a.txt", "a\n")]) else {
        return;
    };
    let marker = "2.7182818";
    let command = format!("{IS_OVERLAY}; (while :; do sleep {marker}; done) & sleep {marker}; sleep 30");
    let files = ExecFiles::new(view);
    super::anchors::cancelled_after_3_s_leaves_nothing(run(&sandbox, &files, &command), marker).await;
}

/// A directory whose overlay cannot be mounted (here: the commands' user owns it, but cannot
/// reach it through its root-only parent) is copied instead, still sandboxed: the command runs
/// once, its writes come back, the report names the directory and why, and later commands copy it
/// without trying again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlay_that_cannot_be_mounted_falls_back_to_the_copy() {
    let Some(sandbox) = sandbox("overlay mount failure") else {
        return;
    };
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!(
            "skipped: overlay mount failure (needs root to make a parent the commands' user cannot enter)"
        );
        return;
    }
    let uid = sandbox.runs_as().uid;
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let dir = parent.path().join("ws");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("log"), "start\n").unwrap();
    chown_tree(&dir, uid);
    let view: Arc<dyn Backend> = Arc::new(
        CompositeBackend::new(state())
            .mount("/workspace", Arc::new(FilesystemBackend::new(&dir).unwrap()))
            .unwrap(),
    );
    let files = ExecFiles::new(view);
    let probe = "grep -q ' /workspace [^ ]*.* - overlay ' /proc/self/mountinfo && echo OVERLAY || echo COPY";
    for round in ["one", "two"] {
        let out = run(&sandbox, &files, &format!("{probe}; echo {round} >> log")).await;
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        assert_eq!(out.output.trim(), "COPY", "{out:?}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("log")).unwrap(),
        "start\none\ntwo\n"
    );
    let filesystem = sandbox
        .report()
        .limits
        .into_iter()
        .find(|l| l.kind == trellis_backend::sandbox::LimitKind::Filesystem)
        .unwrap();
    let canonical = std::fs::canonicalize(&dir).unwrap();
    assert!(
        filesystem.detail.contains(&format!(
            "{} is copied for each command: its overlay could not be mounted",
            canonical.display()
        )),
        "{}",
        filesystem.detail
    );
}
