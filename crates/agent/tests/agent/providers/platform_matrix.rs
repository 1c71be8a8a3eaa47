//! The Anthropic request/response matrix on every platform Claude is served from: Anthropic's API,
//! Amazon Bedrock and Google Vertex AI get the same conversation (system breakpoints, tool use and
//! results, thinking, an image, structured output) and answer the same bodies and errors. The
//! body each platform receives is Anthropic's without `model` and with the platform's
//! `anthropic_version` (Bedrock user guide, "Anthropic Claude Messages API"; Anthropic's "Claude
//! on Vertex AI"); the replies and error envelopes are the Messages API's (docs.anthropic.com/en/
//! api/messages, /en/api/errors), which both platforms pass through.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use trellis_agent::providers::{
    AnthropicConfig, AnthropicModel, AwsCredentials, BedrockConfig, Clock, GoogleCredentials, VertexConfig,
};
use trellis_middleware::runtime::message::{
    AiMessage, CacheTtl, ContentBlock, ImageSource, MessageMeta, ToolMessage,
};
use trellis_middleware::runtime::model::{ModelError, ResponseFormat, StopReason};
use trellis_middleware::{ChatModel, Message, ModelRequest, SystemBlock, ToolCall};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::providers::common::*;

#[derive(Debug, Clone, Copy)]
enum Platform {
    Anthropic,
    Bedrock,
    Vertex,
}

const PLATFORMS: [Platform; 3] = [Platform::Anthropic, Platform::Bedrock, Platform::Vertex];

impl Platform {
    fn route(self) -> &'static str {
        match self {
            Self::Anthropic => "/v1/messages",
            Self::Bedrock => "/model/claude-sonnet-4-5/invoke",
            Self::Vertex => {
                "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5:rawPredict"
            }
        }
    }

    /// The model under test, with the model endpoint answering `answer`.
    async fn serve(self, answer: ResponseTemplate) -> (AnthropicModel, MockServer) {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(self.route()))
            .respond_with(answer)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/token"))
            .respond_with(
                ResponseTemplate::new(200).set_body_json(json!({"access_token": "t", "expires_in": 3600})),
            )
            .mount(&server)
            .await;
        let uri = server.uri();
        let model = match self {
            Self::Anthropic => {
                AnthropicModel::new(AnthropicConfig::new("claude-sonnet-4-5", "k").with_base_url(&uri))
            }
            Self::Bedrock => {
                let mut config = BedrockConfig::new(
                    "claude-sonnet-4-5",
                    "us-east-1",
                    AwsCredentials::new("AKIDEXAMPLE", "secret", None),
                );
                config.anthropic.base_url = uri.clone();
                config.clock = Clock::fixed(SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160));
                AnthropicModel::bedrock(config)
            }
            Self::Vertex => {
                let key = json!({"type": "service_account", "client_email": "a@p.iam.gserviceaccount.com",
                                 "private_key": include_str!("../../fixtures/vertex-test-key.pem"),
                                 "token_uri": format!("{uri}/token")});
                let credentials = GoogleCredentials::from_json(&key.to_string(), "test").unwrap();
                let mut config = VertexConfig::new("claude-sonnet-4-5", "p", "us-east5", credentials);
                config.anthropic.base_url = uri.clone();
                AnthropicModel::vertex(config)
            }
        };
        (model.unwrap(), server)
    }

    /// The body this platform should get for the Anthropic body `anthropic`.
    fn expected_body(self, mut anthropic: Value) -> Value {
        let map = anthropic.as_object_mut().unwrap();
        match self {
            Self::Anthropic => {}
            Self::Bedrock | Self::Vertex => {
                map.remove("model");
                let version = if matches!(self, Self::Bedrock) {
                    "bedrock-2023-05-31"
                } else {
                    "vertex-2023-10-16"
                };
                map.insert("anthropic_version".into(), json!(version));
            }
        }
        anthropic
    }
}

async fn model_requests(server: &MockServer, route: &str) -> Vec<wiremock::Request> {
    let all = server.received_requests().await.unwrap();
    all.into_iter().filter(|r| r.url.path() == route).collect()
}

/// A conversation touching every mapping: breakpoints, thinking, a tool call and its result, an
/// image, structured output.
fn conversation() -> ModelRequest {
    let call = ToolCall::new("toolu_01", "read_file", json!({"path": "/notes.md"}));
    ModelRequest {
        system: vec![SystemBlock::new("You are Trellis.").with_cache_breakpoint(CacheTtl::OneHour)],
        messages: vec![
            Message::human("Summarize my notes."),
            Message::Ai(AiMessage {
                content: vec![
                    ContentBlock::Reasoning {
                        text: "Read them first.".into(),
                        signature: Some("sig-1".into()),
                    },
                    ContentBlock::ToolUse(call),
                ],
                meta: MessageMeta::default(),
            }),
            with_breakpoint(
                Message::Tool(ToolMessage::text("toolu_01", "read_file", "buy tea")),
                CacheTtl::FiveMinutes,
            ),
            Message::Human(trellis_middleware::runtime::message::HumanMessage {
                content: vec![ContentBlock::Image {
                    source: ImageSource::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into(),
                    },
                }],
                meta: MessageMeta::default(),
            }),
        ]
        .into(),
        tools: vec![read_file_tool()],
        response_format: Some(ResponseFormat {
            name: "summary".into(),
            schema: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            strict: false,
        }),
        ..ModelRequest::default()
    }
}

fn tool_use_reply() -> Value {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "text", "text": "Done."},
            {"type": "tool_use", "id": "toolu_02", "name": "summary", "input": {"text": "Buy tea."}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 50, "output_tokens": 9, "cache_read_input_tokens": 40,
                  "cache_creation_input_tokens": 0}
    })
}

#[tokio::test]
async fn every_platform_gets_the_same_conversation_and_reads_the_same_reply() {
    let mut anthropic_body = None;
    let mut replies = Vec::new();
    for platform in PLATFORMS {
        let (model, server) = platform
            .serve(ResponseTemplate::new(200).set_body_json(tool_use_reply()))
            .await;
        let reply = model.invoke(conversation()).await.unwrap();
        let sent = model_requests(&server, platform.route()).await;
        assert_eq!(sent.len(), 1, "{platform:?}");
        let body = body_json(&sent[0]);
        let anthropic = anthropic_body.get_or_insert_with(|| body.clone()).clone();
        assert_json_eq(&body, &platform.expected_body(anthropic));
        replies.push(reply);
    }
    let first = &replies[0];
    assert_eq!(first.structured_output, Some(json!({"text": "Buy tea."})));
    assert_eq!(first.stop_reason, StopReason::EndTurn);
    assert_eq!(first.usage.cache_read_tokens, 40);
    for reply in &replies[1..] {
        assert_eq!(reply, first);
    }
    // The Anthropic body itself is the documented one (checked field by field elsewhere); here
    // the parts that matter on every platform.
    let body = anthropic_body.unwrap();
    assert_eq!(
        body["system"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
    assert_eq!(body["messages"][1]["content"][0]["type"], "thinking");
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
}

#[tokio::test]
async fn every_platform_types_the_same_errors_alike() {
    type Expected = fn(&ModelError) -> bool;
    let cases: [(u16, Value, Expected); 5] = [
        (
            429,
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
            |e| matches!(e, ModelError::RateLimited { .. }),
        ),
        (
            529,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            |e| matches!(e, ModelError::Overloaded { .. }),
        ),
        (
            401,
            json!({"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}),
            |e| matches!(e, ModelError::Auth { .. }),
        ),
        (
            400,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}),
            |e| matches!(e, ModelError::ContextTooLong { .. }),
        ),
        (
            500,
            json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}),
            |e| matches!(e, ModelError::Transport { .. }),
        ),
    ];
    for (status, body, expected) in cases {
        for platform in PLATFORMS {
            let (model, _server) = platform
                .serve(ResponseTemplate::new(status).set_body_json(body.clone()))
                .await;
            let err = model.invoke(conversation()).await.unwrap_err();
            assert!(expected(&err), "{platform:?} {status}: {err:?}");
            assert_eq!(err.status(), Some(status), "{platform:?}");
        }
    }
}

#[tokio::test]
async fn every_platform_declares_the_same_capabilities() {
    let mut all = Vec::new();
    for platform in PLATFORMS {
        let (model, _server) = platform.serve(ResponseTemplate::new(200)).await;
        all.push(model.capabilities());
    }
    assert!(all[0].prompt_caching && all[0].structured_output && all[0].images);
    assert_eq!(all[0].max_cache_breakpoints, 4);
    assert!(all.iter().all(|c| *c == all[0]), "{all:?}");
}
