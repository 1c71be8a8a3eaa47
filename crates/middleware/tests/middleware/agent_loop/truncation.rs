//! Issue 21, item 3: a reply cut off at the output token limit in the middle of a tool call never
//! runs that call. Anthropic documents `stop_reason: "max_tokens"` with an incomplete `tool_use`
//! block ("Handling stop reasons", docs.anthropic.com/en/api/handling-stop-reasons); OpenAI
//! documents `finish_reason: "length"` (openai-python `ChatCompletion.Choice.finish_reason`). Both
//! arrive here as `StopReason::MaxTokens` with tool calls. Before the fix the loop ran the call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::model::StopReason;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::runtime::truncation::{DEFAULT_TRUNCATED_CALL_RETRIES, TRUNCATION_SOURCE};
use trellis_middleware::*;

use crate::common::*;

/// `write_file`: records every `content` it is called with.
fn recording_write(log: Log) -> FnTool {
    FnTool::new(
        "write_file",
        "Write a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}),
        move |args| {
            let log = log.clone();
            async move {
                log.push(args.to_string());
                Ok(ToolOutput::text("written"))
            }
        },
    )
}

fn truncated(args: serde_json::Value) -> ModelResponse {
    let mut response = ModelResponse::new(AiMessage::tool_calls([call("cut", "write_file", args)]));
    response.stop_reason = StopReason::MaxTokens;
    response
}

#[tokio::test]
async fn a_cut_off_call_is_not_run_and_the_model_is_told_and_asked_again() {
    let log = Log::default();
    let model = Arc::new(
        ScriptedModel::new()
            // What a half-written `tool_use` input becomes: the partial JSON text.
            .then(truncated(json!(
                "{\"path\": \"/notes.md\", \"content\": \"first ha"
            )))
            .then_tool_calls([call(
                "whole",
                "write_file",
                json!({"path": "/notes.md", "content": "all of it"}),
            )])
            .then_text("done"),
    );
    let agent = Agent::builder(model.clone())
        .tool(recording_write(log.clone()))
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("write notes")).await.unwrap();

    assert_eq!(out.final_text().as_deref(), Some("done"));
    assert_eq!(
        log.entries(),
        [json!({"path": "/notes.md", "content": "all of it"}).to_string()],
        "only the complete call ran"
    );
    // The second request shows the model its stripped reply and the notice.
    let second = &model.requests()[1];
    let messages: Vec<&Message> = second.messages.iter().collect();
    assert_eq!(messages.len(), 3);
    let stripped = messages[1].as_ai().unwrap();
    assert!(!stripped.has_tool_calls(), "no call waits for a result");
    assert!(stripped.text_content().contains("`write_file` cut off"));
    assert_eq!(messages[2].source(), Some(TRUNCATION_SOURCE));
    assert!(
        messages[2].text().contains("output token limit"),
        "{}",
        messages[2].text()
    );
    assert!(messages[2].text().contains("`write_file`"));
    assert_eq!(out.model_calls, 3);
}

#[tokio::test]
async fn replies_cut_off_too_often_fail_the_run_with_a_typed_error_and_keep_the_thread() {
    let log = Log::default();
    let model = Arc::new(ScriptedModel::from_fn(|_| {
        Ok(truncated(json!("{\"path\": \"/big.txt\", \"content\": \"aaaa")))
    }));
    let agent = Agent::builder(model.clone())
        .tool(recording_write(log.clone()))
        .build()
        .unwrap();
    let thread = ThreadId::new("cut").unwrap();
    let err = agent
        .run(RunInput::human("write a big file").thread(thread.clone()))
        .await
        .unwrap_err();
    match &err {
        AgentError::TruncatedToolCall {
            tools,
            attempts,
            thread_id,
        } => {
            assert_eq!(tools, &["write_file"]);
            assert_eq!(*attempts, DEFAULT_TRUNCATED_CALL_RETRIES + 1);
            assert_eq!(thread_id, &thread);
        }
        other => panic!("expected TruncatedToolCall, got {other:?}"),
    }
    assert!(err.to_string().contains("output token limit"), "{err}");
    assert!(log.entries().is_empty(), "no cut-off call ran");
    assert_eq!(model.calls(), 3, "two retries after the first cut reply");
    // The checkpoint keeps every stripped reply and notice; no call is left without a result.
    let saved = agent.state(&thread).await.unwrap().unwrap();
    assert_eq!(saved.messages.len(), 1 + 3 + 2);
    assert!(
        saved
            .messages
            .iter()
            .all(|m| m.as_ai().is_none_or(|ai| !ai.has_tool_calls()))
    );
}

#[tokio::test]
async fn the_retry_bound_is_configurable_and_resets_after_a_complete_reply() {
    let log = Log::default();
    let model = Arc::new(
        ScriptedModel::new()
            .then(truncated(json!("{\"path\"")))
            .then_tool_calls([call("ok", "write_file", json!({"path": "/a", "content": "x"}))])
            .then(truncated(json!("{\"pa"))),
    );
    let agent = Agent::builder(model.clone())
        .tool(recording_write(log.clone()))
        .truncated_call_retries(1)
        .build()
        .unwrap();
    // One retry allowed: cut, complete (resets), cut, and then the script is empty → the
    // fourth call fails as a model error, not as a truncation (the count was reset).
    let err = agent.run(RunInput::human("go")).await.unwrap_err();
    assert!(matches!(err, AgentError::Model(_)), "{err:?}");
    assert_eq!(log.entries().len(), 1);

    let zero = Agent::builder(Arc::new(ScriptedModel::new().then(truncated(json!("{")))))
        .tool(recording_write(log.clone()))
        .truncated_call_retries(0)
        .build()
        .unwrap();
    let err = zero.run(RunInput::human("go")).await.unwrap_err();
    assert!(
        matches!(err, AgentError::TruncatedToolCall { attempts: 1, .. }),
        "{err:?}"
    );
    assert_eq!(log.entries().len(), 1);
}
