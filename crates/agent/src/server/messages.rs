//! Trellis messages as LangChain message dicts (what `values.messages` carries and the clients
//! render), and the run input's messages back into Trellis messages.
//!
//! Message ids: a message keeps the `id` it arrived with (a client's human message, stored in
//! [`MessageMeta::extra`](trellis_middleware::runtime::message::MessageMeta) under `"id"`);
//! every other message's id is derived from its thread and its position in the thread
//! ([`message_id`]), so it is the same on every read, and a streamed reply's chunks carry the id
//! its message will have. A middleware that removes or replaces earlier messages (summarization)
//! shifts positions: the later messages then get new ids.

use serde_json::{Map, Value, json};
use trellis_middleware::Message;
use trellis_middleware::runtime::message::{ContentBlock, HumanMessage, MessageMeta};
use uuid::Uuid;

use crate::server::error::ApiError;

/// Where a message's own id is kept in its metadata.
const ID_KEY: &str = "id";
/// Longest client-supplied message id kept.
const MAX_ID_LEN: usize = 128;

/// The id of the message at `index` of `thread` (see the module docs).
pub fn message_id(thread: &Uuid, index: usize, message: Option<&Message>) -> String {
    if let Some(Value::String(id)) = message.and_then(|m| m.meta().extra.get(ID_KEY)) {
        return id.clone();
    }
    Uuid::new_v5(thread, format!("message:{index}").as_bytes()).to_string()
}

/// The text of `content`, as one string when it is only text, else LangChain content blocks. Tool
/// calls are not content here (they are the message's `tool_calls`), so a reply that only calls
/// tools has `""`, as LangChain's OpenAI messages do, not an empty list.
fn content(blocks: &[ContentBlock]) -> Value {
    let only_text = blocks
        .iter()
        .all(|b| matches!(b, ContentBlock::Text { .. } | ContentBlock::ToolUse(_)));
    if only_text {
        let text: String = blocks.iter().filter_map(ContentBlock::as_text).collect();
        return Value::String(text);
    }
    Value::Array(
        blocks
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
                ContentBlock::Reasoning { text, .. } => Some(json!({"type": "thinking", "thinking": text})),
                ContentBlock::Image { .. } => Some(json!({"type": "image"})),
                // Tool calls are in `tool_calls`.
                ContentBlock::ToolUse(_) => None,
            })
            .collect(),
    )
}

/// Where a middleware-injected message came from, for UIs (`additional_kwargs`).
fn kwargs(meta: &MessageMeta) -> Value {
    let mut out = Map::new();
    if let Some(source) = &meta.source {
        out.insert("trellis_source".into(), json!(source));
    }
    Value::Object(out)
}

/// `message` (at `index` of `thread`) as a LangChain message dict.
pub fn to_dict(thread: &Uuid, index: usize, message: &Message) -> Value {
    let id = message_id(thread, index, Some(message));
    let meta = message.meta();
    match message {
        Message::Human(m) => json!({
            "type": "human", "content": content(&m.content), "id": id, "name": null,
            "additional_kwargs": kwargs(meta), "response_metadata": {},
        }),
        Message::Ai(m) => {
            let calls: Vec<Value> = m
                .calls()
                .map(|c| json!({"name": c.name, "args": c.args, "id": c.id, "type": "tool_call"}))
                .collect();
            json!({
                "type": "ai", "content": content(&m.content), "id": id, "name": null,
                "tool_calls": calls, "invalid_tool_calls": [], "usage_metadata": null,
                "additional_kwargs": kwargs(meta), "response_metadata": {},
            })
        }
        Message::Tool(m) => json!({
            "type": "tool", "content": content(&m.content), "id": id, "name": m.name,
            "tool_call_id": m.call_id, "status": if m.is_error { "error" } else { "success" },
            "artifact": null, "additional_kwargs": kwargs(meta), "response_metadata": {},
        }),
        Message::System(m) => json!({
            "type": "system", "content": content(&m.content), "id": id, "name": null,
            "additional_kwargs": kwargs(meta), "response_metadata": {},
        }),
    }
}

/// The messages of a run's `input`: LangChain dicts (`{"type": "human", "content": …}`) or OpenAI
/// ones (`{"role": "user", "content": …}`), user messages only, text content only (a string or
/// `text` blocks). Anything else is a 422 naming what is not supported.
pub fn input_messages(input: &Value) -> Result<Vec<Message>, ApiError> {
    let Value::Object(input) = input else {
        return Err(ApiError::unprocessable(
            "input must be an object like {\"messages\": [...]}",
        ));
    };
    if let Some(key) = input
        .keys()
        .find(|k| *k != "messages" && *k != crate::server::skills::PIN_KEY)
    {
        return Err(ApiError::unprocessable(format!(
            "input.{key} is not supported: input takes only messages and pin_skills"
        )));
    }
    crate::server::skills::input_pins(input)?;
    let Some(Value::Array(list)) = input.get("messages") else {
        return Err(ApiError::unprocessable(
            "input.messages must be a list of messages",
        ));
    };
    list.iter().map(input_message).collect()
}

/// The text of LangChain `text` content blocks, joined; a 422 naming `what` for any other block.
pub fn text_blocks<'a>(blocks: impl Iterator<Item = &'a Value>, what: &str) -> Result<String, ApiError> {
    blocks
        .map(|b| {
            match (
                b.get("type").and_then(Value::as_str),
                b.get("text").and_then(Value::as_str),
            ) {
                (Some("text"), Some(text)) => Ok(text),
                _ => Err(ApiError::unprocessable(format!(
                    "only text content blocks are supported in {what}"
                ))),
            }
        })
        .collect()
}

fn input_message(value: &Value) -> Result<Message, ApiError> {
    let kind = value
        .get("type")
        .or_else(|| value.get("role"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !matches!(kind, "human" | "user") {
        return Err(ApiError::unprocessable(format!(
            "input messages must be human (type \"human\" or role \"user\"), not {kind:?}"
        )));
    }
    let text = match value.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => text_blocks(blocks.iter(), "input messages")?,
        _ => {
            return Err(ApiError::unprocessable(
                "an input message needs content: a string or text blocks",
            ));
        }
    };
    let mut message = HumanMessage::text(text);
    match value.get("id") {
        None | Some(Value::Null) => {}
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_ID_LEN => {
            message.meta.extra.insert(ID_KEY.into(), json!(id));
        }
        Some(_) => {
            return Err(ApiError::unprocessable(format!(
                "a message id must be a string of 1 to {MAX_ID_LEN} bytes"
            )));
        }
    }
    Ok(Message::Human(message))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use trellis_middleware::ToolCall;
    use trellis_middleware::runtime::message::{AiMessage, ToolMessage};

    #[test]
    fn messages_become_langchain_dicts_with_stable_ids() {
        let t = Uuid::new_v4();
        let ai = Message::Ai(AiMessage::tool_calls([ToolCall::new(
            "c1",
            "ls",
            json!({"path": "/"}),
        )]));
        let d = to_dict(&t, 1, &ai);
        assert_eq!(d["type"], "ai");
        assert_eq!(
            d["content"], "",
            "a reply that only calls tools has no content blocks"
        );
        assert_eq!(
            d["tool_calls"][0],
            json!({"name": "ls", "args": {"path": "/"}, "id": "c1", "type": "tool_call"})
        );
        assert_eq!(d["id"], to_dict(&t, 1, &ai)["id"], "the same on every read");
        assert_ne!(d["id"], to_dict(&t, 2, &ai)["id"]);
        assert_ne!(d["id"], to_dict(&Uuid::new_v4(), 1, &ai)["id"]);
        let tool = Message::Tool(ToolMessage::error("c1", "ls", "no such dir"));
        let d = to_dict(&t, 2, &tool);
        assert_eq!(
            (d["type"].as_str(), d["status"].as_str()),
            (Some("tool"), Some("error"))
        );
        assert_eq!(
            (d["tool_call_id"].as_str(), d["content"].as_str()),
            (Some("c1"), Some("no such dir"))
        );
    }

    #[test]
    fn input_takes_langchain_and_openai_forms_and_keeps_ids() {
        let got = input_messages(&json!({"messages": [
            {"type": "human", "content": "hi", "id": "m-1"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ]}))
        .unwrap();
        assert_eq!(got[0].text(), "hi");
        assert_eq!(to_dict(&Uuid::nil(), 0, &got[0])["id"], "m-1");
        assert_eq!(got[1].text(), "ab");
        for bad in [
            json!({"messages": [{"type": "ai", "content": "x"}]}),
            json!({"messages": [{"type": "human"}]}),
            json!({"messages": "hi"}),
            json!({"files": {}}),
            json!({"messages": [{"type": "human", "content": "x", "id": 3}]}),
            json!([]),
        ] {
            assert_eq!(input_messages(&bad).unwrap_err().status, 422, "{bad}");
        }
    }
}
