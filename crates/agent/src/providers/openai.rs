//! The OpenAI Chat Completions provider ([`OpenAiModel`]), for OpenAI and for servers that speak the
//! same API: ollama (`http://localhost:11434/v1`), vLLM, llama.cpp's `llama-server`.
//!
//! One `POST {base_url}/chat/completions` per call — streamed (`stream.rs`) for
//! [`ChatModel::stream`], which the agent loop uses, and plain for [`ChatModel::invoke`] — with
//! `Authorization: Bearer <key>` when a key is configured (local servers need none) and
//! `content-type: application/json`. The request mapping is:
//!
//! * The system blocks are joined with a blank line into one leading `system` message (OpenAI caches
//!   prefixes automatically, so breakpoints are ignored; many local chat templates accept a single
//!   system message only, at the start).
//! * Human messages: `content` is a string for a single text block, else an array of `text` and
//!   `image_url` parts (inline images as `data:` URLs). AI messages: `content` (`null` when the message
//!   only calls tools) and `tool_calls` `[{id, type: "function", function: {name, arguments}}]`, with
//!   `arguments` a JSON string. Reasoning is not sent back. Tool results: `{"role": "tool",
//!   "tool_call_id", "content"}`; images in tool results are replaced by
//!   [`IMAGE_OMITTED`].
//! * A mid-conversation [`Message::System`](trellis_middleware::Message::System): per
//!   [`InlineSystem`], a `system` message in place (OpenAI accepts those) or a `user` message wrapped in
//!   `<system-reminder>` (the default for other servers, whose templates often reject late system
//!   messages). Its tools are appended to `tools`.
//! * `tools` `[{type: "function", function: {name, description, parameters}}]`, `tool_choice`
//!   (`auto`/`none`/`required`/`{type: "function", function: {name}}`, only with tools),
//!   `response_format` `{type: "json_schema", json_schema: {name, schema, strict}}`, the output cap as
//!   `max_completion_tokens` (or `max_tokens` for older servers, see [`MaxTokensField`]),
//!   `temperature`; [`ModelRequest::extra`] keys are added at the top level unless already set.
//!
//! With a response format, the answer's text parsed as JSON is returned as
//! [`ModelResponse::structured_output`].
//!
//! # Capabilities
//!
//! No prompt caching breakpoints (OpenAI caches long prefixes automatically; other servers do what
//! they do), structured output, images per configuration. Tools arriving mid-conversation are declared
//! unsupported: Chat Completions has a single top-level `tools` list that precedes the messages in
//! every prefix cache, so a disclosed tool changes the start of the prompt. A `Message::System` that
//! arrives anyway is still sent as described above.

pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod schema;
mod stream;
mod wire;

use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde_json::{Map, Value};
#[cfg(doc)]
use trellis_middleware::ChatModel;
use trellis_middleware::runtime::model::{ModelCapabilities, ModelError};
use trellis_middleware::{ModelRequest, ModelResponse};

pub use request::IMAGE_OMITTED;
pub use response::{parse_error, parse_response};

use super::ProviderError;
use super::http::{ApiKey, HttpClient, HttpConfig, normalize_base_url, secret_header};
use super::openai_api::{ChatCompletions, OpenAiApiModel, WireApi};
use super::tool_json::{ToolJsonCache, Tools};

/// The public OpenAI API.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Which body field carries the output-token cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensField {
    /// `max_completion_tokens` (current OpenAI; required by reasoning models).
    #[default]
    MaxCompletionTokens,
    /// `max_tokens` (deprecated by OpenAI, still the one some older servers read).
    MaxTokens,
}

/// How a mid-conversation system message is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InlineSystem {
    /// As a `system` message in place.
    SystemRole,
    /// As a `user` message wrapped in `<system-reminder>` … `</system-reminder>`.
    #[default]
    UserMarker,
}

/// How to reach one Chat Completions model.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// The model id, e.g. `gpt-4.1` or `qwen3:8b`.
    pub model: String,
    /// The key sent as `Authorization: Bearer …`; `None` sends no `Authorization` header.
    pub api_key: Option<ApiKey>,
    /// Base URL up to and without `/chat/completions`, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Declared context window, where known.
    pub context_window: Option<u64>,
    /// Declared support for images.
    pub images: bool,
    /// Declared support for `response_format` (json_schema).
    pub structured_output: bool,
    /// Where the output cap goes.
    pub max_tokens_field: MaxTokensField,
    /// How mid-conversation system messages are sent.
    pub inline_system: InlineSystem,
    /// Timeouts.
    pub http: HttpConfig,
    /// Stream replies (`"stream": true` with `stream_options.include_usage`; the default); `false`
    /// makes one plain request per call.
    pub stream: bool,
}

impl OpenAiConfig {
    /// OpenAI itself: images, structured output, system messages in place, and the context window of
    /// known model families ([`known_context_window`]).
    pub fn openai(model: impl Into<String>, api_key: impl Into<ApiKey>) -> Self {
        let model = model.into();
        Self {
            context_window: known_context_window(&model),
            model,
            api_key: Some(api_key.into()),
            base_url: DEFAULT_BASE_URL.to_owned(),
            images: true,
            structured_output: true,
            max_tokens_field: MaxTokensField::MaxCompletionTokens,
            inline_system: InlineSystem::SystemRole,
            http: HttpConfig::default(),
            stream: true,
        }
    }

    /// Another server speaking Chat Completions at `base_url` (e.g. `http://localhost:11434/v1`): no
    /// key, no declared images or context window (set them if the model has them), structured output
    /// declared (ollama, vLLM and llama.cpp accept `json_schema`), late system messages as user text.
    pub fn compatible(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            api_key: None,
            base_url: base_url.into(),
            context_window: None,
            images: false,
            structured_output: true,
            max_tokens_field: MaxTokensField::MaxCompletionTokens,
            inline_system: InlineSystem::UserMarker,
            http: HttpConfig::default(),
            stream: true,
        }
    }

    /// Use another base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Send this key as `Authorization: Bearer …`.
    pub fn with_api_key(mut self, api_key: impl Into<ApiKey>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// Declare a context window.
    pub fn with_context_window(mut self, tokens: u64) -> Self {
        self.context_window = Some(tokens);
        self
    }

    /// Set the timeouts.
    pub fn with_http(mut self, http: HttpConfig) -> Self {
        self.http = http;
        self
    }
}

/// Context windows of OpenAI model families, by id prefix: `gpt-4.1` 1,047,576; `gpt-5` 400,000;
/// `o1`, `o3`, `o4` 200,000; `gpt-4o` 128,000. `None` for anything else.
pub fn known_context_window(model: &str) -> Option<u64> {
    const TABLE: &[(&str, u64)] = &[
        ("gpt-4.1", 1_047_576),
        ("gpt-5", 400_000),
        ("o1", 200_000),
        ("o3", 200_000),
        ("o4", 200_000),
        ("gpt-4o", 128_000),
    ];
    TABLE
        .iter()
        .find(|(prefix, _)| model.starts_with(prefix))
        .map(|&(_, tokens)| tokens)
}

/// A model behind a Chat Completions endpoint: `OpenAiModel::new(config)`, then the [`ChatModel`]
/// methods, `request_body` (the exact JSON body `invoke` would send; it refuses a
/// `thinking_budget`, an Anthropic setting: Chat Completions models take `reasoning_effort`),
/// `config` and `endpoint`. Its `Debug` output hides the key.
pub type OpenAiModel = OpenAiApiModel<ChatCompletions>;

impl WireApi for ChatCompletions {
    const TYPE_NAME: &'static str = "OpenAiModel";
    const NAME: &'static str = "Chat Completions";
    const PATH: &'static str = "chat/completions";
    type Assembler = stream::Assembler;

    fn request_body(
        config: &OpenAiConfig,
        request: &ModelRequest,
        tools: &ToolJsonCache,
    ) -> Result<(Value, Tools), ModelError> {
        if let Some(budget) = request.thinking_budget {
            // Refused, not dropped: a caller asking for a budget must learn it had none.
            return Err(ModelError::BadRequest {
                message: format!(
                    "thinking_budget ({budget} tokens) is an Anthropic setting; Chat Completions \
                     models take reasoning_effort"
                ),
                http: None,
            });
        }
        let (body, tools) = request::build(
            request,
            &config.model,
            config.max_tokens_field,
            config.inline_system,
            tools,
        );
        let body = serde_json::to_value(body).map_err(|e| ModelError::Other {
            message: format!("cannot serialize the Chat Completions request: {e}"),
            http: None,
        })?;
        Ok((request::with_tools_slot(body, &tools), tools))
    }

    fn parse_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
        parse_response(body)
    }

    /// Usage arrives in a last chunk only when asked for.
    fn add_stream_options(body: &mut Map<String, Value>) {
        body.insert(
            "stream_options".into(),
            serde_json::json!({"include_usage": true}),
        );
    }
}

impl OpenAiConfig {
    /// What an OpenAI model declares: no caching markers (OpenAI caches by itself), no tools
    /// mid-conversation, structured output, images and context window as configured.
    pub(crate) fn capabilities(&self) -> ModelCapabilities {
        ModelCapabilities {
            prompt_caching: false,
            max_cache_breakpoints: 0,
            tools_mid_conversation: false,
            structured_output: self.structured_output,
            images: self.images,
            context_window: self.context_window,
        }
    }
}

/// The HTTP client of an OpenAI API: `Authorization: Bearer <key>` when there is a key. Checks and
/// normalizes `config.base_url` first.
pub(crate) fn bearer_client(config: &mut OpenAiConfig) -> Result<HttpClient, ProviderError> {
    config.base_url = normalize_base_url(&config.base_url)?;
    let mut headers = HeaderMap::new();
    if let Some(key) = &config.api_key {
        let bearer = format!("Bearer {}", key.expose());
        headers.insert(AUTHORIZATION, secret_header(&bearer, "the OpenAI API key")?);
    }
    HttpClient::new(&config.http, headers)
}
