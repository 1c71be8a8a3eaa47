//! The Anthropic and OpenAI response and error parsers (non-streaming; the providers have no
//! streaming parser).
//!
//! Input: a response body, parsed as a success body and as an error body. The HTTP status and the
//! `retry-after` hint for the error parser are derived from a hash of the body, so seeds stay plain
//! JSON files and every status class is reached.

use std::time::Duration;

use trellis_agent::providers::{anthropic, openai};
use trellis_middleware::runtime::message::ContentBlock;
use trellis_middleware::runtime::model::{ModelError, StopReason};
use trellis_middleware::{Message, ModelResponse};

/// Statuses the error parser is called with.
pub const STATUSES: [u16; 16] = [
    0, 200, 302, 400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 502, 503, 529,
];

/// Longest message for a body that is not a response, in bytes: the parsers quote at most a
/// bounded snippet of it. (An error envelope's own message is passed on whole.)
pub const MAX_MALFORMED_MESSAGE_BYTES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    Anthropic,
    OpenAi,
}

/// The Anthropic parsers on one body.
pub fn check_anthropic(data: &[u8]) {
    check(Provider::Anthropic, data);
}

/// The OpenAI parsers on one body.
pub fn check_openai(data: &[u8]) {
    check(Provider::OpenAi, data);
}

fn check(provider: Provider, data: &[u8]) {
    let parsed = match provider {
        Provider::Anthropic => anthropic::parse_response(data),
        Provider::OpenAi => openai::parse_response(data),
    };
    match parsed {
        Ok(response) => check_response(provider, &response),
        Err(error) => {
            check_error_text(&error);
            assert_eq!(error.retry_after(), None, "no hint was given: {error:?}");
            if let ModelError::Other { message, .. } = &error
                && (message.starts_with("malformed ") || message.contains(" without choices: "))
            {
                assert!(
                    message.len() <= MAX_MALFORMED_MESSAGE_BYTES,
                    "a {}-byte message for a malformed body",
                    message.len()
                );
            }
        }
    }

    let (status, hint) = status_and_hint(data);
    let error = match provider {
        Provider::Anthropic => anthropic::parse_error(status, hint, data),
        Provider::OpenAi => openai::parse_error(status, hint, data),
    };
    check_error_text(&error);
    assert!(message(&error).contains(&format!("HTTP {status}")), "{error:?}");
    if matches!(
        error,
        ModelError::RateLimited { .. } | ModelError::Overloaded { .. }
    ) {
        assert_eq!(error.retry_after(), hint, "the retry hint was not passed on");
    }
    // A body that cannot hold a JSON object or array is classified by its status alone. (Checking
    // "does not parse as JSON" is not enough: serde skips unknown fields without validating their
    // UTF-8, so a body that is not valid JSON text can still be a valid error envelope.)
    if !data.trim_ascii_start().starts_with(b"{") && !data.trim_ascii_start().starts_with(b"[") {
        let allowed = kinds_by_status(provider, status);
        assert!(
            allowed.contains(&kind(&error)),
            "HTTP {status} with a non-JSON body gave {error:?}, expected one of {allowed:?}"
        );
    }
}

/// A parsed response: no structured output yet, tool calls that can be answered, and a message
/// that survives a checkpoint (JSON) round trip unchanged.
fn check_response(provider: Provider, response: &ModelResponse) {
    assert_eq!(response.structured_output, None);
    for block in &response.message.content {
        if let ContentBlock::ToolUse(call) = block {
            assert!(!call.args.is_null(), "tool call arguments are null: {call:?}");
            if provider == Provider::OpenAi {
                assert!(!call.id.is_empty(), "an OpenAI tool call without an id");
            }
        }
    }
    if provider == Provider::OpenAi {
        if response.message.has_tool_calls() {
            assert_eq!(response.stop_reason, StopReason::ToolUse);
        }
        assert_eq!(response.usage.cache_write_tokens, 0);
    }
    let message = Message::Ai(response.message.clone());
    let json = serde_json::to_string(&message).unwrap_or_else(|e| panic!("cannot serialize: {e}"));
    let back: Message =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("cannot read back {json}: {e}"));
    assert_eq!(back, message, "the message changed in a checkpoint round trip");
    let json = serde_json::to_string(response).unwrap_or_else(|e| panic!("cannot serialize: {e}"));
    let back: ModelResponse =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("cannot read back {json}: {e}"));
    assert_eq!(&back, response, "the response changed in a JSON round trip");
}

fn check_error_text(error: &ModelError) {
    assert!(!message(error).is_empty());
    assert!(!error.to_string().is_empty());
}

/// What an error body without a JSON object may map to, by status alone. A plain-text body can
/// still say the context is full: Anthropic reads that only in a 4xx that is otherwise a bad request,
/// OpenAI in any 4xx but 429 (as documented on `openai::parse_error`).
fn kinds_by_status(provider: Provider, status: u16) -> &'static [&'static str] {
    match (provider, status) {
        (_, 429) => &["RateLimited"],
        (_, 503 | 529) => &["Overloaded"],
        (Provider::Anthropic, 401 | 403) => &["Auth"],
        (Provider::OpenAi, 401 | 403) => &["Auth", "ContextTooLong"],
        (_, 500..=599) => &["Transport"],
        (Provider::Anthropic, 413) => &["ContextTooLong"],
        (Provider::OpenAi, 408 | 409) => &["Transport", "ContextTooLong"],
        (_, 400..=499) => &["BadRequest", "ContextTooLong"],
        _ => &["Other"],
    }
}

fn kind(error: &ModelError) -> &'static str {
    match error {
        ModelError::RateLimited { .. } => "RateLimited",
        ModelError::Overloaded { .. } => "Overloaded",
        ModelError::ContextTooLong { .. } => "ContextTooLong",
        ModelError::Auth { .. } => "Auth",
        ModelError::BadRequest { .. } => "BadRequest",
        ModelError::Transport { .. } => "Transport",
        ModelError::Other { .. } => "Other",
        _ => "unknown",
    }
}

fn message(error: &ModelError) -> &str {
    error.message()
}

/// A status from [`STATUSES`] and maybe a hint, from an FNV-1a hash of the body.
pub fn status_and_hint(data: &[u8]) -> (u16, Option<Duration>) {
    let hash = data.iter().fold(0x811c_9dc5_u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let status = STATUSES[hash as usize % STATUSES.len()];
    let hint = (hash & 0x8000 != 0).then(|| Duration::from_millis(u64::from(hash >> 20)));
    (status, hint)
}
