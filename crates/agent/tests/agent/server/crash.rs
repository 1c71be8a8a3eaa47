//! A `trellis serve` process killed with SIGKILL in the middle of a tool step (one `execute` call
//! finished and journaled, the other started), then a new process continues the thread with a run
//! that brings no messages: the finished call is not run again, the started external one is
//! reported as unknown and not run again. Real bubblewrap, plain HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::harness::{Served, http};
use crate::cli::crash::{a_finished_b_started, journal_of, model};
use crate::cli::sandbox::bwrap_or_skip;

/// The served agent: the mock's model, bubblewrap, no approvals.
const AGENT_FILE: &str = "model = \"anthropic:claude-sonnet-4-5\"\n\
[sandbox]\nkind = \"bwrap\"\n\
[approvals]\nask = [\"none\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_run_killed_mid_step_is_continued_without_repeating_a_call() {
    if !bwrap_or_skip("trellis serve killed mid-step") {
        return;
    }
    let model = model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::with_agent_file(dir.path(), &model, None, AGENT_FILE);
    let (u, c) = (served.url.clone(), http());
    let thread: Value = c
        .post(format!("{u}/threads"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let run = json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "Count"}]}});
    let started = c
        .post(format!("{u}/threads/{tid}/runs"))
        .json(&run)
        .send()
        .await
        .unwrap();
    assert_eq!(started.status().as_u16(), 200);

    let thread_dir = dir.path().join("state/threads").join(&tid);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !a_finished_b_started(&journal_of(&thread_dir)) {
        assert!(
            Instant::now() < deadline,
            "the step never got under way:\n{}",
            served.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    served.kill();
    let count = |name: &str| std::fs::read_to_string(thread_dir.join("files/outputs").join(name)).ok();
    assert_eq!(count("count-a.txt").as_deref(), Some("a\n"));

    // A new process; a run with no new messages finishes the step.
    let served = Served::with_agent_file(dir.path(), &model, None, AGENT_FILE);
    let u = served.url.clone();
    let cont = json!({"assistant_id": "agent", "input": {"messages": []}});
    let response = c
        .post(format!("{u}/threads/{tid}/runs/wait"))
        .json(&cont)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let result: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{result}\n{}", served.stderr());
    let messages = result["messages"].as_array().unwrap();
    let tool = |id: &str| {
        messages
            .iter()
            .find(|m| m["type"] == "tool" && m["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no result for {id}: {result}"))
            .clone()
    };
    let a = tool("toolu_a");
    assert!(
        a["content"]
            .as_str()
            .unwrap()
            .contains(&format!("key={tid}:toolu_a")),
        "{a}"
    );
    let b = tool("toolu_b");
    assert_eq!(b["status"], "error", "{b}");
    assert!(b["content"].as_str().unwrap().contains("unknown"), "{b}");
    assert_eq!(messages.last().unwrap()["content"], "done");
    assert_eq!(
        count("count-a.txt").as_deref(),
        Some("a\n"),
        "the finished call ran once"
    );
    assert_eq!(count("count-b.txt"), None, "the started call did not run again");
}
