//! The Anthropic Messages API provider ([`AnthropicModel`]).
//!
//! One `POST {base_url}/v1/messages` per call: streamed (`"stream": true`, server-sent events
//! assembled by `stream.rs`) for [`ChatModel::stream`], which the agent loop uses, and plain for
//! [`ChatModel::invoke`]. The headers are
//! `x-api-key`, `anthropic-version: 2023-06-01` and `content-type: application/json` (plus
//! `anthropic-beta` when configured). How a [`ModelRequest`] maps onto the body is described under
//! *Request mapping* below; responses and errors are parsed by [`parse_response`] and
//! [`parse_error`], which are public so fuzz targets can call them.
//!
//! # Request mapping
//!
//! * `system`: one text block per system block, `"cache_control": {"type": "ephemeral"}` on blocks
//!   with a breakpoint (`"ttl": "1h"` added for [`CacheTtl::OneHour`](trellis_middleware::runtime::message::CacheTtl)).
//! * `messages`: human and tool messages are `user` turns, AI messages `assistant` turns; consecutive
//!   turns of one role are merged, so the tool results of one step travel in one `user` message.
//!   A message's breakpoint goes on its last block.
//! * A mid-conversation [`Message::System`](trellis_middleware::Message::System): Anthropic has no system
//!   role inside `messages`, so its text is sent as a `user` text block wrapped in
//!   `<system-reminder>` … `</system-reminder>` ([`SYSTEM_REMINDER_OPEN`](super::SYSTEM_REMINDER_OPEN)),
//!   and its tools are appended to `tools` after the request's own tools.
//! * At most [`MAX_CACHE_BREAKPOINTS`] `cache_control` markers: the earliest are kept, the rest are
//!   dropped with a warning in the log.
//! * Structured output ([`ModelRequest::response_format`]): a tool named after the format, whose input
//!   schema is the format's schema. When the request has no other tools (and no explicit tool choice)
//!   it is forced with `tool_choice: {"type": "tool", "name": …}`; with other tools the choice is
//!   `{"type": "any"}` so the model can still use them before answering. The answer call's input is
//!   returned as [`ModelResponse::structured_output`] and replaced in the message by its JSON text.
//!   Forced tool choice is incompatible with extended thinking; do not combine the two.
//! * `temperature`, `top_p` and `stop_sequences` as given; `thinking_budget` as `thinking:
//!   {"type": "enabled", "budget_tokens": n}` (at least 1,024 and below `max_tokens`, checked
//!   before sending); `reasoning_effort` (OpenAI's) is refused with `ModelError::BadRequest`.
//!   [`ModelRequest::extra`] keys are added at the top level of the body
//!   unless the provider already set that key (e.g. `thinking`, `metadata`, `stop_sequences`).
//!
//! # Capabilities
//!
//! Prompt caching (4 breakpoints), structured output and images are supported. Tools arriving
//! mid-conversation are declared **unsupported** by default: Anthropic's cache prefix starts with
//! the tool list, so every disclosed tool rewrites the first bytes of the prefix and invalidates the
//! whole cache; the stack should prefer disclosure through tool results. A `Message::System` that
//! arrives anyway is still sent as described above. [`AnthropicConfig::tools_mid_conversation`]
//! overrides the declaration.

mod pause;
mod request;
mod response;
mod stream;
mod wire;

use std::borrow::Cow;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::Value;
use trellis_middleware::runtime::model::{ModelCapabilities, ModelError};
use trellis_middleware::runtime::stream::{DeltaSink, stream_by_invoking};
use trellis_middleware::{ChatModel, ModelRequest, ModelResponse};

pub use request::{MAX_CACHE_BREAKPOINTS, REDACTED_THINKING_PREFIX, STRUCTURED_OUTPUT_TOOL_DESCRIPTION};
pub use response::{parse_error, parse_response};

use super::http::{
    ApiKey, ErrorParser, HttpClient, HttpConfig, JsonBody, normalize_base_url, plain_header, secret_header,
};
use super::streamed::{Framing, stream_reply};
use super::{ProviderError, merge_extra};

/// The public Anthropic API.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The `anthropic-version` header sent with every request.
pub const API_VERSION: &str = "2023-06-01";
/// `max_tokens` when the request sets no [`ModelRequest::max_output_tokens`] (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// Context window declared unless configured otherwise.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 200_000;

/// How to reach one Anthropic model.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// The model id, e.g. `claude-sonnet-4-5`.
    pub model: String,
    /// The API key (`x-api-key`).
    pub api_key: ApiKey,
    /// Base URL without `/v1/messages` (default [`DEFAULT_BASE_URL`]).
    pub base_url: String,
    /// `max_tokens` for requests that set none.
    pub default_max_tokens: u32,
    /// Declared context window in tokens.
    pub context_window: u64,
    /// Declared [`ModelCapabilities::tools_mid_conversation`] (default false, see the module docs).
    pub tools_mid_conversation: bool,
    /// Values of the `anthropic-beta` header (none by default).
    pub beta: Vec<String>,
    /// Timeouts.
    pub http: HttpConfig,
    /// Stream replies (`"stream": true`, the default); `false` makes one plain request per call.
    pub stream: bool,
    /// Send `cache_control` markers (the default). `false` sends none and declares no prompt
    /// caching, for proxies that reject the field (LiteLLM, Databricks); model string option
    /// `cache=off`.
    pub prompt_caching: bool,
}

impl AnthropicConfig {
    /// A configuration with the defaults above.
    pub fn new(model: impl Into<String>, api_key: impl Into<ApiKey>) -> Self {
        Self {
            model: model.into(),
            api_key: api_key.into(),
            base_url: DEFAULT_BASE_URL.to_owned(),
            default_max_tokens: DEFAULT_MAX_TOKENS,
            context_window: DEFAULT_CONTEXT_WINDOW,
            tools_mid_conversation: false,
            beta: Vec::new(),
            http: HttpConfig::default(),
            stream: true,
            prompt_caching: true,
        }
    }

    /// Use another base URL (a proxy, a gateway, a mock server).
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Set the `max_tokens` used when a request sets none.
    pub fn with_default_max_tokens(mut self, max_tokens: u32) -> Self {
        self.default_max_tokens = max_tokens;
        self
    }

    /// Declare another context window.
    pub fn with_context_window(mut self, tokens: u64) -> Self {
        self.context_window = tokens;
        self
    }

    /// Set the timeouts.
    pub fn with_http(mut self, http: HttpConfig) -> Self {
        self.http = http;
        self
    }
}

/// A Claude model behind the Anthropic Messages API: Anthropic's own ([`AnthropicModel::new`]),
/// Amazon Bedrock's ([`AnthropicModel::bedrock`]) or Google Vertex AI's ([`AnthropicModel::vertex`]).
#[derive(Debug, Clone)]
pub struct AnthropicModel {
    config: AnthropicConfig,
    endpoint: String,
    client: HttpClient,
    platform: Platform,
}

/// Where a Messages body goes besides Anthropic's API, and what it carries there: a cloud
/// platform takes the model in the URL and the API version in the body.
#[derive(Debug, Clone)]
pub(crate) struct Platform {
    /// [`ChatModel::provider`]: `anthropic`, `bedrock`, `vertex`.
    pub name: &'static str,
    /// Where streamed calls go; `None` streams by invoking (one plain call, deltas at the end).
    pub stream_endpoint: Option<String>,
    /// How a streamed reply is framed there.
    pub framing: Framing,
    /// The body's `anthropic_version`; when set, `model` is left out of the body.
    pub anthropic_version: Option<&'static str>,
    /// Beta flags travel in the body as `anthropic_beta` (Bedrock) rather than as a header.
    pub beta_in_body: bool,
    /// Reads the platform's error bodies.
    pub parse_error: ErrorParser,
}

impl AnthropicModel {
    /// Build the provider (and its HTTP client). Fails on a base URL that is not http(s) or a key
    /// that cannot be sent as a header.
    pub fn new(mut config: AnthropicConfig) -> Result<Self, ProviderError> {
        config.base_url = normalize_base_url(&config.base_url)?;
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-api-key",
            secret_header(config.api_key.expose(), "the Anthropic API key")?,
        );
        plain_header(&mut headers, "anthropic-version", API_VERSION)?;
        if !config.beta.is_empty() {
            plain_header(&mut headers, "anthropic-beta", &config.beta.join(","))?;
        }
        let client = HttpClient::new(&config.http, headers)?;
        let endpoint = format!("{}/v1/messages", config.base_url);
        let platform = Platform {
            name: "anthropic",
            stream_endpoint: Some(endpoint.clone()),
            framing: Framing::ServerSentEvents,
            anthropic_version: None,
            beta_in_body: false,
            parse_error,
        };
        Ok(Self {
            config,
            endpoint,
            client,
            platform,
        })
    }

    /// A model on a cloud platform: `client` authorizes each request, `endpoint` takes plain calls.
    pub(crate) fn on_platform(
        config: AnthropicConfig,
        endpoint: String,
        client: HttpClient,
        platform: Platform,
    ) -> Self {
        Self {
            config,
            endpoint,
            client,
            platform,
        }
    }

    /// The configuration (its `Debug` output hides the key).
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The exact JSON body [`invoke`](ChatModel::invoke) would send for `request`.
    pub fn request_body(&self, request: &ModelRequest) -> Result<Value, ModelError> {
        let uncached;
        let request = if self.config.prompt_caching || request.cache_breakpoints() == 0 {
            request
        } else {
            let mut copy = request.clone();
            copy.limit_cache_breakpoints(0);
            uncached = copy;
            &uncached
        };
        let (body, notes) = request::build(request, &self.config.model, self.config.default_max_tokens)?;
        if notes.dropped_breakpoints > 0 {
            tracing::warn!(
                model = %self.config.model,
                requested = request.cache_breakpoints(),
                dropped = notes.dropped_breakpoints,
                "more than {MAX_CACHE_BREAKPOINTS} cache breakpoints requested; the earliest were kept"
            );
        }
        if notes.shortened_breakpoints > 0 {
            tracing::warn!(
                model = %self.config.model,
                shortened = notes.shortened_breakpoints,
                "1-hour cache breakpoints after a 5-minute one were sent as 5-minute breakpoints"
            );
        }
        let mut body = serde_json::to_value(body).map_err(|e| ModelError::Other {
            message: format!("cannot serialize the Anthropic request: {e}"),
            http: None,
        })?;
        merge_extra(&mut body, &request.extra);
        if let (Some(version), Value::Object(map)) = (self.platform.anthropic_version, &mut body) {
            map.remove("model");
            map.insert("anthropic_version".into(), Value::String(version.to_owned()));
            if self.platform.beta_in_body && !self.config.beta.is_empty() {
                map.insert("anthropic_beta".into(), serde_json::json!(self.config.beta));
            }
        }
        Ok(body)
    }

    /// One call, continued while the API answers `pause_turn` (see [`pause`]); streamed when
    /// `on_delta` is given.
    async fn call(
        &self,
        request: &ModelRequest,
        on_delta: Option<DeltaSink<'_>>,
    ) -> Result<ModelResponse, ModelError> {
        let mut body = self.request_body(request)?;
        let mut paused = pause::Paused::default();
        let response = loop {
            let offset = paused.blocks();
            let shifted = |delta: trellis_middleware::runtime::stream::ModelDelta| {
                if let (Some(on_delta), Some(delta)) = (on_delta, pause::shift(delta, offset)) {
                    on_delta(delta);
                }
            };
            let (raw, response) = self
                .send(&body, on_delta.map(|_| &shifted as DeltaSink<'_>))
                .await?;
            let response = paused.merge(response);
            if !pause::is_paused(&response) || paused.continuations() >= pause::MAX_CONTINUATIONS {
                break response;
            }
            paused.continue_from(&raw, response, &mut body);
        };
        let mut response = response;
        if let Some(format) = &request.response_format {
            response::take_structured_output(&mut response, &format.name);
        }
        if let Some(on_delta) = on_delta {
            on_delta(trellis_middleware::runtime::stream::ModelDelta::Finished {
                stop_reason: response.stop_reason.clone(),
                usage: response.usage,
            });
        }
        Ok(response)
    }

    /// Send `body` once: the reply's raw JSON and its parse. Streams (without the final
    /// `Finished` delta, which [`call`](Self::call) sends) when `on_delta` is given.
    async fn send(
        &self,
        body: &Value,
        on_delta: Option<DeltaSink<'_>>,
    ) -> Result<(Vec<u8>, ModelResponse), ModelError> {
        let parse_error = self.platform.parse_error;
        let (Some(on_delta), Some(stream_endpoint)) = (on_delta, &self.platform.stream_endpoint) else {
            let reply = self
                .client
                .exchange(&self.endpoint, JsonBody::encode(body)?, parse_error)
                .await?;
            let response = parse_response(&reply)?;
            return Ok((reply.to_vec(), response));
        };
        let framing = self.platform.framing;
        let mut body = Cow::Borrowed(body);
        let provider = match framing {
            // Bedrock takes no `stream` field: the endpoint says it.
            Framing::AwsEventStream => "Bedrock",
            Framing::ServerSentEvents => {
                if let Value::Object(map) = body.to_mut() {
                    map.insert("stream".into(), Value::Bool(true));
                }
                "Anthropic"
            }
        };
        let streamed = stream_reply::<stream::Assembler>(
            &self.client,
            stream_endpoint,
            JsonBody::encode(&body)?,
            parse_error,
            framing,
            provider,
            on_delta,
        )
        .await?;
        let response = parse_response(streamed.body())?;
        streamed.deliver(&response, on_delta);
        Ok((streamed.body().to_vec(), response))
    }
}

#[async_trait]
impl ChatModel for AnthropicModel {
    fn provider(&self) -> Option<&str> {
        Some(self.platform.name)
    }

    fn id(&self) -> &str {
        &self.config.model
    }

    fn capabilities(&self) -> ModelCapabilities {
        ModelCapabilities {
            prompt_caching: self.config.prompt_caching,
            max_cache_breakpoints: if self.config.prompt_caching {
                MAX_CACHE_BREAKPOINTS as u32
            } else {
                0
            },
            tools_mid_conversation: self.config.tools_mid_conversation,
            structured_output: true,
            images: true,
            context_window: Some(self.config.context_window),
        }
    }

    async fn invoke(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        self.call(&request, None).await
    }

    async fn stream(
        &self,
        request: ModelRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, ModelError> {
        if !self.config.stream || self.platform.stream_endpoint.is_none() {
            return stream_by_invoking(self, request, on_delta).await;
        }
        self.call(&request, Some(on_delta)).await
    }
}
