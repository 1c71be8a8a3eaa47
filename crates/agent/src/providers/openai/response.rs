//! Chat Completions response and error bodies → [`ModelResponse`] / [`ModelError`].
//!
//! Both parsers take untrusted bytes and never panic: a body that does not parse is a typed error.

use std::time::Duration;

use serde_json::Value;
use trellis_middleware::runtime::message::{AiMessage, ContentBlock, MessageMeta};
use trellis_middleware::runtime::model::{ModelError, StopReason, Usage};
use trellis_middleware::{ModelResponse, ToolCall};

use super::wire;
use crate::providers::snippet;

/// Parse the body of a successful (2xx) Chat Completions call; only `choices[0]` is read.
///
/// The message becomes, in order: reasoning (`reasoning_content` or `reasoning`, sent by some
/// OpenAI-compatible servers) as [`ContentBlock::Reasoning`], the text (or the `refusal`), then the
/// tool calls. Tool call `arguments` are parsed as JSON; an empty string is `{}`, and arguments that
/// are not JSON are passed through as a [`Value::String`] for the tool to reject. A call without an id
/// (some local servers) gets `call_<index>`.
///
/// `finish_reason`: `stop` → `EndTurn`, `length` → `MaxTokens`, `tool_calls`/`function_call` →
/// `ToolUse`, `content_filter` → `Refusal`, others → `Other`; a message with tool calls is
/// `ToolUse` (ollama answers `stop`) unless the reason is `length`: a reply cut at the token limit
/// stays `MaxTokens`, so its possibly half-written calls are not run. Usage: `input_tokens` = `prompt_tokens` − cached,
/// `cache_read_tokens` = `prompt_tokens_details.cached_tokens`.
pub fn parse_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
    let response: wire::Response = match serde_json::from_slice(body) {
        Ok(response) => response,
        Err(error) => {
            let is_error_body = serde_json::from_slice::<Value>(body)
                .map(|v| v.get("error").is_some())
                .unwrap_or(false);
            if is_error_body {
                return Err(parse_error(200, None, body));
            }
            return Err(ModelError::Other {
                message: format!("malformed Chat Completions response ({error}): {}", snippet(body)),
                http: None,
            });
        }
    };
    let Some(choice) = response.choices.into_iter().next() else {
        return Err(ModelError::Other {
            message: format!("Chat Completions response without choices: {}", snippet(body)),
            http: None,
        });
    };

    let message = choice.message;
    let mut content = Vec::new();
    if let Some(reasoning) = message.reasoning_content.or(message.reasoning)
        && !reasoning.is_empty()
    {
        content.push(ContentBlock::Reasoning {
            text: reasoning,
            signature: None,
        });
    }
    let text = message.content.map(content_text).unwrap_or_default();
    let refused = message.refusal.as_ref().is_some_and(|r| !r.is_empty());
    if !text.is_empty() {
        content.push(ContentBlock::Text { text });
    }
    if let Some(refusal) = message.refusal.filter(|r| !r.is_empty()) {
        content.push(ContentBlock::Text { text: refusal });
    }
    for (index, call) in message.tool_calls.unwrap_or_default().into_iter().enumerate() {
        content.push(ContentBlock::ToolUse(ToolCall {
            id: call
                .id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| format!("call_{index}")),
            name: call.function.name,
            args: parse_arguments(call.function.arguments),
        }));
    }
    let message = AiMessage {
        content,
        meta: MessageMeta::default(),
    };

    let stop_reason = if choice.finish_reason.as_deref() == Some("length") {
        // Cut at the output token limit: tool calls in such a reply may be half-written, and the
        // agent loop must not run them (issue 21, item 3).
        StopReason::MaxTokens
    } else if message.has_tool_calls() {
        StopReason::ToolUse
    } else if refused {
        StopReason::Refusal
    } else {
        match choice.finish_reason.as_deref() {
            Some("stop") | None => StopReason::EndTurn,
            Some("length") => StopReason::MaxTokens,
            Some("tool_calls" | "function_call") => StopReason::ToolUse,
            Some("content_filter") => StopReason::Refusal,
            Some(other) => StopReason::Other(other.to_owned()),
        }
    };

    let usage = response.usage.unwrap_or_default();
    let prompt = usage.prompt_tokens.unwrap_or(0);
    let cached = usage
        .prompt_tokens_details
        .and_then(|d| d.cached_tokens)
        .unwrap_or(0)
        .min(prompt);
    let usage = Usage {
        input_tokens: prompt - cached,
        output_tokens: usage.completion_tokens.unwrap_or(0),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    };
    Ok(ModelResponse {
        message,
        usage,
        stop_reason,
        model: response.model,
        structured_output: None,
    })
}

/// `content` as text: a string, or the `text` of each part of an array.
fn content_text(content: Value) -> String {
    match content {
        Value::String(text) => text,
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

fn parse_arguments(arguments: Option<Value>) -> Value {
    match arguments {
        None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
        Some(Value::String(raw)) if raw.trim().is_empty() => Value::Object(serde_json::Map::new()),
        Some(Value::String(raw)) => serde_json::from_str(&raw).unwrap_or(Value::String(raw)),
        Some(other) => other,
    }
}

/// Map an error answer (status, the `retry-after` hint, body) to a [`ModelError`].
///
/// Reads `{"error": {"message", "type", "code"}}` (OpenAI, ollama, llama.cpp) and also `{"error":
/// "…"}`, `{"message": …}` and `{"detail": …}` (vLLM and other servers). A context overflow —
/// code `context_length_exceeded`, llama.cpp's `exceed_context_size_error`, or a message about the
/// maximum context length — is `ContextTooLong`; `insufficient_quota` is `Auth` (retrying cannot
/// help); 429 → `RateLimited`; 401/403 → `Auth`; 503/529 → `Overloaded`; 408, 409 and other 5xx →
/// `Transport`; other 4xx → `BadRequest`; anything else → `Other`.
pub fn parse_error(status: u16, retry_after: Option<Duration>, body: &[u8]) -> ModelError {
    let value: Option<Value> = serde_json::from_slice(body).ok();
    let error = value.as_ref().map(|v| v.get("error").unwrap_or(v));
    let field = |name: &str| -> Option<String> {
        match error?.get(name)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    };
    let text = match error {
        Some(Value::String(s)) => s.clone(),
        _ => field("message")
            .or_else(|| field("detail"))
            .unwrap_or_else(|| snippet(body)),
    };
    let code = field("code").unwrap_or_default();
    let kind = field("type").unwrap_or_default();
    let tags: Vec<&str> = [kind.as_str(), code.as_str()]
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect();
    let message = if tags.is_empty() {
        format!("{text} (HTTP {status})")
    } else {
        format!("{text} (HTTP {status}, {})", tags.join(", "))
    };

    let client_error = (400..=499).contains(&status) && status != 429;
    if code == "context_length_exceeded"
        || kind == "exceed_context_size_error"
        || (client_error && says_context_full(&text))
    {
        return ModelError::ContextTooLong { message, http: None };
    }
    if code == "insufficient_quota" {
        return ModelError::Auth { message, http: None };
    }
    match status {
        429 => ModelError::RateLimited {
            message,
            retry_after,
            http: None,
        },
        401 | 403 => ModelError::Auth { message, http: None },
        503 | 529 => ModelError::Overloaded {
            message,
            retry_after,
            http: None,
        },
        408 | 409 | 500..=599 => ModelError::Transport { message, http: None },
        400..=499 => ModelError::BadRequest { message, http: None },
        _ => ModelError::Other { message, http: None },
    }
}

fn says_context_full(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("maximum context length")
        || text.contains("context length exceeded")
        || text.contains("exceeds the available context size")
        || text.contains("context window")
}

/// The JSON answer of a structured-output call: the message text parsed as JSON (a surrounding
/// Markdown code fence is tolerated). `None` when the message calls tools or the text is not JSON.
pub(crate) fn structured_output(response: &ModelResponse) -> Option<Value> {
    if response.message.has_tool_calls() {
        return None;
    }
    let text = response.message.text_content();
    let mut text = text.trim();
    if let Some(inner) = text.strip_prefix("```") {
        let inner = inner.strip_prefix("json").unwrap_or(inner);
        text = inner.strip_suffix("```").unwrap_or(inner).trim();
    }
    serde_json::from_str(text).ok()
}

/// Set `response.structured_output` from its text ([`structured_output`]), warning when an answer
/// without calls is not JSON.
pub(crate) fn take_structured_output(response: &mut ModelResponse, model: &str) {
    response.structured_output = structured_output(response);
    if response.structured_output.is_none() && !response.message.has_tool_calls() {
        tracing::warn!(model, "structured output requested but the answer is not JSON");
    }
}
