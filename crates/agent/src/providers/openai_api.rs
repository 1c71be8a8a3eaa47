//! One model type for OpenAI's two JSON APIs: [`OpenAiApiModel`], the type of both
//! [`OpenAiModel`](super::OpenAiModel) (Chat Completions) and [`ResponsesModel`](super::ResponsesModel)
//! (Responses), generic over the [`WireApi`] that says what differs between them: the endpoint
//! path, the request body, the reply parser, the stream assembler and the streaming fields.
//!
//! What they share is written once here: the bearer-key client on [`OpenAiConfig`], the declared
//! capabilities, the `openai` provider name, error bodies read by
//! [`openai::parse_error`](super::openai::parse_error), request `extra` keys merged last, the
//! structured output taken from the answer's text, and streaming (`"stream": true`, server-sent
//! events) unless [`OpenAiConfig::stream`] is off.

use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use trellis_middleware::runtime::model::{ModelCapabilities, ModelError};
use trellis_middleware::runtime::stream::{DeltaSink, stream_by_invoking};
use trellis_middleware::{ChatModel, ModelRequest, ModelResponse};

use super::http::{HttpClient, JsonBody};
use super::openai::{OpenAiConfig, bearer_client, parse_error, response::take_structured_output};
use super::streamed::{Assemble, Framing, stream_reply};
use super::tool_json::{ToolJsonCache, Tools};
use super::{ProviderError, merge_extra};

/// Chat Completions: the `W` of [`OpenAiModel`](super::OpenAiModel), its hooks in `openai.rs`.
#[derive(Debug, Clone, Copy)]
pub struct ChatCompletions;

/// The Responses API: the `W` of [`ResponsesModel`](super::ResponsesModel), its hooks in
/// `responses.rs`.
#[derive(Debug, Clone, Copy)]
pub struct Responses;

/// What one OpenAI wire API does its own way; the rest is [`OpenAiApiModel`]'s.
pub(crate) trait WireApi: Send + Sync + 'static {
    /// The model type's name, for its `Debug` output (`OpenAiModel`).
    const TYPE_NAME: &'static str;
    /// The API's name in errors (`Chat Completions`).
    const NAME: &'static str;
    /// The endpoint's path under the base URL (`chat/completions`).
    const PATH: &'static str;
    /// Assembles the API's event stream into the body a plain call returns.
    type Assembler: Assemble + Send;

    /// The request body for `request`, before its `extra` keys are merged, and its tools apart.
    /// With tools, the body holds a `null` under `tools` where they go: an `extra` key cannot
    /// take that place, and [`Tools`] fill it when the body is sent or shown.
    fn request_body(
        config: &OpenAiConfig,
        request: &ModelRequest,
        tools: &ToolJsonCache,
    ) -> Result<(Value, Tools), ModelError>;

    /// A reply body (plain, or assembled from the stream) as a response.
    fn parse_response(body: &[u8]) -> Result<ModelResponse, ModelError>;

    /// Fields a streamed request carries besides `"stream": true`; none by default.
    fn add_stream_options(_body: &mut Map<String, Value>) {}
}

/// A model behind the OpenAI API `W`: see [`OpenAiModel`](super::OpenAiModel) and
/// [`ResponsesModel`](super::ResponsesModel).
#[derive(Clone)]
pub struct OpenAiApiModel<W> {
    config: OpenAiConfig,
    endpoint: String,
    client: HttpClient,
    /// Its tools' definitions as sent, shared by its clones.
    tools: Arc<ToolJsonCache>,
    wire: PhantomData<W>,
}

impl<W: WireApi> std::fmt::Debug for OpenAiApiModel<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(W::TYPE_NAME)
            .field("config", &self.config)
            .field("endpoint", &self.endpoint)
            .field("client", &self.client)
            .finish()
    }
}

// `WireApi` is sealed on purpose: the two APIs above are its only implementations, and users name
// the models by their aliases, never by `W`.
#[allow(private_bounds)]
impl<W: WireApi> OpenAiApiModel<W> {
    /// Build the provider (and its HTTP client). Fails on a base URL that is not http(s) or a key
    /// that cannot be sent as a header.
    pub fn new(mut config: OpenAiConfig) -> Result<Self, ProviderError> {
        let client = bearer_client(&mut config)?;
        let endpoint = format!("{}/{}", config.base_url, W::PATH);
        Ok(Self {
            config,
            endpoint,
            client,
            tools: Arc::default(),
            wire: PhantomData,
        })
    }

    /// The configuration (its `Debug` output hides the key).
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The exact JSON body [`invoke`](ChatModel::invoke) would send for `request`.
    pub fn request_body(&self, request: &ModelRequest) -> Result<Value, ModelError> {
        let (mut body, tools) = self.body_and_tools(request)?;
        if !tools.is_empty()
            && let Some(slot) = body.get_mut("tools")
        {
            *slot = tools.to_json();
        }
        Ok(body)
    }

    /// The bytes sent for `request`: [`request_body`](Self::request_body) (with `"stream": true`
    /// and the API's stream options when `stream`), every object's keys sorted. Serialized before
    /// sending, so the request's JSON tree is not held across the wait; the tools' definitions are
    /// spliced in as the cache keeps them, not copied.
    pub(crate) fn sent_body(&self, request: &ModelRequest, stream: bool) -> Result<JsonBody, ModelError> {
        let (mut body, tools) = self.body_and_tools(request)?;
        if stream && let Value::Object(map) = &mut body {
            map.insert("stream".into(), Value::Bool(true));
            W::add_stream_options(map);
        }
        JsonBody::encode_as(&tools.sent_in(&body))
    }

    /// The body with its `extra` keys, its tools apart (see [`WireApi::request_body`]).
    fn body_and_tools(&self, request: &ModelRequest) -> Result<(Value, Tools), ModelError> {
        let (mut body, tools) = W::request_body(&self.config, request, &self.tools)?;
        merge_extra(&mut body, &request.extra);
        Ok((body, tools))
    }

    /// `body` read as the reply to `request`: with a response format, the answer's text parsed as
    /// JSON is the structured output.
    fn response(&self, request: &ModelRequest, body: &[u8]) -> Result<ModelResponse, ModelError> {
        let mut response = W::parse_response(body)?;
        if request.response_format.is_some() {
            take_structured_output(&mut response, &self.config.model);
        }
        Ok(response)
    }
}

#[async_trait]
impl<W: WireApi> ChatModel for OpenAiApiModel<W> {
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
        let body = self.sent_body(&request, false)?;
        let reply = self.client.exchange(&self.endpoint, body, parse_error).await?;
        self.response(&request, &reply)
    }

    async fn stream(
        &self,
        request: ModelRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, ModelError> {
        if !self.config.stream {
            return stream_by_invoking(self, request, on_delta).await;
        }
        let body = self.sent_body(&request, true)?;
        let streamed = stream_reply::<W::Assembler>(
            &self.client,
            &self.endpoint,
            body,
            parse_error,
            Framing::ServerSentEvents,
            W::NAME,
            on_delta,
        )
        .await?;
        let response = self.response(&request, streamed.body())?;
        streamed.deliver(&response, on_delta);
        Ok(response)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;
    use trellis_middleware::runtime::message::{ContentBlock, MessageMeta, SystemMessage};
    use trellis_middleware::tools::ToolSpec;
    use trellis_middleware::{Message, ModelRequest};

    use super::*;
    use crate::providers::tool_json::tests::spec;
    use crate::providers::{OpenAiModel, ResponsesModel};

    fn request(tools: Vec<Arc<ToolSpec>>, extra: Value) -> ModelRequest {
        let late = SystemMessage {
            content: vec![ContentBlock::text("A skill is active.")],
            tools: vec![(*spec("late")).clone()],
            meta: MessageMeta::default(),
        };
        ModelRequest {
            messages: vec![Message::human("Go."), Message::System(late)].into(),
            tools,
            extra: serde_json::from_value(extra).unwrap(),
            ..ModelRequest::default()
        }
    }

    /// What `request_body` shows, with the stream keys a streamed call adds, written as
    /// `JsonBody` writes any body.
    fn shown<W: WireApi>(model: &OpenAiApiModel<W>, request: &ModelRequest, stream: bool) -> Vec<u8> {
        let mut body = model.request_body(request).unwrap();
        if stream {
            let map = body.as_object_mut().unwrap();
            map.insert("stream".into(), Value::Bool(true));
            W::add_stream_options(map);
        }
        JsonBody::encode(&body).unwrap().as_bytes().to_vec()
    }

    fn the_bytes_sent_are_the_body_shown<W: WireApi>(model: &OpenAiApiModel<W>) {
        let own = vec![spec("ls"), spec("grep")];
        let with_tools = request(own.clone(), json!({"tools": "ignored", "zeta": {"b": 1, "a": 2}}));
        for stream in [false, true] {
            // Twice: the tools made, then taken from the cache.
            for _ in 0..2 {
                let sent = model.sent_body(&with_tools, stream).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(sent.as_bytes()),
                    String::from_utf8_lossy(&shown(model, &with_tools, stream))
                );
            }
        }
        let body: Value =
            serde_json::from_slice(model.sent_body(&with_tools, false).unwrap().as_bytes()).unwrap();
        let names: Vec<String> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.pointer("/function/name").or(t.get("name")).unwrap().to_string())
            .collect();
        assert_eq!(names, ["\"ls\"", "\"grep\"", "\"late\""]);
        assert_eq!(body["zeta"], json!({"a": 2, "b": 1}));

        // Without tools of its own or disclosed, an `extra` `tools` is the body's.
        let mut bare = request(Vec::new(), json!({"tools": [{"type": "web_search"}]}));
        bare.messages = vec![Message::human("Go.")].into();
        let sent = model.sent_body(&bare, true).unwrap();
        assert_eq!(sent.as_bytes(), &shown(model, &bare, true)[..]);
        let body: Value = serde_json::from_slice(sent.as_bytes()).unwrap();
        assert_eq!(body["tools"], json!([{"type": "web_search"}]));
    }

    #[test]
    fn chat_completions_sends_the_body_it_shows() {
        let model = OpenAiModel::new(OpenAiConfig::openai("gpt-4.1", "sk-test")).unwrap();
        the_bytes_sent_are_the_body_shown(&model);
    }

    #[test]
    fn responses_sends_the_body_it_shows() {
        let model = ResponsesModel::new(OpenAiConfig::openai("gpt-5", "sk-test")).unwrap();
        the_bytes_sent_are_the_body_shown(&model);
    }
}
