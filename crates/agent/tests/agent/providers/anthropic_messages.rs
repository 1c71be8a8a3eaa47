//! Anthropic Messages API wire format, checked against a mock server.
//!
//! Every expected body is written out literally, from Anthropic's public Messages API reference
//! (`POST /v1/messages`: `system` as text blocks with `cache_control`, `messages` with `user` /
//! `assistant` turns, `tool_use` / `tool_result` / `thinking` / `image` blocks, `tools` with
//! `input_schema`, `tool_choice`) and its errors page.
//!
//! This file: how a conversation is sent — system blocks and cache breakpoints, tools, tool use and
//! results, thinking, images, and system messages in mid-conversation. Structured output, extra
//! parameters and capabilities: `anthropic_options.rs`; errors:
//! `anthropic_errors.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use trellis_agent::providers::anthropic;
use trellis_middleware::runtime::message::{
    AiMessage, CacheTtl, ContentBlock, HumanMessage, ImageSource, MessageMeta, SystemMessage, ToolMessage,
};
use trellis_middleware::runtime::model::{StopReason, ToolChoice, Usage};
use trellis_middleware::{Message, ModelRequest, SystemBlock, ToolCall};
use wiremock::ResponseTemplate;

use crate::providers::anthropic_common::*;
use crate::providers::common::*;

#[tokio::test]
async fn system_blocks_breakpoints_and_tools() {
    let request = ModelRequest {
        system: vec![
            SystemBlock::new("You are Trellis.").with_cache_breakpoint(CacheTtl::OneHour),
            SystemBlock::new("## Skills\n- web-research").with_cache_breakpoint(CacheTtl::FiveMinutes),
            SystemBlock::new("<agent_memory>likes tea</agent_memory>"),
        ],
        messages: vec![
            with_breakpoint(Message::human("Hi"), CacheTtl::FiveMinutes),
            with_breakpoint(Message::ai("Hello!"), CacheTtl::FiveMinutes),
            // A fifth breakpoint: over Anthropic's limit of four, so it is not sent.
            with_breakpoint(Message::human("What can you do?"), CacheTtl::FiveMinutes),
        ]
        .into(),
        tools: vec![read_file_tool()],
        temperature: Some(0.2),
        ..ModelRequest::default()
    };
    let (sent, result) = exchange(request, ResponseTemplate::new(200).set_body_json(text_response())).await;

    assert_eq!(header(&sent, "x-api-key").as_deref(), Some("test-key"));
    assert_eq!(header(&sent, "anthropic-version").as_deref(), Some("2023-06-01"));
    assert_eq!(header(&sent, "content-type").as_deref(), Some("application/json"));
    assert_eq!(header(&sent, "authorization"), None);
    assert_json_eq(
        &body_json(&sent),
        &json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 8192,
            "temperature": 0.2,
            "system": [
                {"type": "text", "text": "You are Trellis.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                {"type": "text", "text": "## Skills\n- web-research", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "<agent_memory>likes tea</agent_memory>"}
            ],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Hello!", "cache_control": {"type": "ephemeral"}}
                ]},
                {"role": "user", "content": [{"type": "text", "text": "What can you do?"}]}
            ],
            "tools": [{
                "name": "read_file",
                "description": "Read a file.",
                "input_schema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"]
                }
            }]
        }),
    );

    let response = result.unwrap();
    assert_eq!(response.message.text_content(), "Hi! My name is Claude.");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 2095,
            output_tokens: 503,
            cache_read_tokens: 0,
            cache_write_tokens: 2051,
        }
    );
}

#[test]
fn one_hour_breakpoints_after_a_five_minute_one_are_shortened() {
    let model = model_at("http://localhost:1");
    let request = ModelRequest {
        system: vec![
            SystemBlock::new("a").with_cache_breakpoint(CacheTtl::FiveMinutes),
            SystemBlock::new("b").with_cache_breakpoint(CacheTtl::OneHour),
        ],
        messages: vec![Message::human("x")].into(),
        max_output_tokens: Some(100),
        ..ModelRequest::default()
    };
    assert_json_eq(
        &model.request_body(&request).unwrap(),
        &json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "system": [
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}
            ],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
        }),
    );
}

#[tokio::test]
async fn tool_use_and_results_merged_into_one_user_message() {
    let mut ai = AiMessage::text("Looking.");
    ai.content.insert(
        0,
        ContentBlock::Reasoning {
            text: "I should list the root first.".into(),
            signature: Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds".into()),
        },
    );
    ai.content.push(ContentBlock::ToolUse(ToolCall::new(
        "toolu_01",
        "ls",
        json!({"path": "/"}),
    )));
    ai.content.push(ContentBlock::ToolUse(ToolCall::new(
        "toolu_02",
        "read_file",
        json!({"path": "/a.txt"}),
    )));
    let screenshot = ToolMessage {
        call_id: "toolu_01".into(),
        name: "ls".into(),
        content: vec![
            ContentBlock::text("a.txt"),
            ContentBlock::Image {
                source: ImageSource::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into(),
                },
            },
        ],
        is_error: false,
        meta: MessageMeta::default(),
    };
    let request = ModelRequest {
        messages: vec![
            Message::human("What is in /?"),
            Message::Ai(ai),
            Message::Tool(screenshot),
            with_breakpoint(
                Message::Tool(ToolMessage::error(
                    "toolu_02",
                    "read_file",
                    "file not found: /a.txt",
                )),
                CacheTtl::FiveMinutes,
            ),
        ]
        .into(),
        tools: vec![read_file_tool()],
        tool_choice: Some(ToolChoice::Auto),
        ..ModelRequest::default()
    };
    let response = json!({
        "id": "msg_02",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "thinking", "thinking": "The file is missing.", "signature": "sig-2"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
            {"type": "text", "text": "Let me check again."},
            {"type": "tool_use", "id": "toolu_03", "name": "ls", "input": {"path": "/docs"}}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 1200}
    });
    let (sent, result) = exchange(request, ResponseTemplate::new(200).set_body_json(response)).await;

    assert_json_eq(
        &body_json(&sent),
        &json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 8192,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is in /?"}]},
                {"role": "assistant", "content": [
                    {
                        "type": "thinking",
                        "thinking": "I should list the root first.",
                        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
                    },
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "toolu_01", "name": "ls", "input": {"path": "/"}},
                    {"type": "tool_use", "id": "toolu_02", "name": "read_file", "input": {"path": "/a.txt"}}
                ]},
                {"role": "user", "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01",
                        "content": [
                            {"type": "text", "text": "a.txt"},
                            {"type": "image", "source": {
                                "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="
                            }}
                        ]
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_02",
                        "content": "file not found: /a.txt",
                        "is_error": true,
                        "cache_control": {"type": "ephemeral"}
                    }
                ]}
            ],
            "tools": [{
                "name": "read_file",
                "description": "Read a file.",
                "input_schema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"]
                }
            }],
            "tool_choice": {"type": "auto"}
        }),
    );

    let response = result.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.message.content,
        vec![
            ContentBlock::Reasoning {
                text: "The file is missing.".into(),
                signature: Some("sig-2".into()),
            },
            ContentBlock::Reasoning {
                text: String::new(),
                signature: Some(format!(
                    "{}EmwKAhgBEgy3va3pzix/LafPsn4a",
                    anthropic::REDACTED_THINKING_PREFIX
                )),
            },
            ContentBlock::text("Let me check again."),
            ContentBlock::ToolUse(ToolCall::new("toolu_03", "ls", json!({"path": "/docs"}))),
        ]
    );
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 50,
            output_tokens: 20,
            cache_read_tokens: 1200,
            cache_write_tokens: 0,
        }
    );
}

#[test]
fn redacted_thinking_goes_back_as_it_came() {
    let model = model_at("http://localhost:1");
    let parsed = anthropic::parse_response(
        json!({
            "content": [
                {"type": "redacted_thinking", "data": "EmwKAhgB"},
                {"type": "text", "text": "ok"}
            ],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1}
        })
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let request = ModelRequest {
        messages: vec![
            Message::human("q"),
            Message::Ai(parsed.message),
            Message::human("and?"),
        ]
        .into(),
        ..ModelRequest::default()
    };
    let body = model.request_body(&request).unwrap();
    assert_json_eq(
        &body["messages"][1],
        &json!({"role": "assistant", "content": [
            {"type": "redacted_thinking", "data": "EmwKAhgB"},
            {"type": "text", "text": "ok"}
        ]}),
    );
}

#[test]
fn tool_results_stay_ahead_of_text_in_a_merged_user_message() {
    let model = model_at("http://localhost:1");
    let request = ModelRequest {
        messages: vec![
            Message::human("Read both."),
            Message::Ai(AiMessage::tool_calls([
                ToolCall::new("t1", "read_file", json!({"path": "/a"})),
                ToolCall::new("t2", "read_file", json!({"path": "/b"})),
            ])),
            Message::Tool(ToolMessage::text("t1", "read_file", "A")),
            Message::System(SystemMessage {
                content: vec![ContentBlock::text("Memory was updated.")],
                ..SystemMessage::default()
            }),
            Message::Tool(ToolMessage::text("t2", "read_file", "B")),
        ]
        .into(),
        ..ModelRequest::default()
    };
    assert_json_eq(
        &model.request_body(&request).unwrap()["messages"][2],
        &json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "B"},
            {"type": "text", "text": "<system-reminder>\nMemory was updated.\n</system-reminder>"}
        ]}),
    );
}

#[test]
fn images_by_base64_and_url() {
    let model = model_at("http://localhost:1");
    let request = ModelRequest {
        messages: vec![Message::Human(HumanMessage {
            content: vec![
                ContentBlock::Image {
                    source: ImageSource::Base64 {
                        media_type: "image/jpeg".into(),
                        data: "/9j/4AAQSkZJRg==".into(),
                    },
                },
                ContentBlock::Image {
                    source: ImageSource::Url {
                        url: "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg"
                            .into(),
                    },
                },
                ContentBlock::text("Compare these images."),
            ],
            meta: MessageMeta::default(),
        })]
        .into(),
        ..ModelRequest::default()
    };
    assert_json_eq(
        &model.request_body(&request).unwrap()["messages"],
        &json!([{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQSkZJRg=="}},
            {"type": "image", "source": {
                "type": "url",
                "url": "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg"
            }},
            {"type": "text", "text": "Compare these images."}
        ]}]),
    );
}

#[tokio::test]
async fn mid_conversation_system_message_becomes_marked_user_text_and_tools() {
    let disclosed = SystemMessage {
        content: vec![ContentBlock::text("The skill web-research is active.")],
        tools: vec![trellis_middleware::runtime::model::ToolSpec {
            name: "web_search".into(),
            description: "Search the web.".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        }],
        meta: MessageMeta::default(),
    };
    let request = ModelRequest {
        system: vec![SystemBlock::new("You are Trellis.")],
        messages: vec![
            Message::human("Research ants."),
            Message::ai("I will read the skill first."),
            Message::System(disclosed),
            Message::human("Go on."),
        ]
        .into(),
        tools: vec![read_file_tool()],
        ..ModelRequest::default()
    };
    let (sent, _) = exchange(request, ResponseTemplate::new(200).set_body_json(text_response())).await;
    assert_json_eq(
        &body_json(&sent),
        &json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 8192,
            "system": [{"type": "text", "text": "You are Trellis."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Research ants."}]},
                {"role": "assistant", "content": [{"type": "text", "text": "I will read the skill first."}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "<system-reminder>\nThe skill web-research is active.\n</system-reminder>"},
                    {"type": "text", "text": "Go on."}
                ]}
            ],
            "tools": [
                {
                    "name": "read_file",
                    "description": "Read a file.",
                    "input_schema": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"]
                    }
                },
                {
                    "name": "web_search",
                    "description": "Search the web.",
                    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}
                }
            ]
        }),
    );
}
