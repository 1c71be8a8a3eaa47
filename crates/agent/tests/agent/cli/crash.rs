//! Crash-safe steps through the binary: `trellis run` is killed with SIGKILL between two `execute`
//! calls of one step (the first finished and journaled, the second started), then `trellis resume`
//! continues the thread in a new process. The finished call ran exactly once and its result (with
//! its idempotency key) reaches the model; the external call that had started is not run again and
//! is reported as unknown, or goes to approval when `--ask` covers `execute`. Real bubblewrap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::MockServer;

use super::approvals::last_results;
use super::harness::{TrellisRun, calls_then_done, result_text, trellis};
use super::sandbox::bwrap_or_skip;

/// One reply with two `execute` calls: `toolu_a` appends to a counter file and prints its
/// idempotency key; `toolu_b` appends to another and sleeps (its files are saved only when it
/// ends, so a kill loses them).
pub(crate) async fn model() -> MockServer {
    calls_then_done(vec![
        json!({"type": "tool_use", "id": "toolu_a", "name": "execute", "input": {
            "command": "mkdir -p /outputs && echo a >> /outputs/count-a.txt && echo key=$TRELLIS_IDEMPOTENCY_KEY"}}),
        json!({"type": "tool_use", "id": "toolu_b", "name": "execute", "input": {
            "command": "mkdir -p /outputs && echo b >> /outputs/count-b.txt && sleep 60"}}),
    ])
    .await
}

/// The journal records of thread `t1` in `state`.
fn journal(state: &Path) -> Vec<Value> {
    journal_of(&state.join("threads/t1"))
}

/// The journal records kept in the thread directory `thread` (`STATE/threads/ID`).
pub(crate) fn journal_of(thread: &Path) -> Vec<Value> {
    let dir = thread.join("calls");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
        .collect()
}

/// Start `trellis run` on thread `t1` and SIGKILL it once `toolu_a` is journaled as finished and
/// `toolu_b` as started.
fn run_and_kill(state: &Path, server: &MockServer, ask: &[&str]) {
    let mut command = TrellisRun::new()
        .args(["--sandbox", "bwrap", "--thread", "t1"])
        .args(ask)
        .state_dir(state)
        .arg("Count")
        .anthropic(server)
        .command();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let records = journal(state);
        if a_finished_b_started(&records) {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("trellis run ended before the kill ({status}); journal: {records:?}");
        }
        assert!(
            Instant::now() < deadline,
            "the step never got under way: {records:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

/// True when the journal `records` hold `toolu_a` finished and `toolu_b` started.
pub(crate) fn a_finished_b_started(records: &[Value]) -> bool {
    let has = |id: &str, status: &str| {
        records
            .iter()
            .any(|r| r["call_id"] == id && r["outcome"]["status"] == status)
    };
    has("toolu_a", "finished") && has("toolu_b", "started")
}

/// A file of thread `t1`'s own space.
fn thread_file(state: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(state.join("threads/t1/files").join(path)).ok()
}

fn resume(state: &Path, server: &MockServer, extra: &[&str]) -> Output {
    trellis()
        .args(["resume", "t1", "--state-dir"])
        .arg(state)
        .args(extra)
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_between_two_calls_resumes_without_repeating_either() {
    if !bwrap_or_skip("trellis run killed mid-step") {
        return;
    }
    let server = model().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    tokio::task::block_in_place(|| run_and_kill(&state, &server, &["--ask", "none"]));
    assert_eq!(thread_file(&state, "outputs/count-a.txt").as_deref(), Some("a\n"));
    assert_eq!(
        thread_file(&state, "outputs/count-b.txt"),
        None,
        "the killed call saved nothing"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);

    let out = tokio::task::block_in_place(|| resume(&state, &server, &[]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    assert!(stderr.contains("finishing the step"), "{stderr}");

    // Each effect happened once: a finished call is not run again, the started external one
    // neither (it would have written count-b.txt).
    assert_eq!(thread_file(&state, "outputs/count-a.txt").as_deref(), Some("a\n"));
    assert_eq!(thread_file(&state, "outputs/count-b.txt"), None);
    let results = last_results(&server).await;
    let ids: Vec<&str> = results.iter().filter_map(|r| r["tool_use_id"].as_str()).collect();
    assert_eq!(ids, ["toolu_a", "toolu_b"]);
    let a = result_text(&results[0]);
    assert!(a.contains("key=t1:toolu_a") && a.contains("exit code 0"), "{a}");
    assert_ne!(results[0]["is_error"], true);
    let b = result_text(&results[1]);
    assert_eq!(results[1]["is_error"], true, "{b}");
    assert!(b.contains("unknown") && b.contains("not run again"), "{b}");
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
    assert!(
        journal(&state).is_empty(),
        "the journal is gone once the step is saved"
    );

    // Nothing is left to finish.
    let again = tokio::task::block_in_place(|| resume(&state, &server, &[]));
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("no unfinished step"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_ask_execute_the_started_call_waits_for_a_decision_that_says_so() {
    if !bwrap_or_skip("trellis run killed mid-step, with approvals") {
        return;
    }
    let server = model().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let ask = ["--ask", "execute", "--approve", "all"];
    tokio::task::block_in_place(|| run_and_kill(&state, &server, &ask));

    // Without a decision the resumed run stops and says what is known.
    let out = tokio::task::block_in_place(|| resume(&state, &server, &[]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("call toolu_b") && stderr.contains("unknown"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("call toolu_a"),
        "the finished call is not asked about: {stderr}"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);

    // Rejected: it never runs again, and the finished call still ran once.
    let decisions = dir.path().join("decisions.json");
    std::fs::write(
        &decisions,
        r#"{"toolu_b": {"decision": "reject", "message": "check first"}}"#,
    )
    .unwrap();
    let out = tokio::task::block_in_place(|| {
        resume(&state, &server, &["--decisions", decisions.to_str().unwrap()])
    });
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(thread_file(&state, "outputs/count-a.txt").as_deref(), Some("a\n"));
    assert_eq!(thread_file(&state, "outputs/count-b.txt"), None);
    let results = last_results(&server).await;
    assert!(result_text(&results[0]).contains("key=t1:toolu_a"));
    assert!(result_text(&results[1]).contains("rejected"), "{:?}", results[1]);
}
