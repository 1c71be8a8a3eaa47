//! Model providers: [`ChatModel`](trellis_middleware::ChatModel) implementations that speak real wire
//! formats over HTTP (reqwest with rustls).
//!
//! * [`anthropic`]: the Anthropic Messages API, with `cache_control` breakpoints (at most four),
//!   tools, tool results, thinking blocks, images and usage including cache reads and writes.
//! * [`openai`]: OpenAI Chat Completions, which also serves ollama, vLLM and llama.cpp servers through
//!   a configurable base URL.
//! * [`responses`]: the OpenAI Responses API, stateless (`store: false`, reasoning items passed
//!   back), streamed.
//! * [`bedrock`] and [`vertex`]: Claude on Amazon Bedrock (SigV4, [`aws`]) and Google Vertex AI
//!   (OAuth tokens, [`google_auth`]): the Anthropic Messages body on each platform's endpoint.
//! * [`from_model_string`]: `anthropic:claude-sonnet-4-5`, `openai:gpt-4.1`, `openai-responses:gpt-5`,
//!   `openai-compatible:<model>@<base_url>`, `ollama:<model>`, `bedrock:<model id>`,
//!   `vertex:<model>` → a provider, with credentials from the usual environment variables.
//!
//! Providers never retry (the retry middleware does) and never panic on what a server sends: every
//! failure is a [`ModelError`](trellis_middleware::runtime::model::ModelError) of the right kind, with the
//! server's `retry-after` hint where it gave one.
//!
//! Both providers render a mid-conversation [`Message::System`](trellis_middleware::Message::System)
//! whose text cannot travel as a system message as a user-side text block between
//! [`SYSTEM_REMINDER_OPEN`] and [`SYSTEM_REMINDER_CLOSE`].

pub mod anthropic;
pub mod aws;
pub mod bedrock;
mod clock;
mod error;
mod event_stream;
pub mod google_auth;
pub(crate) mod http;
pub mod ollama;
pub mod openai;
mod openai_api;
mod options;
mod registry;
pub mod responses;
mod sse;
mod streamed;
mod tool_json;
pub mod vertex;

use std::collections::BTreeMap;

use serde_json::Value;

pub use anthropic::{AnthropicConfig, AnthropicModel};
pub use aws::AwsCredentials;
pub use bedrock::BedrockConfig;
pub use clock::Clock;
pub use error::ProviderError;
pub use google_auth::GoogleCredentials;
pub use http::{ApiKey, HttpConfig};
pub use openai::{OpenAiConfig, OpenAiModel};
pub use options::ModelOptions;
pub use registry::{
    KNOWN_PROVIDERS, ModelSpec, connect_model_string, connect_model_string_with_env, from_model_string,
    from_model_string_with_env,
};
pub use responses::ResponsesModel;
pub use vertex::VertexConfig;

/// Opens the marker around the text of a mid-conversation system message sent as user content.
pub const SYSTEM_REMINDER_OPEN: &str = "<system-reminder>";
/// Closes the marker opened by [`SYSTEM_REMINDER_OPEN`].
pub const SYSTEM_REMINDER_CLOSE: &str = "</system-reminder>";

/// `text` wrapped in the system-reminder marker, on lines of their own.
pub(crate) fn system_reminder(text: &str) -> String {
    format!("{SYSTEM_REMINDER_OPEN}\n{text}\n{SYSTEM_REMINDER_CLOSE}")
}

/// Add `extra` keys at the top level of a JSON object body; keys the provider set win.
pub(crate) fn merge_extra(body: &mut Value, extra: &BTreeMap<String, Value>) {
    if let Value::Object(map) = body {
        for (key, value) in extra {
            if map.contains_key(key) {
                tracing::debug!(key, "request.extra key ignored: the provider sets it");
            } else {
                map.insert(key.clone(), value.clone());
            }
        }
    }
}

/// An `f32` as the `f64` with the same shortest decimal form (`0.7f32` → `0.7`, not `0.699999988…`).
pub(crate) fn f32_to_f64(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

/// The start of a body, as text, for error messages.
pub(crate) fn snippet(body: &[u8]) -> String {
    const MAX: usize = 500;
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "empty body".to_owned();
    }
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_keep_their_short_form() {
        assert_eq!(f32_to_f64(0.7).to_string(), "0.7");
        assert_eq!(f32_to_f64(1.0).to_string(), "1");
    }

    #[test]
    fn snippets_are_bounded_and_utf8_safe() {
        assert_eq!(snippet(b""), "empty body");
        let long = "é".repeat(600);
        assert_eq!(snippet(long.as_bytes()).chars().count(), 501);
        assert_eq!(snippet(&[0xff, 0xfe]), "\u{fffd}\u{fffd}");
    }
}
