//! Responses API response body → [`ModelResponse`] (the `Response` object of
//! platform.openai.com/docs/api-reference/responses/object). Untrusted bytes; never panics.
//!
//! `output` items in order: `message` (its `output_text` parts as text, a `refusal` part as text
//! and a refusal), `function_call` (arguments parsed as JSON; text that is not JSON is kept as a
//! string), `reasoning` (its summary texts as the block's text; `id` and `encrypted_content`
//! kept in the signature after [`REASONING_PREFIX`] so the item goes back on the next turn);
//! other item types are skipped. Stop: `status: "incomplete"` with `incomplete_details.reason`
//! `max_output_tokens` → `MaxTokens` (also with calls, which the loop then does not run),
//! `content_filter` → `Refusal`; else calls → `ToolUse`, a refusal → `Refusal`, otherwise
//! `EndTurn`. Usage: `input_tokens` minus `input_tokens_details.cached_tokens`, cached tokens,
//! `output_tokens`. A body holding a non-null `error` is read as an error.

use serde_json::{Value, json};
use trellis_middleware::runtime::message::{AiMessage, ContentBlock, MessageMeta};
use trellis_middleware::runtime::model::{ModelError, StopReason, Usage};
use trellis_middleware::{ModelResponse, ToolCall};

use super::request::REASONING_PREFIX;
use crate::providers::openai::parse_error;
use crate::providers::snippet;

/// Parse the body of a successful Responses call.
pub fn parse_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ModelError::Other {
        message: format!("malformed Responses API response ({e}): {}", snippet(body)),
        http: None,
    })?;
    if value.get("error").is_some_and(|e| !e.is_null()) {
        return Err(parse_error(200, None, body));
    }
    let Some(output) = value.get("output").and_then(Value::as_array) else {
        return Err(ModelError::Other {
            message: format!("Responses API response without output: {}", snippet(body)),
            http: None,
        });
    };
    let mut content = Vec::new();
    let mut refused = false;
    for item in output {
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => content.push(ContentBlock::text(text(part, "text"))),
                        Some("refusal") => {
                            refused = true;
                            content.push(ContentBlock::text(text(part, "refusal")));
                        }
                        _ => {}
                    }
                }
            }
            Some("function_call") => {
                let raw = text(item, "arguments");
                let args = if raw.trim().is_empty() {
                    json!({})
                } else {
                    serde_json::from_str(&raw).unwrap_or(Value::String(raw))
                };
                let id = Some(text(item, "call_id"))
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| text(item, "id"));
                content.push(ContentBlock::ToolUse(ToolCall::new(id, text(item, "name"), args)));
            }
            Some("reasoning") => {
                let summary: String = item
                    .get("summary")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n\n");
                let kept = json!({"id": item.get("id"), "encrypted_content": item.get("encrypted_content")});
                content.push(ContentBlock::Reasoning {
                    text: summary,
                    signature: Some(format!("{REASONING_PREFIX}{kept}")),
                });
            }
            _ => tracing::debug!("skipping a Responses output item of a type Trellis does not model"),
        }
    }
    let message = AiMessage {
        content,
        meta: MessageMeta::default(),
    };
    let incomplete = value
        .get("incomplete_details")
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str);
    let stop_reason = match (value.get("status").and_then(Value::as_str), incomplete) {
        (Some("incomplete"), Some("max_output_tokens")) => StopReason::MaxTokens,
        (Some("incomplete"), Some("content_filter")) => StopReason::Refusal,
        _ if message.has_tool_calls() => StopReason::ToolUse,
        _ if refused => StopReason::Refusal,
        (Some("incomplete"), Some(other)) => StopReason::Other(other.to_owned()),
        _ => StopReason::EndTurn,
    };
    let usage = value.get("usage");
    let count = |path: &[&str]| {
        usage
            .and_then(|u| path.iter().try_fold(u, |v, key| v.get(key)))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let input = count(&["input_tokens"]);
    let cached = count(&["input_tokens_details", "cached_tokens"]).min(input);
    Ok(ModelResponse {
        message,
        usage: Usage {
            input_tokens: input - cached,
            output_tokens: count(&["output_tokens"]),
            cache_read_tokens: cached,
            cache_write_tokens: 0,
        },
        stop_reason,
        model: value.get("model").and_then(Value::as_str).map(str::to_owned),
        structured_output: None,
    })
}
