//! Anthropic response and error bodies → [`ModelResponse`] / [`ModelError`].
//!
//! Both parsers take untrusted bytes and never panic: a body that does not parse is a typed error.

use std::time::Duration;

use trellis_middleware::runtime::message::{AiMessage, ContentBlock, MessageMeta};
use trellis_middleware::runtime::model::{ModelError, StopReason, Usage};
use trellis_middleware::{ModelResponse, ToolCall};

use super::request::REDACTED_THINKING_PREFIX;
use super::wire;
use crate::providers::snippet;

/// Parse the body of a successful (2xx) Messages API call.
///
/// Text, thinking, redacted thinking (as a [`ContentBlock::Reasoning`] whose signature starts with
/// [`REDACTED_THINKING_PREFIX`]) and tool use blocks are kept in order; block types Trellis does not
/// model are skipped. `usage` maps `input_tokens` (already net of cache reads and writes),
/// `output_tokens`, `cache_read_input_tokens` and `cache_creation_input_tokens`.
///
/// A body that is not a Messages response is [`ModelError::Other`]; an error envelope (`{"type":
/// "error", …}`) is mapped like an HTTP error.
pub fn parse_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
    let response: wire::Response = match serde_json::from_slice(body) {
        Ok(response) => response,
        Err(error) => {
            if serde_json::from_slice::<wire::ErrorEnvelope>(body).is_ok() {
                return Err(parse_error(200, None, body));
            }
            return Err(ModelError::Other {
                message: format!("malformed Anthropic response ({error}): {}", snippet(body)),
                http: None,
            });
        }
    };

    let mut content = Vec::with_capacity(response.content.len());
    for block in response.content {
        match block {
            wire::ResponseBlock::Text { text } => content.push(ContentBlock::Text { text }),
            wire::ResponseBlock::Thinking { thinking, signature } => content.push(ContentBlock::Reasoning {
                text: thinking,
                signature,
            }),
            wire::ResponseBlock::RedactedThinking { data } => content.push(ContentBlock::Reasoning {
                text: String::new(),
                signature: Some(format!("{REDACTED_THINKING_PREFIX}{data}")),
            }),
            wire::ResponseBlock::ToolUse { id, name, input } => {
                let args = if input.is_null() {
                    serde_json::Value::Object(serde_json::Map::new())
                } else {
                    input
                };
                content.push(ContentBlock::ToolUse(ToolCall { id, name, args }));
            }
            wire::ResponseBlock::Unknown => {
                tracing::debug!("skipping an Anthropic content block of a type Trellis does not model");
            }
        }
    }
    let message = AiMessage {
        content,
        meta: MessageMeta::default(),
    };

    if response.stop_reason.as_deref() == Some("model_context_window_exceeded") {
        // The reply was cut at the model's context window (not at `max_tokens`): the same
        // condition as a prompt that is too long, so summarization gets to run.
        return Err(ModelError::ContextTooLong {
            message:
                "the reply stopped at the model's context window (stop_reason model_context_window_exceeded)"
                    .into(),
            http: None,
        });
    }
    let stop_reason = match response.stop_reason.as_deref() {
        Some("end_turn") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("refusal") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_owned()),
        None if message.has_tool_calls() => StopReason::ToolUse,
        None => StopReason::EndTurn,
    };
    let usage = response.usage.unwrap_or_default();
    let usage = Usage {
        input_tokens: usage.input_tokens.unwrap_or(0),
        output_tokens: usage.output_tokens.unwrap_or(0),
        cache_read_tokens: usage.cache_read_input_tokens.unwrap_or(0),
        cache_write_tokens: usage.cache_creation_input_tokens.unwrap_or(0),
    };
    Ok(ModelResponse {
        message,
        usage,
        stop_reason,
        model: response.model,
        structured_output: None,
    })
}

/// Map an error answer (status, the `retry-after` hint, body) to a [`ModelError`].
///
/// By `error.type` first, then by status: `rate_limit_error`/429 → `RateLimited`;
/// `overloaded_error`/529/503 → `Overloaded`; `authentication_error`/401, `permission_error`/403,
/// `billing_error`/402 → `Auth`; `request_too_large`/413 and an `invalid_request_error` saying the
/// prompt is too long (or input plus `max_tokens` exceed the context limit) → `ContextTooLong`;
/// `api_error`/other 5xx → `Transport` (transient); other 4xx → `BadRequest`; anything else → `Other`.
/// The message keeps the provider's text, the status and the error type.
pub fn parse_error(status: u16, retry_after: Option<Duration>, body: &[u8]) -> ModelError {
    let (kind, text) = match serde_json::from_slice::<wire::ErrorEnvelope>(body) {
        Ok(envelope) => (envelope.error.kind, envelope.error.message.unwrap_or_default()),
        Err(_) => (None, snippet(body)),
    };
    let message = match &kind {
        Some(kind) => format!("{text} (HTTP {status}, {kind})"),
        None => format!("{text} (HTTP {status})"),
    };
    let class = match kind.as_deref() {
        // Request timeout and conflict are retried whatever the body says, as the official SDKs do.
        _ if matches!(status, 408 | 409) => Class::Transient,
        Some("rate_limit_error") => Class::RateLimited,
        Some("overloaded_error") => Class::Overloaded,
        Some("authentication_error" | "permission_error" | "billing_error") => Class::Auth,
        Some("request_too_large") => Class::TooLong,
        Some("invalid_request_error" | "not_found_error") => Class::BadRequest,
        Some("api_error" | "timeout_error") => Class::Transient,
        _ => match status {
            429 => Class::RateLimited,
            503 | 529 => Class::Overloaded,
            401..=403 => Class::Auth,
            413 => Class::TooLong,
            400..=499 => Class::BadRequest,
            500..=599 => Class::Transient,
            _ => Class::Other,
        },
    };
    match class {
        Class::RateLimited => ModelError::RateLimited {
            message,
            retry_after,
            http: None,
        },
        Class::Overloaded => ModelError::Overloaded {
            message,
            retry_after,
            http: None,
        },
        Class::Auth => ModelError::Auth { message, http: None },
        Class::TooLong => ModelError::ContextTooLong { message, http: None },
        Class::BadRequest if says_prompt_too_long(&text) => {
            ModelError::ContextTooLong { message, http: None }
        }
        Class::BadRequest => ModelError::BadRequest { message, http: None },
        Class::Transient => ModelError::Transport { message, http: None },
        Class::Other => ModelError::Other { message, http: None },
    }
}

/// What an error answer means, before it becomes a [`ModelError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    RateLimited,
    Overloaded,
    Auth,
    TooLong,
    BadRequest,
    Transient,
    Other,
}

fn says_prompt_too_long(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    // "Input is too long for requested model." is Bedrock's ValidationException for the same.
    text.contains("prompt is too long")
        || text.contains("exceed context limit")
        || text.contains("input is too long")
}

/// Move the structured-output tool call named `name` out of the message: its input becomes
/// `structured_output`, and the call is replaced by a text block holding the same JSON, so the stored
/// conversation shows the answer and has no call waiting for a result. When no other call remains,
/// a `tool_use` stop becomes `end_turn`.
pub(crate) fn take_structured_output(response: &mut ModelResponse, name: &str) {
    let mut found = false;
    let content = std::mem::take(&mut response.message.content);
    for block in content {
        match block {
            ContentBlock::ToolUse(call) if call.name == name => {
                if !found {
                    found = true;
                    response
                        .message
                        .content
                        .push(ContentBlock::text(call.args.to_string()));
                    response.structured_output = Some(call.args);
                }
            }
            other => response.message.content.push(other),
        }
    }
    if found && response.stop_reason == StopReason::ToolUse && !response.message.has_tool_calls() {
        response.stop_reason = StopReason::EndTurn;
    }
}
