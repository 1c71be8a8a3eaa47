//! Typed request settings (issue 21): temperature, top_p, stop sequences, tool choice, thinking
//! budget and reasoning effort, checked as exact bodies against each provider's reference.
//!
//! * Anthropic Messages (docs.anthropic.com/en/api/messages): `temperature`, `top_p`,
//!   `stop_sequences`, `tool_choice` (`auto` / `any` / `tool` / `none`), `thinking: {"type":
//!   "enabled", "budget_tokens"}` with `budget_tokens` ≥ 1024 and < `max_tokens`. No reasoning
//!   effort: refused.
//! * OpenAI Chat Completions (platform.openai.com/docs/api-reference/chat/create): `temperature`,
//!   `top_p`, `stop`, `tool_choice`, `reasoning_effort` (`minimal` … `high`). No thinking budget:
//!   refused.
//!
//! Before, only `temperature` and `tool_choice` existed; the others could only go through `extra`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use trellis_agent::providers::anthropic::{AnthropicConfig, AnthropicModel};
use trellis_agent::providers::openai::{OpenAiConfig, OpenAiModel};
use trellis_middleware::runtime::model::{ModelError, ReasoningEffort, ToolChoice};
use trellis_middleware::{ChatModel, Message, ModelRequest};
use wiremock::ResponseTemplate;

use crate::providers::common::{assert_json_eq, body_json, only_request, read_file_tool, server_answering};

fn settings() -> ModelRequest {
    ModelRequest {
        messages: vec![Message::human("hi")].into(),
        tools: vec![read_file_tool()],
        tool_choice: Some(ToolChoice::Required),
        max_output_tokens: Some(4096),
        temperature: Some(0.2),
        top_p: Some(0.9),
        stop_sequences: vec!["END".into()],
        ..ModelRequest::default()
    }
}

fn anthropic() -> AnthropicModel {
    AnthropicModel::new(AnthropicConfig::new("claude-sonnet-4-5", "k")).unwrap()
}

fn openai() -> OpenAiModel {
    OpenAiModel::new(OpenAiConfig::openai("gpt-5", "sk")).unwrap()
}

#[test]
fn anthropic_body_carries_each_setting() {
    let mut request = settings();
    request.tool_choice = None;
    request.temperature = None; // Anthropic rejects temperature with thinking.
    request.thinking_budget = Some(2048);
    let body = anthropic().request_body(&request).unwrap();
    assert_json_eq(
        &body,
        &json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 4096,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "tools": [{"name": "read_file", "description": "Read a file.",
                       "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}],
            "top_p": 0.9,
            "stop_sequences": ["END"],
            "thinking": {"type": "enabled", "budget_tokens": 2048}
        }),
    );
    let body = anthropic().request_body(&settings()).unwrap();
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!(body["temperature"], json!(0.2));
    assert!(body.get("thinking").is_none());
}

#[test]
fn anthropic_refuses_what_it_lacks_or_rejects() {
    let mut request = settings();
    request.reasoning_effort = Some(ReasoningEffort::High);
    let err = anthropic().request_body(&request).unwrap_err();
    assert!(
        matches!(&err, ModelError::BadRequest { message, .. } if message.contains("reasoning_effort")),
        "{err}"
    );
    for (budget, needle) in [(512, "minimum of 1024"), (4096, "below the output cap")] {
        let mut request = settings();
        request.thinking_budget = Some(budget);
        let err = anthropic().request_body(&request).unwrap_err();
        assert!(err.to_string().contains(needle), "{budget}: {err}");
    }
}

#[test]
fn openai_body_carries_each_setting() {
    let mut request = settings();
    request.reasoning_effort = Some(ReasoningEffort::Low);
    let body = openai().request_body(&request).unwrap();
    assert_json_eq(
        &body,
        &json!({
            "model": "gpt-5",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                       "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}],
            "tool_choice": "required",
            "max_completion_tokens": 4096,
            "temperature": 0.2,
            "top_p": 0.9,
            "stop": ["END"],
            "reasoning_effort": "low"
        }),
    );
}

#[tokio::test]
async fn openai_refuses_a_thinking_budget_before_sending() {
    let server = server_answering("/v1/chat/completions", ResponseTemplate::new(200)).await;
    let mut config = OpenAiConfig::openai("gpt-5", "sk").with_base_url(format!("{}/v1", server.uri()));
    config.stream = false;
    let mut request = settings();
    request.thinking_budget = Some(2048);
    let err = OpenAiModel::new(config)
        .unwrap()
        .invoke(request)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::BadRequest { message, .. } if message.contains("thinking_budget")),
        "{err}"
    );
    assert!(
        server.received_requests().await.unwrap().is_empty(),
        "nothing was sent"
    );
}

#[tokio::test]
async fn settings_travel_over_the_wire() {
    let server = server_answering(
        "/v1/messages",
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "stop_sequence",
            "stop_sequence": "END", "usage": {"input_tokens": 1, "output_tokens": 1}
        })),
    )
    .await;
    let mut config = AnthropicConfig::new("claude-sonnet-4-5", "k").with_base_url(server.uri());
    config.stream = false;
    AnthropicModel::new(config)
        .unwrap()
        .invoke(settings())
        .await
        .unwrap();
    let sent = body_json(&only_request(&server).await);
    assert_eq!(sent["stop_sequences"], json!(["END"]));
    assert_eq!(sent["top_p"], json!(0.9));
}
