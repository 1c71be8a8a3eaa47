//! A piece of the model's reply as the `AIMessageChunk` dict of a `messages` part, and the
//! metadata that goes with it, serialized straight from what they are made of.
//!
//! Every piece of every reply is a part, so this runs several times a step. Building each chunk as
//! a `serde_json::Value` (a map of eleven keys, its metadata map cloned and extended) and then
//! serializing it took 7% of the server's CPU on the serve bench (paced wave, state on tmpfs,
//! perf, 2026-12-07). Here a chunk is a borrowed struct written once, and a run's metadata is
//! serialized once ([`TupleMetadata`]).
//!
//! The JSON is what the `Value` gave, key for key, in the same order. A test holds the two equal.

use std::fmt::Write;

use serde::Serialize;
use serde_json::Value;
use trellis_middleware::runtime::stream::ModelDelta;

/// The `AIMessageChunk` dict of `delta`, a piece of the reply whose message id is `id`, as
/// compact JSON; `None` for a piece the `messages` mode does not carry (reasoning).
pub(super) fn chunk_json(id: &str, delta: &ModelDelta) -> Option<String> {
    let mut content = "";
    let mut call = None;
    let mut usage_metadata = None;
    match delta {
        ModelDelta::Text { text, .. } => content = text.as_str(),
        ModelDelta::ToolCall { index, id, name } => {
            call = Some(ToolCallChunk {
                name: Some(name),
                args: "",
                id: Some(id),
                index: *index,
                kind: "tool_call_chunk",
            });
        }
        ModelDelta::ToolArguments { index, json } => {
            call = Some(ToolCallChunk {
                name: None,
                args: json,
                id: None,
                index: *index,
                kind: "tool_call_chunk",
            });
        }
        ModelDelta::Finished { usage, .. } => {
            let input = usage.total_input();
            usage_metadata = Some(UsageMetadata {
                input_tokens: input,
                output_tokens: usage.output_tokens,
                total_tokens: input + usage.output_tokens,
                input_token_details: CacheDetails {
                    cache_read: usage.cache_read_tokens,
                    cache_creation: usage.cache_write_tokens,
                },
            });
        }
        _ => return None,
    }
    let chunk = Chunk {
        kind: "AIMessageChunk",
        content,
        id,
        name: None,
        tool_calls: [],
        invalid_tool_calls: [],
        tool_call_chunks: call.as_slice(),
        additional_kwargs: Empty {},
        response_metadata: Empty {},
        // The last piece is the one with the usage.
        chunk_position: usage_metadata.is_some().then_some("last"),
        usage_metadata,
    };
    serde_json::to_string(&chunk).ok()
}

#[derive(Serialize)]
struct Chunk<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    content: &'a str,
    id: &'a str,
    name: Option<&'a str>,
    tool_calls: [(); 0],
    invalid_tool_calls: [(); 0],
    tool_call_chunks: &'a [ToolCallChunk<'a>],
    additional_kwargs: Empty,
    response_metadata: Empty,
    usage_metadata: Option<UsageMetadata>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chunk_position: Option<&'static str>,
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct ToolCallChunk<'a> {
    name: Option<&'a str>,
    args: &'a str,
    id: Option<&'a str>,
    index: usize,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct UsageMetadata {
    input_tokens: u64,
    output_tokens: u64,
    total_tokens: u64,
    input_token_details: CacheDetails,
}

#[derive(Serialize)]
struct CacheDetails {
    cache_read: u64,
    cache_creation: u64,
}

/// A run's metadata (a JSON object), serialized once, for the second item of its `messages`
/// parts: that object with `langgraph_node` and `langgraph_step` added last.
#[derive(Debug, Clone)]
pub(super) struct TupleMetadata {
    /// The object's JSON without its closing brace, with a comma after its last member if any.
    open: String,
}

impl TupleMetadata {
    /// From `metadata`, an object (anything else counts as an empty one).
    pub(super) fn new(metadata: &Value) -> Self {
        let mut open = match metadata {
            Value::Object(map) if !map.is_empty() => metadata.to_string(),
            _ => "{}".to_owned(),
        };
        open.pop();
        if open.len() > 1 {
            open.push(',');
        }
        Self { open }
    }

    /// The `[item, metadata]` pair of a part whose item (already JSON) comes from `node` at
    /// `step`.
    pub(super) fn pair(&self, item: &str, node: &str, step: u32) -> String {
        let node = serde_json::to_string(node).unwrap_or_else(|_| "null".to_owned());
        let mut out = String::with_capacity(item.len() + self.open.len() + node.len() + 48);
        out.push('[');
        out.push_str(item);
        out.push(',');
        out.push_str(&self.open);
        out.push_str("\"langgraph_node\":");
        out.push_str(&node);
        out.push_str(",\"langgraph_step\":");
        let _ = write!(out, "{step}}}]");
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;
    use trellis_middleware::runtime::model::{StopReason, Usage};

    use super::*;

    /// The chunk as it was built before: a `Value`.
    fn as_value(id: &str, delta: &ModelDelta) -> Option<Value> {
        let mut chunk = json!({
            "type": "AIMessageChunk", "content": "", "id": id, "name": null,
            "tool_calls": [], "invalid_tool_calls": [], "tool_call_chunks": [],
            "additional_kwargs": {}, "response_metadata": {}, "usage_metadata": null,
        });
        match delta {
            ModelDelta::Text { text, .. } => chunk["content"] = json!(text),
            ModelDelta::ToolCall { index, id, name } => {
                chunk["tool_call_chunks"] =
                    json!([{"name": name, "args": "", "id": id, "index": index, "type": "tool_call_chunk"}]);
            }
            ModelDelta::ToolArguments { index, json } => {
                chunk["tool_call_chunks"] = json!([{"name": null, "args": json, "id": null, "index": index, "type": "tool_call_chunk"}]);
            }
            ModelDelta::Finished { usage, .. } => {
                let input = usage.total_input();
                chunk["usage_metadata"] = json!({
                    "input_tokens": input, "output_tokens": usage.output_tokens,
                    "total_tokens": input + usage.output_tokens,
                    "input_token_details": {"cache_read": usage.cache_read_tokens, "cache_creation": usage.cache_write_tokens},
                });
                chunk["chunk_position"] = json!("last");
            }
            _ => return None,
        }
        Some(chunk)
    }

    #[test]
    fn chunks_are_the_dicts_they_were() {
        let usage = Usage {
            input_tokens: 100,
            output_tokens: 7,
            cache_read_tokens: 20,
            cache_write_tokens: 3,
        };
        let deltas = [
            ModelDelta::Text {
                index: 0,
                text: "a \"quoted\"\nline ✓".into(),
            },
            ModelDelta::ToolCall {
                index: 1,
                id: "call_1".into(),
                name: "write_file".into(),
            },
            ModelDelta::ToolCall {
                index: 2,
                id: String::new(),
                name: "ls".into(),
            },
            ModelDelta::ToolArguments {
                index: 1,
                json: "{\"file_path\": \"/a\"}".into(),
            },
            ModelDelta::Finished {
                stop_reason: StopReason::ToolUse,
                usage,
            },
        ];
        for delta in &deltas {
            let made = chunk_json("msg-1", delta).expect("a chunk");
            let before = as_value("msg-1", delta).expect("a chunk");
            assert_eq!(serde_json::from_str::<Value>(&made).unwrap(), before, "{delta:?}");
            // Key for key in the same order, where the map keeps its order (`preserve_order`).
            if cfg!(feature = "acp") {
                assert_eq!(made, before.to_string(), "{delta:?}");
            }
        }
        let reasoning = ModelDelta::Reasoning {
            index: 0,
            text: "hm".into(),
        };
        assert_eq!(chunk_json("msg-1", &reasoning), None);
    }

    #[test]
    fn the_pair_carries_the_metadata_with_node_and_step() {
        let metadata = json!({"run_id": "r", "thread_id": "t", "graph_id": "agent"});
        let pair = TupleMetadata::new(&metadata).pair("{\"k\":1}", "tools", 3);
        let mut expected = metadata.clone();
        expected["langgraph_node"] = json!("tools");
        expected["langgraph_step"] = json!(3);
        assert_eq!(
            serde_json::from_str::<Value>(&pair).unwrap(),
            json!([{"k": 1}, expected])
        );
        if cfg!(feature = "acp") {
            assert_eq!(pair, json!([{"k": 1}, expected]).to_string());
        }
        let bare = TupleMetadata::new(&json!({})).pair("1", "model\"", 1);
        assert_eq!(
            serde_json::from_str::<Value>(&bare).unwrap(),
            json!([1, {"langgraph_node": "model\"", "langgraph_step": 1}])
        );
    }
}
