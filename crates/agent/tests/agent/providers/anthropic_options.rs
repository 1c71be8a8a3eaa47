//! Anthropic Messages API wire format, checked against a mock server.
//!
//! Every expected body is written out literally, from Anthropic's public Messages API reference
//! (`POST /v1/messages`: `system` as text blocks with `cache_control`, `messages` with `user` /
//! `assistant` turns, `tool_use` / `tool_result` / `thinking` / `image` blocks, `tools` with
//! `input_schema`, `tool_choice`) and its errors page.
//!
//! This file: structured output as a forced tool, extra parameters, and the declared capabilities.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use trellis_agent::providers::anthropic;
use trellis_middleware::runtime::message::ContentBlock;
use trellis_middleware::runtime::model::{ModelError, ResponseFormat, StopReason};
use trellis_middleware::{ChatModel, Message, ModelRequest};
use wiremock::ResponseTemplate;

use crate::providers::anthropic_common::*;
use crate::providers::common::*;

fn verdict_format() -> ResponseFormat {
    ResponseFormat {
        name: "verdict".into(),
        schema: json!({
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"]
        }),
        strict: true,
    }
}

#[tokio::test]
async fn structured_output_is_a_forced_tool() {
    let request = ModelRequest {
        messages: vec![Message::human("Is 2 + 2 = 4?")].into(),
        response_format: Some(verdict_format()),
        ..ModelRequest::default()
    };
    let response = json!({
        "content": [{"type": "tool_use", "id": "toolu_09", "name": "verdict", "input": {"ok": true}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 30, "output_tokens": 9}
    });
    let (sent, result) = exchange(request, ResponseTemplate::new(200).set_body_json(response)).await;
    assert_json_eq(
        &body_json(&sent),
        &json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 8192,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Is 2 + 2 = 4?"}]}],
            "tools": [{
                "name": "verdict",
                "description": anthropic::STRUCTURED_OUTPUT_TOOL_DESCRIPTION,
                "input_schema": {
                    "type": "object",
                    "properties": {"ok": {"type": "boolean"}},
                    "required": ["ok"]
                }
            }],
            "tool_choice": {"type": "tool", "name": "verdict"}
        }),
    );
    let response = result.unwrap();
    assert_eq!(response.structured_output, Some(json!({"ok": true})));
    assert_eq!(
        response.message.content,
        vec![ContentBlock::text(r#"{"ok":true}"#)]
    );
    assert!(
        !response.message.has_tool_calls(),
        "the answer call is not left for the loop to run"
    );
    assert_eq!(response.stop_reason, StopReason::EndTurn);
}

#[test]
fn structured_output_with_other_tools_requires_any_tool() {
    let model = model_at("http://localhost:1");
    let request = ModelRequest {
        messages: vec![Message::human("Check /a.txt")].into(),
        tools: vec![read_file_tool()],
        response_format: Some(verdict_format()),
        ..ModelRequest::default()
    };
    let body = model.request_body(&request).unwrap();
    assert_json_eq(&body["tool_choice"], &json!({"type": "any"}));
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read_file", "verdict"]);

    let clash = ModelRequest {
        response_format: Some(ResponseFormat {
            name: "read_file".into(),
            ..verdict_format()
        }),
        ..request
    };
    assert!(matches!(
        model.request_body(&clash),
        Err(ModelError::BadRequest { .. })
    ));
}

#[test]
fn extra_parameters_are_passed_through_without_overriding() {
    let model = model_at("http://localhost:1");
    let mut request = ModelRequest {
        messages: vec![Message::human("x")].into(),
        ..ModelRequest::default()
    };
    request.extra.insert(
        "thinking".into(),
        json!({"type": "enabled", "budget_tokens": 2048}),
    );
    request.extra.insert("model".into(), json!("other-model"));
    let body = model.request_body(&request).unwrap();
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(body["model"], "claude-sonnet-4-5");
}

#[test]
fn capabilities_are_declared() {
    let model = model_at("https://api.anthropic.com");
    let caps = model.capabilities();
    assert!(caps.prompt_caching);
    assert_eq!(caps.max_cache_breakpoints, 4);
    assert!(!caps.tools_mid_conversation);
    assert!(caps.structured_output);
    assert!(caps.images);
    assert_eq!(caps.context_window, Some(200_000));
    assert_eq!(model.id(), "claude-sonnet-4-5");
    assert_eq!(model.endpoint(), "https://api.anthropic.com/v1/messages");
    assert!(
        !format!("{model:?}").contains("test-key"),
        "Debug must not show the key"
    );
}
