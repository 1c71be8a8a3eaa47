//! `trellis run` keeps each thread's files with the thread (issue 17), end to end through the
//! binary: a new process resuming a thread finds the files it wrote, another thread does not,
//! `--workdir` is the user's workspace shared by their threads, and `trellis threads list | show |
//! delete` see and remove what a thread kept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use wiremock::MockServer;

use super::harness::{TrellisRun, calls_then_done, messages, reply, result_text, trellis};

/// What thread alpha writes to `/notes/a.txt`.
const NOTE: &str = "remember the milk\n";

/// `trellis run --approve all --model anthropic:… --state-dir STATE`, to be completed by the
/// caller.
fn trellis_run(state: &Path) -> TrellisRun {
    TrellisRun::new().approve_all().state_dir(state)
}

fn write(file_path: &str, content: &str) -> (&'static str, Value) {
    ("write_file", json!({"file_path": file_path, "content": content}))
}

fn read(file_path: &str) -> (&'static str, Value) {
    ("read_file", json!({"file_path": file_path}))
}

/// One `trellis run` (a new process) in `thread`, whose model makes `calls` in one step and then
/// answers. Returns the `tool_result` blocks the model got back, in the order of `calls`.
async fn run_calling(
    state: &Path,
    workdir: Option<&Path>,
    thread: &str,
    calls: Vec<(&'static str, Value)>,
) -> Vec<Value> {
    static NEXT_ID: AtomicUsize = AtomicUsize::new(1);
    let uses: Vec<Value> = calls
        .iter()
        .map(|(name, input)| {
            let id = format!("toolu_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        })
        .collect();
    let server = calls_then_done(uses).await;
    let mut run = trellis_run(state).args(["--thread", thread]);
    if let Some(dir) = workdir {
        run = run.arg("--workdir").arg(dir);
    }
    let output = run
        .arg(format!("Work on {thread}"))
        .anthropic(&server)
        .output()
        .await;
    succeeded(&output);
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2, "one tool round, then the answer");
    let body: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let last = body["messages"].as_array().unwrap().last().unwrap();
    let results: Vec<Value> = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|block| block["type"] == "tool_result")
        .cloned()
        .collect();
    assert_eq!(results.len(), calls.len(), "one result per call: {last}");
    results
}

/// The text of a result that is not an error.
fn ok_text(result: &Value) -> String {
    assert_ne!(result["is_error"], true, "{result}");
    result_text(result)
}

fn assert_not_found(result: &Value) {
    assert_eq!(result["is_error"], true, "{result}");
    assert!(result_text(result).contains("not found"), "{result}");
}

/// Thread alpha writes `/notes/a.txt`; a second process resumes alpha and reads it; thread beta
/// reads it too. Returns (alpha's read, beta's read).
async fn alpha_writes_then_alpha_and_beta_read(state: &Path) -> (Value, Value) {
    let wrote = run_calling(state, None, "alpha", vec![write("/notes/a.txt", NOTE)]).await;
    ok_text(&wrote[0]);
    let alpha = run_calling(state, None, "alpha", vec![read("/notes/a.txt")]).await;
    let beta = run_calling(state, None, "beta", vec![read("/notes/a.txt")]).await;
    (alpha[0].clone(), beta[0].clone())
}

/// `trellis threads --state-dir STATE ARGS…`.
fn threads(state: &Path, args: &[&str]) -> Output {
    trellis()
        .arg("threads")
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .output()
        .unwrap()
}

/// The stdout of a command that succeeded.
fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// The stderr of a command that failed.
fn failed(output: &Output) -> String {
    assert!(
        !output.status.success(),
        "succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// Every file below `dir` (none when `dir` is gone).
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .map(|entry| entry.unwrap().path())
        .flat_map(|p| if p.is_dir() { files_below(&p) } else { vec![p] })
        .collect()
}

/// The headline bug: a second `trellis run --thread alpha` (a new process, no `--workdir`) reads
/// back the file the first one wrote, which is on disk beside alpha's checkpoints; thread beta of
/// the same state dir does not see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_thread_finds_its_files_and_another_thread_does_not() {
    let state = tempfile::tempdir().unwrap();
    let (alpha, beta) = alpha_writes_then_alpha_and_beta_read(state.path()).await;
    let text = ok_text(&alpha);
    assert!(
        text.contains(NOTE.trim_end()),
        "the second process read the file back: {text}"
    );
    let on_disk = state.path().join("threads/alpha/files/notes/a.txt");
    assert_eq!(std::fs::read_to_string(&on_disk).unwrap(), NOTE);
    assert_not_found(&beta);
    assert!(
        files_below(&state.path().join("threads/beta/files")).is_empty(),
        "beta wrote nothing"
    );
}

/// `trellis threads list | show | delete` on the threads of the test above; ids that are not a
/// path segment are refused, naming the id, and touch nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_list_show_and_delete_what_runs_kept() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    alpha_writes_then_alpha_and_beta_read(s).await;
    assert_eq!(succeeded(&threads(s, &["list"])), "alpha\nbeta\n");

    let shown = succeeded(&threads(s, &["show", "alpha"]));
    let lines: Vec<&str> = shown.lines().collect();
    let briefs = [
        "  user: Work on alpha",
        "  assistant: calls write_file",
        "  tool: ",
        "  assistant: done",
        "  user: Work on alpha",
        "  assistant: calls read_file",
        "  tool: ",
        "  assistant: done",
    ];
    assert_eq!(lines.len(), 1 + briefs.len() + 2, "{shown}");
    assert_eq!(lines[0], format!("thread alpha: {} messages", briefs.len()));
    for (line, brief) in lines[1..].iter().zip(briefs) {
        assert!(line.starts_with(brief), "{line:?} is not {brief:?}…:\n{shown}");
    }
    assert_eq!(
        lines[1 + briefs.len()..],
        ["files: 1", &format!("  /notes/a.txt ({} bytes)", NOTE.len())],
        "{shown}"
    );

    // A directory an escaping id would name, with a checkpoint and a file in it.
    let outside = s.join("x");
    std::fs::create_dir_all(outside.join("files")).unwrap();
    std::fs::copy(s.join("threads/beta/steps.log"), outside.join("steps.log")).unwrap();
    std::fs::write(outside.join("files/keep.txt"), "keep").unwrap();
    for command in ["show", "delete"] {
        let refused = failed(&threads(s, &[command, "../x"]));
        assert!(refused.contains("../x"), "{command}: {refused}");
    }
    assert_eq!(files_below(&outside).len(), 2, "a refused id deleted nothing");

    assert_eq!(
        succeeded(&threads(s, &["delete", "alpha"])).trim(),
        "deleted thread alpha"
    );
    assert_eq!(succeeded(&threads(s, &["list"])), "beta\n");
    let gone = failed(&threads(s, &["show", "alpha"]));
    assert!(gone.contains("no thread alpha"), "{gone}");
    assert_eq!(files_below(&s.join("threads/alpha")), Vec::<PathBuf>::new());
    let beta = succeeded(&threads(s, &["show", "beta"]));
    assert!(beta.starts_with("thread beta: 4 messages\n"), "{beta}");
    assert!(
        beta.lines()
            .any(|l| l.starts_with("  tool (error): ") && l.contains("file not found")),
        "{beta}"
    );
}

/// With `--workdir W`, `/workspace` is W and is shared by the user's threads; the rest of a
/// thread's files stay its own (in the state dir, not in W).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workdir_is_the_workspace_every_thread_shares() {
    let state = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let (s, w) = (state.path(), Some(work.path()));
    let wrote = run_calling(
        s,
        w,
        "one",
        vec![
            write("/workspace/report.md", "# Q3\n"),
            write("/report.md", "scratch\n"),
        ],
    )
    .await;
    for result in &wrote {
        ok_text(result);
    }
    assert_eq!(
        std::fs::read_to_string(work.path().join("report.md")).unwrap(),
        "# Q3\n"
    );
    assert_eq!(
        std::fs::read_to_string(s.join("threads/one/files/report.md")).unwrap(),
        "scratch\n"
    );
    assert_eq!(
        files_below(work.path()).len(),
        1,
        "only the workspace file is in W"
    );
    assert_eq!(
        files_below(&s.join("threads/one/files")).len(),
        1,
        "the workspace file is not copied into the thread's files"
    );

    let got = run_calling(
        s,
        w,
        "two",
        vec![read("/workspace/report.md"), read("/report.md")],
    )
    .await;
    let text = ok_text(&got[0]);
    assert!(
        text.contains("# Q3"),
        "thread two reads the user's workspace: {text}"
    );
    assert_not_found(&got[1]);
}

/// `trellis threads history` lists a thread's checkpoints; `trellis run --fork ID@STEP` starts a
/// new thread from one of them (the model sees the conversation as it was at that step) with a copy
/// of the thread's files, and leaves the source thread as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_lists_checkpoints_and_fork_starts_a_new_thread_from_one() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    ok_text(&run_calling(s, None, "alpha", vec![write("/notes/a.txt", NOTE)]).await[0]);
    let history = succeeded(&threads(s, &["history", "alpha"]));
    let lines: Vec<&str> = history.lines().collect();
    assert!(lines.len() >= 4, "{history}");
    let seqs: Vec<u64> = lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs, (0..lines.len() as u64).collect::<Vec<_>>(), "{history}");
    assert!(lines[0].contains("user: Work on alpha"), "{history}");
    assert!(
        lines.iter().any(|l| l.contains("assistant: calls write_file")),
        "{history}"
    );
    let after_tools = lines
        .iter()
        .position(|l| l.contains("tool results: 1"))
        .unwrap_or_else(|| panic!("{history}"));
    assert!(lines.last().unwrap().contains("assistant: done"), "{history}");
    let missing = failed(&threads(s, &["history", "nobody"]));
    assert!(missing.contains("no thread nobody"), "{missing}");

    let server = MockServer::start().await;
    messages()
        .respond_with(reply(
            json!([{"type": "text", "text": "forked answer"}]),
            "end_turn",
        ))
        .mount(&server)
        .await;
    let output = trellis_run(s)
        .args(["--fork", &format!("alpha@{after_tools}"), "try again"])
        .anthropic(&server)
        .output()
        .await;
    succeeded(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let forked_line = stderr
        .lines()
        .find(|l| l.starts_with(&format!("forked alpha@{after_tools} as thread ")))
        .unwrap_or_else(|| panic!("{stderr}"));
    let fork = forked_line.rsplit(' ').next().unwrap().to_owned();
    let requests = server.received_requests().await.unwrap();
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    let sent = body["messages"].as_array().unwrap();
    // The task, the call, then one user turn: the call's result and the new task.
    assert_eq!(
        sent.len(),
        3,
        "the conversation at the step, then the new task: {body}"
    );
    assert!(sent[1].to_string().contains("write_file"), "{body}");
    let last = sent[2].to_string();
    assert!(
        last.contains("tool_result") && last.contains("try again"),
        "{body}"
    );
    assert!(
        !body.to_string().contains("\"done\""),
        "not the later answer: {body}"
    );
    assert_eq!(
        std::fs::read_to_string(s.join(format!("threads/{fork}/files/notes/a.txt"))).unwrap(),
        NOTE
    );
    let fork_history = succeeded(&threads(s, &["history", &fork]));
    assert!(
        fork_history
            .lines()
            .next()
            .unwrap()
            .contains(&format!("(fork of alpha@{after_tools})")),
        "{fork_history}"
    );
    assert_eq!(
        succeeded(&threads(s, &["history", "alpha"])),
        history,
        "alpha is unchanged"
    );
    let bad = failed(
        &trellis_run(s)
            .args(["--fork", "alpha@999", "x"])
            .env("ANTHROPIC_API_KEY", "test-key")
            .command()
            .output()
            .unwrap(),
    );
    assert!(
        bad.contains("alpha@999") && bad.contains("no checkpoint 999"),
        "{bad}"
    );
}

/// `trellis threads gc` removes a blob no step names, leaves young ones alone under its grace
/// period, and leaves the thread whole: its history and messages are what they were. A thread of
/// `trellis run` on local disk is one file of steps, appended version-checked, so no step is ever
/// off its chain (steps off the chain of older threads: `tests/tests/integration/thread_store.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_removes_unreferenced_blobs_and_keeps_the_thread() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    ok_text(&run_calling(s, None, "alpha", vec![write("/notes/a.txt", NOTE)]).await[0]);
    let history = succeeded(&threads(s, &["history", "alpha"]));
    let shown = succeeded(&threads(s, &["show", "alpha"]));
    assert!(s.join("threads/alpha/steps.log").is_file());
    assert!(!s.join("threads/alpha/log").exists());
    let blobs = s.join("threads/alpha/blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let stray = blobs.join(format!("{}.json", "ab".repeat(32)));
    std::fs::write(&stray, "[]").unwrap();

    // Younger than the default grace period: a save in flight elsewhere keeps it.
    let young = succeeded(&threads(s, &["gc", "alpha"]));
    assert!(young.contains("alpha: removed 0 steps, 0 blobs"), "{young}");
    assert!(stray.exists());

    let all = succeeded(&threads(s, &["gc", "--grace", "0"]));
    assert!(all.contains("alpha: removed 0 steps, 1 blobs"), "{all}");
    assert!(all.contains("1 threads: removed 0 steps, 1 blobs"), "{all}");
    assert!(!stray.exists());
    assert_eq!(succeeded(&threads(s, &["history", "alpha"])), history);
    assert_eq!(succeeded(&threads(s, &["show", "alpha"])), shown);
    let missing = failed(&threads(s, &["gc", "nobody"]));
    assert!(missing.contains("no thread nobody"), "{missing}");
}
