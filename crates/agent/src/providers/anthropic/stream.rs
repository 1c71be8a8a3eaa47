//! The Anthropic Messages event stream (`"stream": true`), assembled into the same JSON message a
//! non-streaming call returns, so [`parse_response`](super::parse_response) reads both and a
//! streamed reply can never differ from the unstreamed one.
//!
//! Events (<https://docs.anthropic.com/en/docs/build-with-claude/streaming>): `message_start`
//! (the message with empty `content`), `content_block_start` / `content_block_delta` /
//! `content_block_stop` per block (`text_delta`, `input_json_delta`, `thinking_delta`,
//! `signature_delta`), `message_delta` (`stop_reason`, `stop_sequence`, cumulative `usage`),
//! `message_stop`, `ping`, and `error` (e.g. `overloaded_error` mid-stream). Unknown events and
//! delta types are ignored, as the documentation asks.

use serde_json::{Map, Value, json};
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::stream::{DeltaSink, ModelDelta};

use super::response::parse_error;
use crate::providers::streamed::{Assemble, bad_event};

/// A reply being assembled from its events.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    message: Option<Map<String, Value>>,
    blocks: Vec<Value>,
    /// Tool input JSON received so far, per block.
    partial_json: Vec<String>,
    done: bool,
}

impl Assemble for Assembler {
    fn take(&mut self, name: Option<&str>, data: &str, on_delta: DeltaSink<'_>) -> Result<(), ModelError> {
        self.event(name.unwrap_or("message"), data, on_delta)
    }

    /// True once `message_stop` arrived.
    fn is_done(&self) -> bool {
        self.done
    }

    fn finish(self) -> Vec<u8> {
        Assembler::finish(self)
    }
}

impl Assembler {
    /// Take one event, passing what it adds to `on_delta`.
    pub(crate) fn event(
        &mut self,
        name: &str,
        data: &str,
        on_delta: DeltaSink<'_>,
    ) -> Result<(), ModelError> {
        let value: Value = serde_json::from_str(data).map_err(|e| bad_event("Anthropic", name, &e))?;
        let kind = value.get("type").and_then(Value::as_str).unwrap_or(name);
        match kind {
            "message_start" => {
                let message = value
                    .get("message")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                self.message = Some(message);
            }
            "content_block_start" => {
                let index = index_of(&value)?;
                let block = value.get("content_block").cloned().unwrap_or(Value::Null);
                self.ensure(index);
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    on_delta(ModelDelta::ToolCall {
                        index,
                        id: str_of(&block, "id"),
                        name: str_of(&block, "name"),
                    });
                }
                if let Some(text) = block
                    .get("text")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    on_delta(ModelDelta::Text {
                        index,
                        text: text.to_owned(),
                    });
                }
                self.blocks[index] = block;
            }
            "content_block_delta" => {
                let index = index_of(&value)?;
                self.ensure(index);
                let delta = value.get("delta").cloned().unwrap_or(Value::Null);
                let text = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let piece = text("text");
                        append(&mut self.blocks[index], "text", &piece);
                        on_delta(ModelDelta::Text { index, text: piece });
                    }
                    Some("thinking_delta") => {
                        let piece = text("thinking");
                        append(&mut self.blocks[index], "thinking", &piece);
                        on_delta(ModelDelta::Reasoning { index, text: piece });
                    }
                    Some("signature_delta") => {
                        let piece = text("signature");
                        append(&mut self.blocks[index], "signature", &piece);
                        on_delta(ModelDelta::ReasoningSignature {
                            index,
                            signature: piece,
                        });
                    }
                    Some("input_json_delta") => {
                        let piece = text("partial_json");
                        self.partial_json[index].push_str(&piece);
                        on_delta(ModelDelta::ToolArguments { index, json: piece });
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index_of(&value)?;
                self.ensure(index);
                self.close_tool_input(index);
            }
            "message_delta" => {
                let message = self.message.get_or_insert_with(Map::new);
                if let Some(delta) = value.get("delta").and_then(Value::as_object) {
                    for (key, v) in delta {
                        message.insert(key.clone(), v.clone());
                    }
                }
                if let Some(usage) = value.get("usage").and_then(Value::as_object) {
                    let entry = message.entry("usage").or_insert_with(|| json!({}));
                    if let Value::Object(total) = entry {
                        for (key, v) in usage {
                            if !v.is_null() {
                                total.insert(key.clone(), v.clone());
                            }
                        }
                    }
                }
            }
            "message_stop" => self.done = true,
            "error" => return Err(parse_error(200, None, data.as_bytes())),
            _ => {}
        }
        Ok(())
    }

    /// The whole reply as the non-streaming JSON body.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        for index in 0..self.blocks.len() {
            self.close_tool_input(index);
        }
        let mut message = self.message.unwrap_or_default();
        message.insert("content".into(), Value::Array(self.blocks));
        serde_json::to_vec(&Value::Object(message)).unwrap_or_default()
    }

    fn ensure(&mut self, index: usize) {
        while self.blocks.len() <= index {
            self.blocks.push(Value::Null);
            self.partial_json.push(String::new());
        }
    }

    /// Parse a tool block's streamed input (empty means `{}`); input that is not JSON is kept as
    /// its text, as the non-streaming parser does with such arguments.
    fn close_tool_input(&mut self, index: usize) {
        let json = std::mem::take(&mut self.partial_json[index]);
        let block = &mut self.blocks[index];
        if block.get("type").and_then(Value::as_str) != Some("tool_use") || json.is_empty() {
            return;
        }
        let input = serde_json::from_str(&json).unwrap_or(Value::String(json));
        if let Value::Object(map) = block {
            map.insert("input".into(), input);
        }
    }
}

fn index_of(event: &Value) -> Result<usize, ModelError> {
    event
        .get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .filter(|i| *i < 10_000)
        .ok_or_else(|| ModelError::Other {
            message: format!("an Anthropic stream event has no usable block index: {event}"),
            http: None,
        })
}

fn str_of(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_owned()
}

fn append(block: &mut Value, key: &str, piece: &str) {
    if let Value::Object(map) = block {
        let entry = map
            .entry(key.to_owned())
            .or_insert_with(|| Value::String(String::new()));
        if let Value::String(s) = entry {
            s.push_str(piece);
        } else {
            *entry = Value::String(piece.to_owned());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {

    use proptest::prelude::*;
    use trellis_middleware::ModelResponse;
    use trellis_middleware::runtime::message::ContentBlock;

    use super::*;
    use crate::providers::anthropic::parse_response;
    use crate::providers::sse::assemble_split;

    /// A reply with reasoning (and its signature), text with multi-byte characters, and a tool call,
    /// as the Messages API documents its non-streaming body.
    const WHOLE: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",
      "content":[{"type":"thinking","thinking":"Let me check the file.","signature":"sig-abc"},
                 {"type":"text","text":"Reading it now. Ünïcode ✓"},
                 {"type":"tool_use","id":"toolu_1","name":"read_file","input":{"file_path":"/notes.md","limit":5}}],
      "stop_reason":"tool_use","stop_sequence":null,
      "usage":{"input_tokens":120,"output_tokens":45,"cache_read_input_tokens":100,"cache_creation_input_tokens":0}}"#;

    /// The same reply as the documented event stream.
    pub(crate) const EVENTS: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":120,\"output_tokens\":1,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":0}}}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me check \"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"the file.\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"sig-abc\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Reading it now. \"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Ünïcode ✓\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read_file\",\"input\":{}}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"file_path\\\": \\\"/no\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"tes.md\\\", \\\"limit\\\": 5}\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":2}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":45}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";

    /// Assemble `body` delivered in chunks split at the given byte offsets.
    fn assemble(body: &str, cuts: &[usize]) -> (Result<ModelResponse, ModelError>, Vec<ModelDelta>) {
        let (result, deltas) = assemble_split::<Assembler>(body, cuts);
        let result = result.and_then(|(body, complete)| {
            assert!(complete);
            parse_response(&body)
        });
        (result, deltas)
    }

    #[test]
    fn the_stream_assembles_to_the_unstreamed_reply() {
        let (streamed, deltas) = assemble(EVENTS, &[]);
        assert_eq!(streamed.unwrap(), parse_response(WHOLE.as_bytes()).unwrap());
        let text: String = deltas
            .iter()
            .filter_map(|d| match d {
                ModelDelta::Text { index: 1, text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "Reading it now. Ünïcode ✓");
        assert!(deltas.contains(&ModelDelta::ToolCall {
            index: 2,
            id: "toolu_1".into(),
            name: "read_file".into()
        }));
        assert!(deltas.contains(&ModelDelta::ReasoningSignature {
            index: 0,
            signature: "sig-abc".into()
        }));
    }

    #[test]
    fn an_error_event_mid_stream_is_the_providers_error() {
        let cut = EVENTS.find("event: content_block_start").unwrap();
        let body = format!(
            "{}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}}}\n\n",
            &EVENTS[..cut]
        );
        let (result, _) = assemble(&body, &[]);
        assert!(matches!(result, Err(ModelError::Overloaded { .. })), "{result:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_split_of_the_stream_gives_the_same_reply(cuts in proptest::collection::vec(0usize..10_000, 0..40)) {
            let (streamed, deltas) = assemble(EVENTS, &cuts);
            let streamed = streamed.unwrap();
            prop_assert_eq!(&streamed, &parse_response(WHOLE.as_bytes()).unwrap());
            let arguments: String = deltas.iter().filter_map(|d| match d {
                ModelDelta::ToolArguments { json, .. } => Some(json.as_str()),
                _ => None,
            }).collect();
            let ContentBlock::ToolUse(call) = &streamed.message.content[2] else { panic!("not a call") };
            prop_assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), call.args.clone());
        }
    }
}
