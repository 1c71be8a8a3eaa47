//! The OpenAI Chat Completions wire format (`POST {base_url}/chat/completions`), as far as Trellis
//! uses it. Response types are lenient: the same parser reads OpenAI, ollama, vLLM and llama.cpp.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The request body.
#[derive(Debug, Serialize)]
pub(crate) struct Request<'a> {
    pub model: &'a str,
    pub messages: Vec<Message<'a>>,
    // `tools` follow `messages`; they are added as JSON (`request::with_tools`), made once per
    // tool (`providers::tool_json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<&'static str>,
}

/// One message, tagged by `role`.
#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub(crate) enum Message<'a> {
    System {
        content: Cow<'a, str>,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        /// `null` when the message only calls tools.
        content: Option<Cow<'a, str>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
}

/// User content: a plain string, or an array of text and image parts.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum UserContent<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<Part<'a>>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Part<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ImageUrl<'a> },
}

/// An image by URL; inline images are `data:` URLs.
#[derive(Debug, Serialize)]
pub(crate) struct ImageUrl<'a> {
    pub url: Cow<'a, str>,
}

/// A tool call in an assistant message; `arguments` is a JSON string.
#[derive(Debug, Serialize)]
pub(crate) struct ToolCall<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct FunctionCall<'a> {
    pub name: &'a str,
    pub arguments: Cow<'a, str>,
}

/// `"auto"`, `"none"`, `"required"`, or `{"type": "function", "function": {"name": …}}`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum ToolChoice<'a> {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        function: Named<'a>,
    },
}

#[derive(Debug, Serialize)]
pub(crate) struct Named<'a> {
    pub name: &'a str,
}

/// `{"type": "json_schema", "json_schema": {name, schema, strict}}`.
#[derive(Debug, Serialize)]
pub(crate) struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub json_schema: JsonSchema<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct JsonSchema<'a> {
    pub name: &'a str,
    pub schema: Cow<'a, Value>,
    pub strict: bool,
}

/// The response body of a successful call.
#[derive(Debug, Deserialize)]
pub(crate) struct Response {
    #[serde(default)]
    pub model: Option<String>,
    pub choices: Vec<Choice>,
    #[serde(default)]
    pub usage: Option<ResponseUsage>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Choice {
    pub message: ResponseMessage,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// The assistant message. `content` is a string on OpenAI, sometimes an array of parts elsewhere;
/// `reasoning_content` / `reasoning` are sent by servers that expose reasoning (vLLM, ollama, …).
#[derive(Debug, Deserialize)]
pub(crate) struct ResponseMessage {
    #[serde(default)]
    pub content: Option<Value>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ResponseToolCall>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResponseToolCall {
    #[serde(default)]
    pub id: Option<String>,
    pub function: ResponseFunction,
}

/// `arguments` is a JSON string on OpenAI; an object is accepted too.
#[derive(Debug, Deserialize)]
pub(crate) struct ResponseFunction {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub arguments: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ResponseUsage {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}
