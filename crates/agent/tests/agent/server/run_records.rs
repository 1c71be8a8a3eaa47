//! Run records (a Trellis extension of the `Run` object): a finished run lists its timings, its
//! model and tool calls, tokens and cost at list prices — subagents included — and each subagent
//! run it started with that subagent's own numbers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::harness::{Served, http};
use crate::cli::harness::calls_then_done;

async fn json_of(response: reqwest::Response) -> Value {
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.unwrap()
}

/// The model calls `task` (the general-purpose subagent), whose own model answers; then the
/// parent answers. Every call of the mock uses 10 input and 5 output tokens of
/// `claude-sonnet-4-5` ($3 and $15 per million): three calls in all, one in the subagent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_record_has_its_usage_cost_and_subagent_runs() {
    let task = json!({"type": "tool_use", "id": "toolu_task", "name": "task",
        "input": {"description": "Say done.", "subagent_type": "general-purpose"}});
    let model = calls_then_done(vec![task]).await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let client = http();
    let thread = json_of(
        client
            .post(format!("{}/threads", served.url))
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let tid = thread["thread_id"].as_str().unwrap();
    let out = json_of(
        client
            .post(format!("{}/threads/{tid}/runs/wait", served.url))
            .json(&json!({"assistant_id": "agent",
                          "input": {"messages": [{"role": "user", "content": "delegate"}]}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(out["messages"][3]["content"], "done", "{out:#}");

    let runs = json_of(
        client
            .get(format!("{}/threads/{tid}/runs", served.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let run = &runs[0];
    assert_eq!(run["status"], "success", "{run:#}");
    let usage = &run["usage"];
    assert_eq!(usage["model_calls"], 3, "{run:#}");
    assert_eq!(usage["tool_calls"], 1, "the task call (the subagent called none)");
    assert_eq!(
        (usage["input_tokens"].as_u64(), usage["output_tokens"].as_u64()),
        (Some(30), Some(15))
    );
    let cost = usage["cost_usd"]
        .as_f64()
        .expect("claude-sonnet-4-5 has a list price");
    assert!(
        (cost - 3.0 * (10.0 * 3.0 + 5.0 * 15.0) / 1e6).abs() < 1e-12,
        "{cost}"
    );
    assert!(usage["prices_as_of"].is_string());
    let (started, ended) = (
        run["started_at"].as_str().unwrap(),
        run["ended_at"].as_str().unwrap(),
    );
    assert!(started <= ended, "{started} {ended}");

    let subagents = run["subagent_runs"].as_array().unwrap();
    assert_eq!(subagents.len(), 1, "{run:#}");
    let sub = &subagents[0];
    assert_eq!(sub["call_id"], "toolu_task");
    assert_eq!(sub["subagent_type"], "general-purpose");
    assert_eq!(sub["status"], "success");
    assert!(sub["task_id"].as_str().unwrap().starts_with("task-"), "{sub}");
    assert_eq!(sub["usage"]["model_calls"], 1);
    assert_eq!(sub["usage"]["input_tokens"], 10);
    let sub_cost = sub["usage"]["cost_usd"].as_f64().unwrap();
    assert!(
        (sub_cost - (10.0 * 3.0 + 5.0 * 15.0) / 1e6).abs() < 1e-12,
        "{sub_cost}"
    );
    assert!(sub["started_at"].as_str().unwrap() >= started);

    // The same record through GET of the one run.
    let one = json_of(
        client
            .get(format!(
                "{}/threads/{tid}/runs/{}",
                served.url,
                run["run_id"].as_str().unwrap()
            ))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(one["usage"], run["usage"]);
}
