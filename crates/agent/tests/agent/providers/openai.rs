//! OpenAI Chat Completions wire format, checked against a mock server.
//!
//! Every expected body is written out literally, from OpenAI's public Chat Completions reference
//! (`POST /v1/chat/completions`: `messages` with `system` / `user` / `assistant` / `tool` roles, user
//! content parts `text` and `image_url`, assistant `tool_calls` with `arguments` as a JSON string,
//! `tools` of type `function`, `tool_choice`, `response_format` `json_schema`,
//! `max_completion_tokens`) and its error codes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use trellis_agent::providers::openai::{self, InlineSystem, MaxTokensField, OpenAiConfig, OpenAiModel};
use trellis_middleware::runtime::message::{
    AiMessage, ContentBlock, HumanMessage, ImageSource, MessageMeta, SystemMessage, ToolMessage,
};
use trellis_middleware::runtime::model::{ModelError, ResponseFormat, StopReason, ToolChoice, Usage};
use trellis_middleware::{ChatModel, Message, ModelRequest, ModelResponse, SystemBlock, ToolCall};
use wiremock::ResponseTemplate;

use crate::providers::common::*;

pub(crate) fn openai_at(base_url: &str) -> OpenAiModel {
    OpenAiModel::new(OpenAiConfig::openai("gpt-4.1", "sk-test").with_base_url(base_url)).unwrap()
}

/// A plain text answer, as in the API reference's example response.
pub(crate) fn text_response() -> Value {
    json!({
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": "gpt-4.1-2025-04-14",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "Hello! How can I assist you today?", "refusal": null},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": {
            "prompt_tokens": 2006,
            "completion_tokens": 10,
            "total_tokens": 2016,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0}
        }
    })
}

pub(crate) async fn exchange(
    model: impl FnOnce(&str) -> OpenAiModel,
    request: ModelRequest,
    response: ResponseTemplate,
) -> (wiremock::Request, Result<ModelResponse, ModelError>) {
    let server = server_answering("/v1/chat/completions", response).await;
    let model = model(&format!("{}/v1", server.uri()));
    let result = model.invoke(request).await;
    (only_request(&server).await, result)
}

fn conversation() -> ModelRequest {
    let mut ai = AiMessage::text("Let me look.");
    ai.content.insert(
        0,
        ContentBlock::Reasoning {
            text: "not sent back".into(),
            signature: None,
        },
    );
    ai.content.push(ContentBlock::ToolUse(ToolCall::new(
        "call_abc",
        "read_file",
        json!({"path": "/a.txt"}),
    )));
    ai.content.push(ContentBlock::ToolUse(ToolCall::new(
        "call_def",
        "read_file",
        Value::String("{\"path\": ".into()),
    )));
    ModelRequest {
        system: vec![
            SystemBlock::new("You are Trellis."),
            SystemBlock::new("## Skills\n- web-research"),
        ],
        messages: vec![
            Message::Human(HumanMessage {
                content: vec![
                    ContentBlock::text("What is in this image?"),
                    ContentBlock::Image {
                        source: ImageSource::Base64 {
                            media_type: "image/png".into(),
                            data: "iVBORw0KGgo=".into(),
                        },
                    },
                    ContentBlock::Image {
                        source: ImageSource::Url {
                            url: "https://example.com/ant.jpg".into(),
                        },
                    },
                ],
                meta: MessageMeta::default(),
            }),
            Message::Ai(ai),
            Message::Tool(ToolMessage::text("call_abc", "read_file", "ants")),
            Message::Tool(ToolMessage::error("call_def", "read_file", "invalid arguments")),
            Message::System(SystemMessage {
                content: vec![ContentBlock::text("The skill web-research is active.")],
                tools: vec![trellis_middleware::runtime::model::ToolSpec {
                    name: "web_search".into(),
                    description: "Search the web.".into(),
                    parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
                }],
                meta: MessageMeta::default(),
            }),
            Message::human("Go on."),
        ]
        .into(),
        tools: vec![read_file_tool()],
        tool_choice: Some(ToolChoice::Required),
        max_output_tokens: Some(1024),
        temperature: Some(0.7),
        ..ModelRequest::default()
    }
}

fn expected_tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"]
            }
        }},
        {"type": "function", "function": {
            "name": "web_search",
            "description": "Search the web.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}
        }}
    ])
}

#[tokio::test]
async fn conversation_with_tools_images_and_a_late_system_message() {
    let (sent, result) = exchange(
        openai_at,
        conversation(),
        ResponseTemplate::new(200).set_body_json(text_response()),
    )
    .await;
    assert_eq!(header(&sent, "authorization").as_deref(), Some("Bearer sk-test"));
    assert_eq!(header(&sent, "content-type").as_deref(), Some("application/json"));
    assert_json_eq(
        &body_json(&sent),
        &json!({
            "model": "gpt-4.1",
            "messages": [
                {"role": "system", "content": "You are Trellis.\n\n## Skills\n- web-research"},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in this image?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/ant.jpg"}}
                ]},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "call_abc", "type": "function",
                     "function": {"name": "read_file", "arguments": "{\"path\":\"/a.txt\"}"}},
                    // Arguments that were not JSON go back as an object holding the text: ollama (and
                    // any server that parses `arguments`) answers 400 to the raw text on every later call.
                    {"id": "call_def", "type": "function",
                     "function": {"name": "read_file", "arguments": "{\"_raw\":\"{\\\"path\\\": \"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_abc", "content": "ants"},
                {"role": "tool", "tool_call_id": "call_def", "content": "invalid arguments"},
                {"role": "system", "content": "The skill web-research is active."},
                {"role": "user", "content": "Go on."}
            ],
            "tools": expected_tools(),
            "tool_choice": "required",
            "max_completion_tokens": 1024,
            "temperature": 0.7
        }),
    );
    let response = result.unwrap();
    assert_eq!(
        response.message.text_content(),
        "Hello! How can I assist you today?"
    );
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model.as_deref(), Some("gpt-4.1-2025-04-14"));
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 86,
            output_tokens: 10,
            cache_read_tokens: 1920,
            cache_write_tokens: 0,
        }
    );
}

#[tokio::test]
async fn compatible_server_without_key_and_with_older_fields() {
    let compatible = |base: &str| {
        let mut config = OpenAiConfig::compatible("qwen3:8b", base);
        config.max_tokens_field = MaxTokensField::MaxTokens;
        OpenAiModel::new(config).unwrap()
    };
    let mut request = conversation();
    request.tool_choice = Some(ToolChoice::Tool {
        name: "read_file".into(),
    });
    let (sent, _) = exchange(
        compatible,
        request,
        ResponseTemplate::new(200).set_body_json(text_response()),
    )
    .await;
    assert_eq!(
        header(&sent, "authorization"),
        None,
        "local servers get no Authorization header"
    );
    let body = body_json(&sent);
    assert_json_eq(
        &body["messages"][5],
        &json!({"role": "user", "content": "<system-reminder>\nThe skill web-research is active.\n</system-reminder>"}),
    );
    assert_json_eq(
        &body["tool_choice"],
        &json!({"type": "function", "function": {"name": "read_file"}}),
    );
    assert_eq!(body["max_tokens"], 1024);
    assert!(body.get("max_completion_tokens").is_none());
    assert_eq!(body["model"], "qwen3:8b");
}

#[tokio::test]
async fn structured_output_as_json_schema() {
    let request = ModelRequest {
        messages: vec![Message::human("Is 2 + 2 = 4?")].into(),
        response_format: Some(ResponseFormat {
            name: "verdict".into(),
            schema: json!({
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
                "additionalProperties": false
            }),
            strict: true,
        }),
        ..ModelRequest::default()
    };
    let mut response = text_response();
    response["choices"][0]["message"]["content"] = json!("{\"ok\": true}");
    let (sent, result) = exchange(
        openai_at,
        request,
        ResponseTemplate::new(200).set_body_json(response),
    )
    .await;
    assert_json_eq(
        &body_json(&sent),
        &json!({
            "model": "gpt-4.1",
            "messages": [{"role": "user", "content": "Is 2 + 2 = 4?"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "verdict",
                    "schema": {
                        "type": "object",
                        "properties": {"ok": {"type": "boolean"}},
                        "required": ["ok"],
                        "additionalProperties": false
                    },
                    "strict": true
                }
            }
        }),
    );
    assert_eq!(result.unwrap().structured_output, Some(json!({"ok": true})));
}

#[test]
fn tool_calls_are_parsed_and_bad_arguments_passed_through() {
    let body = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4.1",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": null,
                "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "read_file", "arguments": "{\"path\": \"/a.txt\"}"}},
                    {"id": "call_b", "type": "function",
                     "function": {"name": "read_file", "arguments": "{\"path\": "}},
                    {"type": "function", "function": {"name": "ls", "arguments": ""}}
                ]
            },
            "finish_reason": "tool_calls"
        }],
        "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}
    });
    let response = openai::parse_response(body.to_string().as_bytes()).unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.message.content,
        vec![
            ContentBlock::ToolUse(ToolCall::new("call_1", "read_file", json!({"path": "/a.txt"}))),
            ContentBlock::ToolUse(ToolCall::new(
                "call_b",
                "read_file",
                Value::String("{\"path\": ".into())
            )),
            // No id from the server: one is made from the position.
            ContentBlock::ToolUse(ToolCall::new("call_2", "ls", json!({}))),
        ]
    );
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 82,
            output_tokens: 17,
            ..Usage::default()
        }
    );
}

#[test]
fn reasoning_refusal_and_finish_reasons() {
    let parse = |message: Value, finish: &str| {
        openai::parse_response(
            json!({"choices": [{"message": message, "finish_reason": finish}]})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
    };
    let r = parse(json!({"content": "42", "reasoning_content": "6 * 7"}), "stop");
    assert_eq!(
        r.message.content,
        vec![
            ContentBlock::Reasoning {
                text: "6 * 7".into(),
                signature: None
            },
            ContentBlock::text("42")
        ]
    );
    let r = parse(
        json!({"content": null, "refusal": "I can't help with that."}),
        "stop",
    );
    assert_eq!(r.stop_reason, StopReason::Refusal);
    assert_eq!(r.message.text_content(), "I can't help with that.");
    assert_eq!(
        parse(json!({"content": "…"}), "length").stop_reason,
        StopReason::MaxTokens
    );
    assert_eq!(
        parse(json!({"content": ""}), "content_filter").stop_reason,
        StopReason::Refusal
    );
    // ollama says "stop" even when it calls tools.
    let r = parse(
        json!({"content": "", "tool_calls": [{"id": "c", "function": {"name": "ls", "arguments": {"path": "/"}}}]}),
        "stop",
    );
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(r.message.calls().next().unwrap().args, json!({"path": "/"}));
    assert!(openai::parse_response(br#"{"choices": []}"#).is_err());
}

async fn error_for(response: ResponseTemplate) -> ModelError {
    let request = ModelRequest {
        messages: vec![Message::human("hi")].into(),
        ..ModelRequest::default()
    };
    exchange(openai_at, request, response).await.1.unwrap_err()
}

fn error_body(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

#[tokio::test]
async fn rate_limit_carries_retry_after() {
    let error = error_for(
        ResponseTemplate::new(429)
            .insert_header("retry-after", "20")
            .set_body_json(error_body(
                "Rate limit reached for gpt-4.1 on tokens per min (TPM)",
                "tokens",
                Some("rate_limit_exceeded"),
            )),
    )
    .await;
    assert!(matches!(error, ModelError::RateLimited { .. }), "{error:?}");
    assert_eq!(error.retry_after(), Some(Duration::from_secs(20)));
}

#[tokio::test]
async fn context_length_exceeded_is_context_too_long() {
    let error = error_for(ResponseTemplate::new(400).set_body_json(error_body(
        "This model's maximum context length is 1047576 tokens. However, your messages resulted in 1100000 tokens.",
        "invalid_request_error",
        Some("context_length_exceeded"),
    )))
    .await;
    assert!(matches!(error, ModelError::ContextTooLong { .. }), "{error:?}");

    // vLLM: no code, the message says it.
    let error = error_for(ResponseTemplate::new(400).set_body_json(json!({
        "object": "error",
        "message": "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens.",
        "type": "BadRequestError",
        "param": null,
        "code": 400
    })))
    .await;
    assert!(matches!(error, ModelError::ContextTooLong { .. }), "{error:?}");
}

#[tokio::test]
async fn other_errors_by_status() {
    let error = error_for(ResponseTemplate::new(401).set_body_json(error_body(
        "Incorrect API key provided: sk-test.",
        "invalid_request_error",
        Some("invalid_api_key"),
    )))
    .await;
    assert!(matches!(error, ModelError::Auth { .. }), "{error:?}");

    let error = error_for(ResponseTemplate::new(429).set_body_json(error_body(
        "You exceeded your current quota.",
        "insufficient_quota",
        Some("insufficient_quota"),
    )))
    .await;
    assert!(
        matches!(error, ModelError::Auth { .. }),
        "quota is not transient: {error:?}"
    );

    let error = error_for(ResponseTemplate::new(400).set_body_json(error_body(
        "Invalid schema for function 'read_file'.",
        "invalid_request_error",
        None,
    )))
    .await;
    assert!(matches!(error, ModelError::BadRequest { .. }), "{error:?}");

    let error = error_for(ResponseTemplate::new(500).set_body_json(error_body(
        "The server had an error while processing your request.",
        "server_error",
        None,
    )))
    .await;
    assert!(matches!(error, ModelError::Transport { .. }), "{error:?}");

    let error = error_for(ResponseTemplate::new(503).set_body_string("Service Unavailable")).await;
    assert!(matches!(error, ModelError::Overloaded { .. }), "{error:?}");

    // ollama: `{"error": "…"}` with a plain string.
    let error =
        error_for(ResponseTemplate::new(404).set_body_json(json!({"error": "model \"x\" not found"}))).await;
    assert!(
        matches!(&error, ModelError::BadRequest { message, .. } if message.contains("not found")),
        "{error:?}"
    );
}

#[tokio::test]
async fn malformed_success_body_is_a_typed_error() {
    assert_malformed_bodies_are_other(
        error_for,
        [
            ResponseTemplate::new(200).set_body_string("{\"choices\": [{"),
            ResponseTemplate::new(200).set_body_string(""),
        ],
    )
    .await;
}

#[tokio::test]
async fn unreachable_server_is_a_transport_error() {
    assert_unreachable_is_transport(openai_at(&dead_address())).await;
}

#[test]
fn capabilities_are_declared() {
    let model = openai_at("https://api.openai.com/v1");
    let caps = model.capabilities();
    assert!(!caps.prompt_caching);
    assert_eq!(caps.max_cache_breakpoints, 0);
    assert!(caps.structured_output);
    assert!(caps.images);
    assert_eq!(caps.context_window, Some(1_047_576));
    assert_eq!(model.endpoint(), "https://api.openai.com/v1/chat/completions");
    assert!(
        !format!("{model:?}").contains("sk-test"),
        "Debug must not show the key"
    );

    let local = OpenAiModel::new(OpenAiConfig::compatible("llama3", "http://localhost:8080/v1/")).unwrap();
    assert_eq!(local.endpoint(), "http://localhost:8080/v1/chat/completions");
    assert_eq!(local.capabilities().context_window, None);
    assert_eq!(local.config().inline_system, InlineSystem::UserMarker);
}
