//! `trellis serve` driven by the official JS client: `@langchain/langgraph-sdk`'s React hook
//! `useStream`, rendered under Node by `use_stream.mjs` beside this file (the node_modules are
//! `TRELLIS_LANGGRAPH_NODE_MODULES`, installed by `cargo xtask test`). The hook's own reducer
//! merges the server's `messages-tuple` token deltas into messages while the run streams; these
//! tests check what it shows then and after, against what the server keeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use super::harness::{Served, ls_then_streamed_answer, node_report};
use crate::support::require_env;

/// Run `use_stream.mjs` against `served`; its JSON report.
async fn use_stream(modules: &str, served: &Served) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/agent/server/use_stream.mjs");
    let mut command = Command::new("node");
    command
        .arg(script)
        .env("TRELLIS_LANGGRAPH_NODE_MODULES", modules)
        .env("URL", &served.url);
    node_report(command, "use_stream.mjs", served).await
}

/// How many different ids the messages in `messages` (a JSON array) have.
fn distinct_ids(messages: &Value) -> usize {
    let ids: std::collections::BTreeSet<String> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].to_string())
        .collect();
    ids.len()
}

/// One message sent through `useStream` on a new thread, against a model that calls `ls` and then
/// streams `Streamed answer.` in two deltas. While the run streams, the hook shows the tool call,
/// its result and the answer assembled from the deltas under one id; once it finishes, it shows
/// the human, AI, tool and AI messages with the same ids the server keeps in the thread's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_stream_shows_the_streamed_run_and_the_threads_state() {
    let [modules] = require_env!("TRELLIS_LANGGRAPH_NODE_MODULES");
    let model = ls_then_streamed_answer().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let report = use_stream(&modules, &served).await;
    assert_eq!(report["error"], Value::Null, "{report:#}");

    let final_messages = report["final"].as_array().unwrap();
    let types: Vec<&str> = final_messages
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["human", "ai", "tool", "ai"], "{report:#}");
    assert_eq!(final_messages[0]["id"], "human-1");
    assert_eq!(final_messages[0]["content"], "list files");
    let call = &final_messages[1]["tool_calls"][0];
    assert_eq!(call["name"], "ls", "{report:#}");
    assert_eq!(call["args"], json!({"path": "/"}));
    assert_eq!(final_messages[2]["tool_call_id"], call["id"]);
    assert_eq!(final_messages[3]["content"], "Streamed answer.");
    // The hook keys messages by id: every one has its own, and they are the server's.
    assert!(final_messages.iter().all(|m| m["id"].is_string()), "{report:#}");
    assert_eq!(distinct_ids(&report["final"]), 4, "{report:#}");
    assert_eq!(report["state_messages"], report["final"], "{report:#}");
    assert!(
        report["value_keys"]
            .as_array()
            .unwrap()
            .contains(&json!("messages")),
        "{report:#}"
    );

    // While the run streamed, the hook's reducer built the answer from the token deltas under
    // the final message's id.
    let streaming = report["while_streaming"].as_array().unwrap();
    assert!(
        !streaming.is_empty(),
        "the hook rendered while loading: {report:#}"
    );
    let last = streaming.last().unwrap().as_array().unwrap();
    let answer = last
        .iter()
        .find(|m| m["id"] == final_messages[3]["id"])
        .unwrap_or_else(|| panic!("the streamed answer has the final id: {report:#}"));
    assert_eq!(answer["content"], "Streamed answer.", "{report:#}");
    assert!(
        last.iter()
            .any(|m| m["id"] == final_messages[1]["id"] && m["tool_calls"][0]["name"] == "ls"),
        "the tool call streamed under its final id: {report:#}"
    );
    // No render ever showed a message twice (a chunk under one id and its final under another).
    for render in streaming {
        let shown = render.as_array().unwrap().len();
        assert_eq!(distinct_ids(render), shown, "a repeated message: {report:#}");
    }
}
