//! Issue 21: an `error` event in the middle of a stream, and a stream cut before its end, keep the
//! request id of the answer that opened the stream. The id comes from the response headers:
//! Anthropic's `request-id` ("Errors", docs.anthropic.com/en/api/errors: every response carries
//! one; errors "can occur after returning a 200 response" when streaming), OpenAI's
//! `x-request-id` (openai-python `_request_id`). Before, such errors had no HTTP details at all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use trellis_agent::providers::{AnthropicConfig, AnthropicModel, OpenAiConfig, OpenAiModel, ResponsesModel};
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::stream::{DeltaSink, ModelDelta};
use trellis_middleware::{ChatModel, ModelRequest};
use wiremock::ResponseTemplate;

use crate::providers::common::server_answering;

fn events(body: String, id_header: &str, id: &str) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_string(body)
        .insert_header("content-type", "text/event-stream")
        .insert_header(id_header, id)
}

async fn streamed(model: &dyn ChatModel) -> ModelError {
    let ignore = |_: ModelDelta| {};
    let sink: DeltaSink<'_> = &ignore;
    model.stream(ModelRequest::default(), sink).await.unwrap_err()
}

const ANTHROPIC_START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n";

#[tokio::test]
async fn an_anthropic_error_event_keeps_the_request_id() {
    let body = format!(
        "{ANTHROPIC_START}event: error\ndata: {}\n\n",
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    let server = server_answering("/v1/messages", events(body, "request-id", "req_mid_stream_1")).await;
    let model =
        AnthropicModel::new(AnthropicConfig::new("claude-sonnet-4-5", "k").with_base_url(server.uri()))
            .unwrap();
    let err = streamed(&model).await;
    assert!(matches!(err, ModelError::Overloaded { .. }), "{err:?}");
    assert_eq!(err.request_id(), Some("req_mid_stream_1"));
    assert_eq!(err.status(), Some(200), "the stream was opened with a 200");
    assert!(
        err.to_string().ends_with("[request id req_mid_stream_1]"),
        "{err}"
    );
}

#[tokio::test]
async fn a_cut_anthropic_stream_keeps_the_request_id() {
    let server = server_answering(
        "/v1/messages",
        events(ANTHROPIC_START.to_owned(), "request-id", "req_cut_2"),
    )
    .await;
    let model =
        AnthropicModel::new(AnthropicConfig::new("claude-sonnet-4-5", "k").with_base_url(server.uri()))
            .unwrap();
    let err = streamed(&model).await;
    assert!(matches!(err, ModelError::Transport { .. }), "{err:?}");
    assert_eq!(err.request_id(), Some("req_cut_2"));
}

#[tokio::test]
async fn an_openai_error_chunk_keeps_the_x_request_id() {
    // A chunk holding `error` (openai-python `Stream.__stream__` raises `APIError` on it).
    let body = format!(
        "data: {}\n\n",
        json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}})
    );
    let server = server_answering("/v1/chat/completions", events(body, "x-request-id", "req_chat_3")).await;
    let model =
        OpenAiModel::new(OpenAiConfig::openai("gpt-4.1", "sk").with_base_url(format!("{}/v1", server.uri())))
            .unwrap();
    let err = streamed(&model).await;
    assert!(err.message().contains("Rate limit reached"), "{err:?}");
    assert_eq!(err.request_id(), Some("req_chat_3"));
}

#[tokio::test]
async fn a_responses_error_event_keeps_the_x_request_id() {
    // The `error` streaming event (platform.openai.com/docs/api-reference/responses-streaming/error):
    // `code`, `message`, `param`, `sequence_number`.
    let body = format!(
        "event: response.created\ndata: {}\n\nevent: error\ndata: {}\n\n",
        json!({"type": "response.created", "sequence_number": 0,
               "response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}}),
        json!({"type": "error", "code": "server_error", "message": "The server had an error",
               "param": null, "sequence_number": 1})
    );
    let server = server_answering("/v1/responses", events(body, "x-request-id", "req_resp_4")).await;
    let model = ResponsesModel::new(
        OpenAiConfig::openai("gpt-5", "sk").with_base_url(format!("{}/v1", server.uri())),
    )
    .unwrap();
    let err = streamed(&model).await;
    assert!(err.is_transient(), "a server_error is retried: {err:?}");
    assert_eq!(err.request_id(), Some("req_resp_4"));
    assert!(err.message().contains("The server had an error"), "{err}");
}
