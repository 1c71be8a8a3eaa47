//! Anthropic Messages API wire format, checked against a mock server.
//!
//! Every expected body is written out literally, from Anthropic's public Messages API reference
//! (`POST /v1/messages`: `system` as text blocks with `cache_control`, `messages` with `user` /
//! `assistant` turns, `tool_use` / `tool_result` / `thinking` / `image` blocks, `tools` with
//! `input_schema`, `tool_choice`) and its errors page.
//!
//! This file: API errors by type and status, malformed bodies and an unreachable server, each a
//! typed `ModelError`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::{Message, ModelRequest};
use wiremock::ResponseTemplate;

use crate::providers::anthropic_common::*;
use crate::providers::common::*;

fn error_body(kind: &str, message: &str) -> serde_json::Value {
    json!({
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"
    })
}

async fn error_for(response: ResponseTemplate) -> ModelError {
    let request = ModelRequest {
        messages: vec![Message::human("hi")].into(),
        ..ModelRequest::default()
    };
    exchange(request, response).await.1.unwrap_err()
}

#[tokio::test]
async fn rate_limit_carries_retry_after() {
    let error = error_for(
        ResponseTemplate::new(429)
            .insert_header("retry-after", "7")
            .set_body_json(error_body(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            )),
    )
    .await;
    assert!(matches!(error, ModelError::RateLimited { .. }), "{error:?}");
    assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
    assert!(error.is_transient());
    assert!(error.to_string().contains("per-minute rate limit"));
}

#[tokio::test]
async fn overloaded_is_transient() {
    let error =
        error_for(ResponseTemplate::new(529).set_body_json(error_body("overloaded_error", "Overloaded")))
            .await;
    assert!(matches!(error, ModelError::Overloaded { .. }), "{error:?}");
    assert!(error.is_transient());
}

#[tokio::test]
async fn prompt_too_long_is_context_too_long() {
    let error = error_for(ResponseTemplate::new(400).set_body_json(error_body(
        "invalid_request_error",
        "prompt is too long: 208310 tokens > 200000 maximum",
    )))
    .await;
    assert!(matches!(error, ModelError::ContextTooLong { .. }), "{error:?}");
    assert!(!error.is_transient());
}

#[tokio::test]
async fn other_errors_by_type_and_status() {
    let error = error_for(
        ResponseTemplate::new(401).set_body_json(error_body("authentication_error", "invalid x-api-key")),
    )
    .await;
    assert!(matches!(error, ModelError::Auth { .. }), "{error:?}");

    let error = error_for(
        ResponseTemplate::new(403).set_body_json(error_body("permission_error", "no access to this model")),
    )
    .await;
    assert!(matches!(error, ModelError::Auth { .. }), "{error:?}");

    let error = error_for(
        ResponseTemplate::new(400)
            .set_body_json(error_body("invalid_request_error", "messages: field required")),
    )
    .await;
    assert!(matches!(error, ModelError::BadRequest { .. }), "{error:?}");

    let error = error_for(ResponseTemplate::new(413).set_body_json(error_body(
        "request_too_large",
        "Request exceeds the maximum size",
    )))
    .await;
    assert!(matches!(error, ModelError::ContextTooLong { .. }), "{error:?}");

    let error =
        error_for(ResponseTemplate::new(500).set_body_json(error_body("api_error", "Internal server error")))
            .await;
    assert!(matches!(error, ModelError::Transport { .. }), "{error:?}");
    assert!(error.is_transient());

    // A proxy's HTML page instead of a JSON error: classified by status.
    let error = error_for(ResponseTemplate::new(502).set_body_string("<html>Bad Gateway</html>")).await;
    assert!(matches!(error, ModelError::Transport { .. }), "{error:?}");
}

#[tokio::test]
async fn malformed_success_body_is_a_typed_error() {
    assert_malformed_bodies_are_other(
        error_for,
        [
            ResponseTemplate::new(200).set_body_string("{\"content\": ["),
            ResponseTemplate::new(200).set_body_json(json!({"content": "not a list"})),
        ],
    )
    .await;
}

#[tokio::test]
async fn unreachable_server_is_a_transport_error() {
    assert_unreachable_is_transport(model_at(&dead_address())).await;
}

/// 408 and 409 are retried, as the official SDKs retry them; `x-should-retry` wins over the
/// status (the Anthropic and OpenAI SDKs obey it), on plain and on streamed calls.
#[tokio::test]
async fn request_timeouts_conflicts_and_x_should_retry() {
    use trellis_agent::providers::{AnthropicConfig, AnthropicModel};
    use trellis_middleware::{ChatModel, ModelRequest};
    let answer = |status: u16, should: Option<&str>| {
        let mut r = wiremock::ResponseTemplate::new(status).set_body_json(serde_json::json!({
            "type": "error", "error": {"type": "invalid_request_error", "message": "nope"}
        }));
        if let Some(v) = should {
            r = r.insert_header("x-should-retry", v);
        }
        r
    };
    for (status, should, transient) in [
        (408, None, true),
        (409, None, true),
        (400, Some("true"), true),
        (400, None, false),
        (529, Some("false"), false),
    ] {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::method("POST"))
            .respond_with(answer(status, should))
            .mount(&server)
            .await;
        let model =
            AnthropicModel::new(AnthropicConfig::new("claude-sonnet-4-5", "k").with_base_url(server.uri()))
                .unwrap();
        let plain = model.invoke(ModelRequest::default()).await.unwrap_err();
        assert_eq!(plain.is_transient(), transient, "{status} {should:?}: {plain:?}");
        let streamed = model.stream(ModelRequest::default(), &|_| {}).await.unwrap_err();
        assert_eq!(
            streamed.is_transient(),
            transient,
            "streamed {status} {should:?}: {streamed:?}"
        );
    }
}

/// `stop_reason: model_context_window_exceeded` (documented for Claude Sonnet 4.5 and later, with
/// the `model-context-window-exceeded` beta) is the context-full condition, so summarization runs.
#[test]
fn a_reply_cut_at_the_context_window_is_context_too_long() {
    let body = serde_json::json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "partial"}], "stop_reason": "model_context_window_exceeded",
        "stop_sequence": null, "usage": {"input_tokens": 199000, "output_tokens": 1000}
    });
    let err = trellis_agent::providers::anthropic::parse_response(body.to_string().as_bytes()).unwrap_err();
    assert!(
        matches!(
            err,
            trellis_middleware::runtime::model::ModelError::ContextTooLong { .. }
        ),
        "{err:?}"
    );
}
