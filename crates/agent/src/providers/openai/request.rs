//! [`ModelRequest`] → Chat Completions request body.
//!
//! * The system blocks are joined with a blank line (`"\n\n"`) into **one** leading `system` message:
//!   OpenAI caches prefixes on its own (breakpoints mean nothing here), and many local chat templates
//!   accept a single system message at the start only.
//! * Human messages: `content` is a string when the message is one text block, an array of `text` and
//!   `image_url` parts otherwise (inline images become `data:` URLs).
//! * AI messages: text blocks concatenated into `content` (`null` when the message only calls tools),
//!   tool calls as `tool_calls` with `arguments` as a JSON string. Arguments that were not a JSON
//!   object (kept as a raw string) are sent back as `{"_raw": "<text>"}`, as for Anthropic: servers
//!   parse `arguments`, and ollama answers 400 to text that is not JSON, which would fail the thread
//!   on every later call. The tool's error result already told the model what was wrong. Reasoning
//!   blocks are not sent back.
//! * Tool messages: `{"role": "tool", "tool_call_id", "content"}` with the text of the result; tool
//!   messages cannot carry images, so an image is replaced by [`IMAGE_OMITTED`]. `is_error` has no
//!   field; the result text says what failed.
//! * A mid-conversation [`Message::System`]: a `system` message in place, or a `user` message wrapped
//!   in the system-reminder marker, per [`InlineSystem`]; its tools are appended to `tools` after the
//!   request's own (names already listed are skipped).
//! * `tool_choice` only when there are tools; `response_format` as `json_schema`; the output cap as
//!   `max_completion_tokens` or `max_tokens` per [`MaxTokensField`]; `temperature` and `top_p` as
//!   given, `stop_sequences` as `stop`, `reasoning_effort` as given (`thinking_budget`, Anthropic's,
//!   is refused by [`OpenAiModel::request_body`](super::OpenAiModel::request_body)).

use std::borrow::Cow;

use serde_json::{Value, json};
use trellis_middleware::runtime::message::{ContentBlock, ImageSource};
use trellis_middleware::runtime::model::ToolChoice;
use trellis_middleware::tools::ToolSpec;
use trellis_middleware::tools::canonical::Sorted;
use trellis_middleware::{Message, ModelRequest};

use super::{InlineSystem, MaxTokensField};
use super::{schema, wire};
use crate::providers::tool_json::{ToolJsonCache, Tools};
use crate::providers::{f32_to_f64, system_reminder};

/// Sent in place of an image in a tool result (Chat Completions tool messages are text only).
pub const IMAGE_OMITTED: &str = "[image omitted: tool results cannot carry images on this API]";

/// Build the request body, and its `tools` apart (their place in the body is made by
/// [`with_tools_slot`]): they come from `tool_cache` when it has them.
pub(crate) fn build<'a>(
    request: &'a ModelRequest,
    model: &'a str,
    max_tokens_field: MaxTokensField,
    inline_system: InlineSystem,
    tool_cache: &ToolJsonCache,
) -> (wire::Request<'a>, Tools) {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    let system: Vec<&str> = request
        .system
        .iter()
        .map(|b| b.text.as_str())
        .filter(|t| !t.is_empty())
        .collect();
    if !system.is_empty() {
        messages.push(wire::Message::System {
            content: Cow::Owned(system.join("\n\n")),
        });
    }

    let mut disclosed = Vec::new();
    for message in request.messages.iter() {
        match message {
            Message::Human(m) => messages.push(wire::Message::User {
                content: user_content(&m.content),
            }),
            Message::Ai(m) => messages.push(assistant(&m.content)),
            Message::Tool(m) => messages.push(wire::Message::Tool {
                tool_call_id: &m.call_id,
                content: tool_text(&m.content),
            }),
            Message::System(m) => {
                disclosed.extend(m.tools.iter());
                let text: String = m.content.iter().filter_map(ContentBlock::as_text).collect();
                if text.is_empty() {
                    continue;
                }
                messages.push(match inline_system {
                    InlineSystem::SystemRole => wire::Message::System {
                        content: Cow::Owned(text),
                    },
                    InlineSystem::UserMarker => wire::Message::User {
                        content: wire::UserContent::Text(Cow::Owned(system_reminder(&text))),
                    },
                });
            }
        }
    }

    let tools = tool_cache.request_tools(&request.tools, disclosed, tool);

    let tool_choice = match &request.tool_choice {
        _ if tools.is_empty() => None,
        None => None,
        Some(ToolChoice::Auto) => Some(wire::ToolChoice::Mode("auto")),
        Some(ToolChoice::None) => Some(wire::ToolChoice::Mode("none")),
        Some(ToolChoice::Required) => Some(wire::ToolChoice::Mode("required")),
        Some(ToolChoice::Tool { name }) => Some(wire::ToolChoice::Function {
            kind: "function",
            function: wire::Named { name },
        }),
    };

    let response_format = request.response_format.as_ref().map(|f| {
        let (schema, strict) = match f.strict.then(|| schema::strict(&f.schema)) {
            Some(Ok(strict)) => (Cow::Owned(strict), true),
            Some(Err(why)) => {
                tracing::warn!(format = %f.name, "structured output sent without strict mode: {why}");
                (Cow::Borrowed(&f.schema), false)
            }
            None => (Cow::Borrowed(&f.schema), false),
        };
        wire::ResponseFormat {
            kind: "json_schema",
            json_schema: wire::JsonSchema {
                name: &f.name,
                schema,
                strict,
            },
        }
    });

    let (max_completion_tokens, max_tokens) = match max_tokens_field {
        MaxTokensField::MaxCompletionTokens => (request.max_output_tokens, None),
        MaxTokensField::MaxTokens => (None, request.max_output_tokens),
    };

    let body = wire::Request {
        model,
        messages,
        tool_choice,
        response_format,
        max_completion_tokens,
        max_tokens,
        temperature: request.temperature.map(f32_to_f64),
        top_p: request.top_p.map(f32_to_f64),
        stop: &request.stop_sequences,
        reasoning_effort: request.reasoning_effort.map(|e| e.as_str()),
    };
    (body, tools)
}

/// `spec` as a Chat Completions tool, `None` (with a warning) when its parameters are not a JSON
/// object schema.
fn tool(spec: &ToolSpec) -> Option<Value> {
    let Some(parameters) = schema::function_parameters(&spec.parameters) else {
        tracing::warn!(
            tool = %spec.name,
            "tool left out of the request: its parameters are not a JSON object schema"
        );
        return None;
    };
    Some(json!({"type": "function", "function": {
        "name": spec.name, "description": spec.description, "parameters": parameters,
    }}))
}

/// `body` (from [`build`]'s request) with a `null` under `tools` right after `messages`, where the
/// wire struct kept them (the key order of a serialized [`Value`] in builds with
/// `preserve_order`): the place [`Tools`] fill. No key without tools.
pub(crate) fn with_tools_slot(body: Value, tools: &Tools) -> Value {
    let Value::Object(map) = body else {
        return body;
    };
    if tools.is_empty() {
        return Value::Object(map);
    }
    let mut out = serde_json::Map::new();
    for (key, value) in map {
        let after = key == "messages";
        out.insert(key, value);
        if after {
            out.insert("tools".into(), Value::Null);
        }
    }
    // Last, in a body without `messages` (`build` always writes them).
    out.entry("tools").or_insert(Value::Null);
    Value::Object(out)
}

fn image_url(source: &ImageSource) -> wire::Part<'_> {
    let url = match source {
        ImageSource::Base64 { media_type, data } => Cow::Owned(format!("data:{media_type};base64,{data}")),
        ImageSource::Url { url } => Cow::Borrowed(url.as_str()),
    };
    wire::Part::ImageUrl {
        image_url: wire::ImageUrl { url },
    }
}

fn user_content(content: &[ContentBlock]) -> wire::UserContent<'_> {
    if let [ContentBlock::Text { text }] = content {
        return wire::UserContent::Text(Cow::Borrowed(text));
    }
    let parts: Vec<wire::Part<'_>> = content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(wire::Part::Text {
                text: Cow::Borrowed(text),
            }),
            ContentBlock::Image { source } => Some(image_url(source)),
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        wire::UserContent::Text(Cow::Borrowed(""))
    } else {
        wire::UserContent::Parts(parts)
    }
}

fn assistant(content: &[ContentBlock]) -> wire::Message<'_> {
    let text: String = content.iter().filter_map(ContentBlock::as_text).collect();
    let tool_calls: Vec<wire::ToolCall<'_>> = content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolUse(call) => Some(wire::ToolCall {
                id: &call.id,
                kind: "function",
                function: wire::FunctionCall {
                    name: &call.name,
                    arguments: Cow::Owned(replayed_arguments(&call.args)),
                },
            }),
            _ => None,
        })
        .collect();
    let content = if text.is_empty() && !tool_calls.is_empty() {
        None
    } else {
        Some(Cow::Owned(text))
    };
    wire::Message::Assistant { content, tool_calls }
}

/// The text of a tool result, images replaced by [`IMAGE_OMITTED`].
pub(crate) fn tool_text(content: &[ContentBlock]) -> Cow<'_, str> {
    if let [ContentBlock::Text { text }] = content {
        return Cow::Borrowed(text);
    }
    let mut out = String::new();
    for block in content {
        match block {
            ContentBlock::Text { text } => out.push_str(text),
            ContentBlock::Image { .. } => {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(IMAGE_OMITTED);
            }
            _ => {}
        }
    }
    Cow::Owned(out)
}

/// A call's arguments as the JSON object text Chat Completions expects back.
pub(crate) fn replayed_arguments(args: &Value) -> String {
    match args {
        Value::Object(_) => Sorted(args).to_string(),
        Value::String(raw) if serde_json::from_str::<Value>(raw).is_ok_and(|v| v.is_object()) => raw.clone(),
        other => serde_json::json!({ "_raw": other }).to_string(),
    }
}
