//! Helpers shared by the Anthropic wire-format tests (`anthropic_*.rs`): the model under
//! test, the API reference's example answer, and one request/response exchange with a mock server.
//! Needs the `common` module declared next to it.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use trellis_agent::providers::anthropic::{AnthropicConfig, AnthropicModel};
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::{ChatModel, ModelRequest};
use wiremock::ResponseTemplate;

use super::common::{only_request, server_answering};

pub const MODEL: &str = "claude-sonnet-4-5";

pub fn model_at(base_url: &str) -> AnthropicModel {
    AnthropicModel::new(AnthropicConfig::new(MODEL, "test-key").with_base_url(base_url)).unwrap()
}

/// A plain text answer, as in the API reference's example response.
pub fn text_response() -> serde_json::Value {
    json!({
        "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "Hi! My name is Claude."}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {
            "input_tokens": 2095,
            "output_tokens": 503,
            "cache_creation_input_tokens": 2051,
            "cache_read_input_tokens": 0
        }
    })
}

/// Send `request`, answered with `response`; return the body sent and the result.
pub async fn exchange(
    request: ModelRequest,
    response: ResponseTemplate,
) -> (
    wiremock::Request,
    Result<trellis_middleware::ModelResponse, ModelError>,
) {
    let server = server_answering("/v1/messages", response).await;
    let result = model_at(&server.uri()).invoke(request).await;
    (only_request(&server).await, result)
}
