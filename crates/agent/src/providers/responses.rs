//! The OpenAI Responses API provider ([`ResponsesModel`], model string `openai-responses:MODEL`).
//!
//! One `POST {base_url}/responses` per call, stateless: `"store": false` and every turn sent as
//! input items, so `previous_response_id` is never needed and a thread can move between
//! providers. Reasoning items come back with `encrypted_content` (`"include":
//! ["reasoning.encrypted_content"]`) and are passed back on later turns, as OpenAI asks for
//! reasoning models that call tools. How a [`ModelRequest`] maps onto the body is in
//! `request.rs`, how a response is read in `response.rs`; error bodies have the Chat Completions
//! shape and are read by [`openai::parse_error`](super::openai::parse_error).
//!
//! [`ChatModel::stream`] sends `"stream": true` and assembles the event stream (`stream.rs`)
//! into the same `Response` object; with [`OpenAiConfig::stream`] off it makes one plain request.

mod request;
mod response;
mod stream;

use async_trait::async_trait;
use serde_json::Value;
use trellis_middleware::runtime::model::{ModelCapabilities, ModelError};
use trellis_middleware::runtime::stream::{DeltaSink, stream_by_invoking};
use trellis_middleware::{ChatModel, ModelRequest, ModelResponse};

pub use request::REASONING_PREFIX;
pub use response::parse_response;

use super::ProviderError;
use super::http::HttpClient;
use super::openai::{OpenAiConfig, bearer_client, parse_error};
use super::sse::stream_reply;

/// A model behind the OpenAI Responses API. Configured like the Chat Completions provider
/// ([`OpenAiConfig`]: key, base URL, context window, timeouts, `stream`); `max_tokens_field` and
/// `inline_system` do not apply.
#[derive(Debug, Clone)]
pub struct ResponsesModel {
    config: OpenAiConfig,
    endpoint: String,
    client: HttpClient,
}

impl ResponsesModel {
    /// Build the provider. Fails on a base URL that is not http(s) or a key that cannot be sent
    /// as a header.
    pub fn new(mut config: OpenAiConfig) -> Result<Self, ProviderError> {
        let client = bearer_client(&mut config)?;
        let endpoint = format!("{}/responses", config.base_url);
        Ok(Self {
            config,
            endpoint,
            client,
        })
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The exact JSON body [`invoke`](ChatModel::invoke) sends for `request`.
    pub fn request_body(&self, request: &ModelRequest) -> Result<Value, ModelError> {
        let mut body = request::build(request, &self.config.model)?;
        super::merge_extra(&mut body, &request.extra);
        Ok(body)
    }
}

#[async_trait]
impl ChatModel for ResponsesModel {
    fn provider(&self) -> Option<&str> {
        Some("openai")
    }

    fn id(&self) -> &str {
        &self.config.model
    }

    fn capabilities(&self) -> ModelCapabilities {
        self.config.capabilities()
    }

    async fn invoke(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        let body = self.request_body(&request)?;
        let reply = self.client.exchange(&self.endpoint, &body, parse_error).await?;
        let mut response = parse_response(&reply)?;
        if request.response_format.is_some() {
            super::openai::response::take_structured_output(&mut response, &self.config.model);
        }
        Ok(response)
    }

    async fn stream(
        &self,
        request: ModelRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, ModelError> {
        if !self.config.stream {
            return stream_by_invoking(self, request, on_delta).await;
        }
        let mut body = self.request_body(&request)?;
        if let Value::Object(map) = &mut body {
            map.insert("stream".into(), Value::Bool(true));
        }
        let streamed = stream_reply::<stream::Assembler>(
            &self.client,
            &self.endpoint,
            &body,
            parse_error,
            "Responses API",
            on_delta,
        )
        .await?;
        let mut response = parse_response(streamed.body())?;
        if request.response_format.is_some() {
            super::openai::response::take_structured_output(&mut response, &self.config.model);
        }
        streamed.deliver(&response, on_delta);
        Ok(response)
    }
}
