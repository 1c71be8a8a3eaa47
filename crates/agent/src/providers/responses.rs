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

use serde_json::Value;
#[cfg(doc)]
use trellis_middleware::ChatModel;
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::{ModelRequest, ModelResponse};

pub use request::REASONING_PREFIX;
pub use response::parse_response;

use super::openai::OpenAiConfig;
use super::openai_api::{OpenAiApiModel, Responses, WireApi};
use super::tool_json::{ToolJsonCache, Tools};

/// A model behind the OpenAI Responses API: `ResponsesModel::new(config)`, then the [`ChatModel`]
/// methods, `request_body` (the exact JSON body `invoke` sends), `config` and `endpoint`.
/// Configured like the Chat Completions provider ([`OpenAiConfig`]: key, base URL, context window,
/// timeouts, `stream`); `max_tokens_field` and `inline_system` do not apply.
pub type ResponsesModel = OpenAiApiModel<Responses>;

impl WireApi for Responses {
    const TYPE_NAME: &'static str = "ResponsesModel";
    const NAME: &'static str = "Responses API";
    const PATH: &'static str = "responses";
    type Assembler = stream::Assembler;

    fn request_body(
        config: &OpenAiConfig,
        request: &ModelRequest,
        tools: &ToolJsonCache,
    ) -> Result<(Value, Tools), ModelError> {
        request::build(request, &config.model, tools)
    }

    fn parse_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
        parse_response(body)
    }
}
