//! A worker killed with SIGKILL at each named point of a run, with three `trellis serve`
//! processes sharing one database and keeping their threads on S3 (moto, `--store`; every worker
//! has a state dir of its own): after the claim, mid model call, between two tool calls of one
//! step, and after the run's last checkpoint before its end is stored. Another worker finishes
//! the run; every tool call that finished ran exactly once (it appends to a thread file, counted
//! after); no step is checkpointed twice (the thread's history); a client joined on another worker
//! before the kill reads the run's stream to its end with ids 0, 1, 2, … (no gap, no duplicate).
//! The claim and the end are reached with the test-only fault points (`TRELLIS_FAULT_PAUSE`,
//! `server/workers/fault.rs`), the model call with a reply that never comes in time, the tool
//! step with the tool-call journal on the store. Real bubblewrap for the tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::MockServer;

use super::super::harness::{Served, http};
use super::fleet::{Fleet, logged, prerequisites, script};
use super::support::{assert_numbered, begin, follow, model_called, parse_sse, post, settled};
use crate::cli::crash::a_finished_b_started;
use crate::cli::harness::reply;

/// `execute` call `id` appending `line` to `/outputs/count-ID.txt` (a thread file), then running
/// `then`.
fn append(id: &str, then: &str) -> Value {
    json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": "execute", "input": {
        "command": format!("mkdir -p /outputs && echo {id} >> /outputs/count-{id}.txt{then}")}})
}

/// What a finished takeover must show, asked of `on`: the run succeeded on its second attempt;
/// each `count-ID.txt` of `counts` holds its line once (`None`: the file is not there); the
/// model was asked `calls` times; no step was checkpointed twice; the joined client's `stream`
/// is numbered with no gap or duplicate and ends with the run's answer.
async fn assert_taken_over(
    on: &Served,
    (thread, run): (&str, &str),
    model: &MockServer,
    (counts, calls): (&[(&str, Option<&str>)], usize),
    stream: String,
) -> Value {
    let client = http();
    let ended = settled(&client, on, thread, run, Duration::from_secs(60)).await;
    assert_eq!(
        (ended["status"].as_str(), ended["attempt"].as_u64()),
        (Some("success"), Some(2)),
        "{}",
        on.stderr()
    );
    let state: Value = client
        .get(format!("{}/threads/{thread}/state", on.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let files = &state["values"]["files"];
    for (id, want) in counts {
        let got = files[format!("/outputs/count-{id}.txt")]["content"].as_str();
        assert_eq!(
            got, *want,
            "count-{id}.txt: every finished call ran once; {files}"
        );
    }
    assert_eq!(
        model.received_requests().await.unwrap().len(),
        calls,
        "model calls"
    );
    let messages = state["values"]["messages"].as_array().unwrap();
    let answers = messages.iter().filter(|m| m["content"] == "done").count();
    assert_eq!(answers, 1, "one answer: {messages:?}");
    let history: Value = post(
        &client,
        format!("{}/threads/{thread}/history", on.url),
        None,
        json!({"limit": 100}),
    )
    .await
    .json()
    .await
    .unwrap();
    let steps: Vec<Value> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["metadata"]["step"].clone())
        .collect();
    let mut unique = steps.clone();
    unique.dedup();
    assert_eq!(steps, unique, "each step checkpointed once: {steps:?}");

    let events = parse_sse(&stream);
    assert_numbered(&events);
    let last = events.iter().rev().find(|(_, e, _)| e == "values").unwrap();
    assert!(
        last.2.contains("done"),
        "the stream ends with the answer: {last:?}"
    );
    state
}

/// Kill `a` (holding the run) once `b` and `c` are up and a client follows the run on `b`; the
/// followed stream once the run ended.
async fn kill_and_follow(a: Served, b: &Served, (thread, run): (&str, &str)) -> String {
    let stream = follow(b, thread, run).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.kill();
    tokio::time::timeout(Duration::from_secs(60), stream)
        .await
        .expect("the followed stream ended")
        .unwrap()
}

/// A run of one call (append `a`) begun on worker `a`, which parks at fault point `point` and is
/// killed there while `b` follows the run; `c` takes it over, checked by [`assert_taken_over`]
/// (the call ran once, the model was asked twice). The thread's state after.
async fn parked_and_killed(needs: (String, [String; 2]), point: &str) -> Value {
    let model = script(vec![reply(json!([append("a", "")]), "tool_use")]).await;
    let fleet = Fleet::new(needs, model);
    let a = fleet.worker("a", Some(point));
    let (thread, run) = begin(&a).await;
    logged(&a, &format!("fault point {point}: run {run} parked")).await;
    let (b, c) = (fleet.worker("b", None), fleet.worker("c", None));
    let stream = kill_and_follow(a, &b, (&thread, &run)).await;
    assert_taken_over(
        &c,
        (&thread, &run),
        &fleet.model,
        (&[("a", Some("a\n"))], 2),
        stream,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_claim_the_run_is_run_whole_elsewhere() {
    let Some((_db, needs)) = prerequisites("worker killed after the claim").await else {
        return;
    };
    let state = parked_and_killed(needs, "claimed").await;
    let texts: Vec<&Value> = state["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["type"] == "human")
        .collect();
    assert_eq!(texts.len(), 1, "the input once: {texts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_model_call_the_run_goes_on_from_its_last_step() {
    let Some((_db, needs)) = prerequisites("worker killed mid model call").await else {
        return;
    };
    // A tool step, then a model call that never answers in time, then `done`.
    let never =
        reply(json!([{"type": "text", "text": "never"}]), "end_turn").set_delay(Duration::from_secs(120));
    let model = script(vec![reply(json!([append("a", "")]), "tool_use"), never]).await;
    let fleet = Fleet::new(needs, model);
    let a = fleet.worker("a", None);
    let (thread, run) = begin(&a).await;
    model_called(&fleet.model, 2).await;
    let (b, c) = (fleet.worker("b", None), fleet.worker("c", None));
    let stream = kill_and_follow(a, &b, (&thread, &run)).await;
    assert!(!stream.contains("never"), "A's unanswered call left nothing");
    assert_taken_over(
        &c,
        (&thread, &run),
        &fleet.model,
        (&[("a", Some("a\n"))], 3),
        stream,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_two_tool_calls_the_finished_one_is_not_run_again() {
    let Some((_db, needs)) = prerequisites("worker killed between tool calls").await else {
        return;
    };
    // One step of two calls: `a` finishes, `b` is cut by the kill (its files are saved only at
    // its end, so its line is lost with it).
    let step = reply(json!([append("a", ""), append("b", " && sleep 60")]), "tool_use");
    let fleet = Fleet::new(needs, script(vec![step]).await);
    let a = fleet.worker("a", None);
    let (thread, run) = begin(&a).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !a_finished_b_started(&fleet.journal(&thread).await) {
        assert!(
            Instant::now() < deadline,
            "the step never got under way: {}",
            a.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (b, c) = (fleet.worker("b", None), fleet.worker("c", None));
    let stream = kill_and_follow(a, &b, (&thread, &run)).await;
    let state = assert_taken_over(
        &c,
        (&thread, &run),
        &fleet.model,
        (&[("a", Some("a\n")), ("b", None)], 2),
        stream,
    )
    .await;
    let messages = state["values"]["messages"].as_array().unwrap();
    let b_result = messages
        .iter()
        .find(|m| m["type"] == "tool" && m["tool_call_id"] == "toolu_b")
        .unwrap_or_else(|| panic!("no result for toolu_b: {messages:?}"));
    assert_eq!(b_result["status"], "error", "{b_result}");
    assert!(b_result["content"].to_string().contains("unknown"), "{b_result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_last_checkpoint_the_run_is_not_run_again() {
    let Some((_db, needs)) = prerequisites("worker killed before storing the end").await else {
        return;
    };
    parked_and_killed(needs, "finished").await;
}
