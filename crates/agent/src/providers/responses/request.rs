//! [`ModelRequest`] → Responses API body (platform.openai.com/docs/api-reference/responses/create).
//!
//! * System blocks → `instructions` (joined by blank lines).
//! * Human messages → `{"role": "user", "content": [input_text | input_image]}`; AI text →
//!   `{"role": "assistant", "content": text}`; tool calls → `{"type": "function_call", "call_id",
//!   "name", "arguments"}` (arguments that were not a JSON object as `{"_raw": …}`); tool
//!   results → `{"type": "function_call_output", "call_id", "output"}`; reasoning written by this
//!   provider (signature starting with [`REASONING_PREFIX`]) → the `reasoning` item it came from;
//!   other providers' reasoning is left out. A mid-conversation system message → user text in the
//!   system-reminder marker.
//! * Tools → `{"type": "function", "name", "description", "parameters", "strict": false}`;
//!   `tool_choice` `auto` / `none` / `required` / `{"type": "function", "name"}`;
//!   `response_format` → `text.format` `json_schema` (strict as for Chat Completions).
//! * `max_output_tokens`, `temperature`, `top_p`, `reasoning.effort`; `stop_sequences` and
//!   `thinking_budget` have no Responses equivalent and are refused with `BadRequest`.
//! * Always `"store": false` and `"include": ["reasoning.encrypted_content"]`.

use serde_json::{Value, json};
use trellis_middleware::runtime::message::{ContentBlock, ImageSource};
use trellis_middleware::runtime::model::{ModelError, ToolChoice};
use trellis_middleware::tools::ToolSpec;
use trellis_middleware::{Message, ModelRequest};

use crate::providers::openai::request::{replayed_arguments, tool_text};
use crate::providers::openai::schema;
use crate::providers::tool_json::{ToolJsonCache, Tools};
use crate::providers::{f32_to_f64, system_reminder};

/// How a [`ContentBlock::Reasoning`] signature marks a Responses `reasoning` item: this prefix,
/// then the item's `{"id", "encrypted_content"}` as JSON.
pub const REASONING_PREFIX: &str = "openai-responses:";

fn refuse(message: String) -> ModelError {
    ModelError::BadRequest { message, http: None }
}

/// The request body, and its tools apart: they come from `tool_cache` when it has them, and the
/// body holds a `null` under `tools` where they go (see `WireApi::request_body`).
pub(crate) fn build(
    request: &ModelRequest,
    model: &str,
    tool_cache: &ToolJsonCache,
) -> Result<(Value, Tools), ModelError> {
    if !request.stop_sequences.is_empty() {
        return Err(refuse(
            "stop_sequences are not supported by the Responses API".into(),
        ));
    }
    if request.thinking_budget.is_some() {
        return Err(refuse(
            "thinking_budget is an Anthropic setting; the Responses API takes reasoning_effort".into(),
        ));
    }
    let mut input = Vec::new();
    let mut disclosed = Vec::new();
    for message in request.messages.iter() {
        match message {
            Message::Human(m) => input.push(json!({"role": "user", "content": user_parts(&m.content)})),
            Message::Ai(m) => assistant_items(&m.content, &mut input),
            Message::Tool(m) => input.push(json!({
                "type": "function_call_output", "call_id": m.call_id, "output": tool_text(&m.content)
            })),
            Message::System(m) => {
                disclosed.extend(m.tools.iter());
                let text: String = m.content.iter().filter_map(ContentBlock::as_text).collect();
                if !text.is_empty() {
                    input.push(json!({"role": "user", "content": system_reminder(&text)}));
                }
            }
        }
    }
    let mut body = json!({"model": model, "input": input, "store": false,
                          "include": ["reasoning.encrypted_content"]});
    let instructions: Vec<&str> = request
        .system
        .iter()
        .map(|b| b.text.as_str())
        .filter(|t| !t.is_empty())
        .collect();
    let tools = tool_cache.request_tools(&request.tools, disclosed, tool);
    let map = body
        .as_object_mut()
        .ok_or_else(|| ModelError::other("body is an object"))?;
    if !instructions.is_empty() {
        map.insert("instructions".into(), json!(instructions.join("\n\n")));
    }
    if !tools.is_empty() {
        if let Some(choice) = &request.tool_choice {
            map.insert(
                "tool_choice".into(),
                match choice {
                    ToolChoice::Auto => json!("auto"),
                    ToolChoice::None => json!("none"),
                    ToolChoice::Required => json!("required"),
                    ToolChoice::Tool { name } => json!({"type": "function", "name": name}),
                },
            );
        }
        // The place `tools` fill (see `WireApi::request_body`).
        map.insert("tools".into(), Value::Null);
    }
    if let Some(format) = &request.response_format {
        let (schema, strict) = match format.strict.then(|| schema::strict(&format.schema)) {
            Some(Ok(strict)) => (strict, true),
            _ => (format.schema.clone(), false),
        };
        map.insert(
            "text".into(),
            json!({"format": {"type": "json_schema", "name": format.name, "schema": schema, "strict": strict}}),
        );
    }
    if let Some(max) = request.max_output_tokens {
        map.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(t) = request.temperature {
        map.insert("temperature".into(), json!(f32_to_f64(t)));
    }
    if let Some(p) = request.top_p {
        map.insert("top_p".into(), json!(f32_to_f64(p)));
    }
    if let Some(effort) = request.reasoning_effort {
        map.insert("reasoning".into(), json!({"effort": effort.as_str()}));
    }
    Ok((body, tools))
}

fn user_parts(content: &[ContentBlock]) -> Vec<Value> {
    content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                Some(json!({"type": "input_text", "text": text}))
            }
            ContentBlock::Image { source, .. } => {
                Some(json!({"type": "input_image", "image_url": match source {
                    ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
                    ImageSource::Url { url } => url.clone(),
                }}))
            }
            _ => None,
        })
        .collect()
}

/// An AI message as input items, in order: reasoning, text (consecutive text joined), calls.
fn assistant_items(content: &[ContentBlock], input: &mut Vec<Value>) {
    let mut text = String::new();
    let flush = |text: &mut String, input: &mut Vec<Value>| {
        if !text.is_empty() {
            input.push(json!({"role": "assistant", "content": std::mem::take(text)}));
        }
    };
    for block in content {
        match block {
            ContentBlock::Text { text: t } => text.push_str(t),
            ContentBlock::ToolUse(call) => {
                flush(&mut text, input);
                input.push(
                    json!({"type": "function_call", "call_id": call.id, "name": call.name,
                                  "arguments": replayed_arguments(&call.args)}),
                );
            }
            ContentBlock::Reasoning {
                text: summary,
                signature,
            } => {
                let Some(item) = signature
                    .as_deref()
                    .and_then(|s| s.strip_prefix(REASONING_PREFIX))
                    .and_then(|s| serde_json::from_str::<Value>(s).ok())
                else {
                    continue;
                };
                flush(&mut text, input);
                let summary: Vec<Value> = if summary.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "summary_text", "text": summary})]
                };
                input.push(json!({"type": "reasoning", "id": item["id"], "summary": summary,
                                  "encrypted_content": item["encrypted_content"]}));
            }
            ContentBlock::Image { .. } => {}
        }
    }
    flush(&mut text, input);
}

/// `spec` as a Responses API function tool, `None` (with a warning) when its parameters are not a
/// JSON object schema.
fn tool(spec: &ToolSpec) -> Option<Value> {
    let parameters = schema::function_parameters(&spec.parameters);
    if parameters.is_none() {
        tracing::warn!(tool = %spec.name, "tool left out: its parameters are not a JSON object schema");
    }
    Some(
        json!({"type": "function", "name": spec.name, "description": spec.description,
                "parameters": parameters?, "strict": false}),
    )
}
