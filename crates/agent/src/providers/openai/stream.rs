//! The Chat Completions event stream (`"stream": true`, with `stream_options.include_usage`),
//! assembled into the same JSON a non-streaming call returns, so
//! [`parse_response`](super::parse_response) reads both.
//!
//! Each event's data is a `chat.completion.chunk` (<https://platform.openai.com/docs/api-reference/chat-streaming>):
//! `choices[0].delta` carries `content`, `reasoning_content` (or `reasoning`, as ollama and vLLM
//! name it), `refusal`, and `tool_calls` fragments keyed by their `index` (the first fragment of a
//! call has its `id` and `function.name`, later ones more of `function.arguments`);
//! `choices[0].finish_reason` ends the choice; a last chunk with empty `choices` carries `usage`;
//! `[DONE]` ends the stream. OpenAI-compatible servers may omit usage, ids or `[DONE]`: a stream
//! that ends after a `finish_reason` is complete. A chunk holding `error` is the provider's error.
//!
//! Delta indices are block positions in the order the parts first appear (reasoning, text, then
//! each tool call, which is the order the reply's blocks end up in).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::stream::{DeltaSink, ModelDelta};

use super::response::parse_error;
use crate::providers::streamed::{Assemble, bad_event};

/// One tool call being assembled.
#[derive(Debug, Default)]
struct Call {
    id: Option<String>,
    name: String,
    arguments: String,
    block: usize,
}

/// A reply being assembled from its chunks.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    model: Option<Value>,
    reasoning: String,
    text: String,
    refusal: String,
    calls: BTreeMap<u64, Call>,
    usage: Option<Value>,
    finish_reason: Option<Value>,
    /// Block positions given so far: reasoning, text, refusal.
    reasoning_block: Option<usize>,
    text_block: Option<usize>,
    refusal_block: Option<usize>,
    blocks: usize,
    done: bool,
}

impl Assemble for Assembler {
    fn take(&mut self, _name: Option<&str>, data: &str, on_delta: DeltaSink<'_>) -> Result<(), ModelError> {
        self.chunk(data, on_delta)
    }

    /// True once `[DONE]` arrived.
    fn is_done(&self) -> bool {
        self.done
    }

    /// True when the stream may end here: `[DONE]`, or a finish reason from a server that sends no
    /// `[DONE]`.
    fn is_complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    fn finish(self) -> Vec<u8> {
        Assembler::finish(self)
    }
}

impl Assembler {
    fn block(slot: &mut Option<usize>, blocks: &mut usize) -> usize {
        *slot.get_or_insert_with(|| {
            *blocks += 1;
            *blocks - 1
        })
    }

    /// Take one event's data.
    pub(crate) fn chunk(&mut self, data: &str, on_delta: DeltaSink<'_>) -> Result<(), ModelError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|e| bad_event("Chat Completions", "chunk", &e))?;
        if chunk.get("error").is_some() {
            return Err(parse_error(200, None, data.as_bytes()));
        }
        if let Some(model) = chunk.get("model").filter(|m| m.is_string()) {
            self.model = Some(model.clone());
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            self.finish_reason = Some(reason.clone());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(());
        };
        let piece = |key: &str| delta.get(key).and_then(Value::as_str).filter(|s| !s.is_empty());
        if let Some(text) = piece("reasoning_content").or_else(|| piece("reasoning")) {
            let index = Self::block(&mut self.reasoning_block, &mut self.blocks);
            self.reasoning.push_str(text);
            on_delta(ModelDelta::Reasoning {
                index,
                text: text.to_owned(),
            });
        }
        if let Some(text) = piece("content") {
            let index = Self::block(&mut self.text_block, &mut self.blocks);
            self.text.push_str(text);
            on_delta(ModelDelta::Text {
                index,
                text: text.to_owned(),
            });
        }
        if let Some(text) = piece("refusal") {
            let index = Self::block(&mut self.refusal_block, &mut self.blocks);
            self.refusal.push_str(text);
            on_delta(ModelDelta::Text {
                index,
                text: text.to_owned(),
            });
        }
        for fragment in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = fragment.get("index").and_then(Value::as_u64).unwrap_or(0);
            let function = fragment.get("function");
            let name = function
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let id = fragment
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            let new = !self.calls.contains_key(&key);
            if new {
                let block = self.blocks;
                self.blocks += 1;
                self.calls.insert(
                    key,
                    Call {
                        block,
                        ..Call::default()
                    },
                );
            }
            let Some(call) = self.calls.get_mut(&key) else {
                continue;
            };
            if let Some(id) = id {
                call.id = Some(id.to_owned());
            }
            if !name.is_empty() {
                call.name.push_str(name);
            }
            if new {
                on_delta(ModelDelta::ToolCall {
                    index: call.block,
                    id: call.id.clone().unwrap_or_default(),
                    name: call.name.clone(),
                });
            }
            if let Some(args) = function.and_then(|f| f.get("arguments")).and_then(Value::as_str)
                && !args.is_empty()
            {
                call.arguments.push_str(args);
                on_delta(ModelDelta::ToolArguments {
                    index: call.block,
                    json: args.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// The whole reply as the non-streaming JSON body.
    pub(crate) fn finish(self) -> Vec<u8> {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert(
            "content".into(),
            if self.text.is_empty() {
                Value::Null
            } else {
                Value::String(self.text)
            },
        );
        if !self.reasoning.is_empty() {
            message.insert("reasoning_content".into(), Value::String(self.reasoning));
        }
        if !self.refusal.is_empty() {
            message.insert("refusal".into(), Value::String(self.refusal));
        }
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .into_values()
                .map(|c| {
                    json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let mut body = json!({
            "choices": [{"index": 0, "message": Value::Object(message), "finish_reason": self.finish_reason}],
        });
        if let Value::Object(map) = &mut body {
            if let Some(model) = self.model {
                map.insert("model".into(), model);
            }
            if let Some(usage) = self.usage {
                map.insert("usage".into(), usage);
            }
        }
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {

    use proptest::prelude::*;
    use trellis_middleware::ModelResponse;

    use super::*;
    use crate::providers::openai::parse_response;
    use crate::providers::sse::assemble_split;

    /// Reasoning (as vLLM and ollama send it), text and two tool calls, with cached-token usage, as
    /// the Chat Completions API documents its non-streaming body.
    const WHOLE: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4.1",
      "choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant",
        "reasoning_content":"Two files to read.","content":"Reading both. Ünïcode ✓",
        "tool_calls":[{"id":"call_a","type":"function","function":{"name":"read_file","arguments":"{\"file_path\": \"/a.md\"}"}},
                      {"id":"call_b","type":"function","function":{"name":"read_file","arguments":"{\"file_path\": \"/b.md\"}"}}]}}],
      "usage":{"prompt_tokens":200,"completion_tokens":30,"prompt_tokens_details":{"cached_tokens":128}}}"#;

    fn chunk(delta: &str, finish: &str) -> String {
        format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4.1\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    }

    /// The same reply as the documented chunk stream.
    fn events() -> String {
        [
            chunk(r#"{"role":"assistant","content":""}"#, "null"),
            chunk(r#"{"reasoning_content":"Two files "}"#, "null"),
            chunk(r#"{"reasoning_content":"to read."}"#, "null"),
            chunk(r#"{"content":"Reading both. "}"#, "null"),
            chunk(r#"{"content":"Ünïcode ✓"}"#, "null"),
            chunk(
                r#"{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]}"#,
                "null",
            ),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"file_path\": "}}]}"#, "null"),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"\"/a.md\"}"}}]}"#, "null"),
            chunk(
                r#"{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"read_file","arguments":"{\"file_path\": \"/b.md\"}"}}]}"#,
                "null",
            ),
            chunk("{}", "\"tool_calls\""),
            "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4.1\",\"choices\":[],\"usage\":{\"prompt_tokens\":200,\"completion_tokens\":30,\"prompt_tokens_details\":{\"cached_tokens\":128}}}\n\n".to_owned(),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat()
    }

    fn assemble(body: &str, cuts: &[usize]) -> (Result<ModelResponse, ModelError>, Vec<ModelDelta>, bool) {
        let (result, deltas) = assemble_split::<Assembler>(body, cuts);
        let mut complete = false;
        let result = result.and_then(|(body, done)| {
            complete = done;
            parse_response(&body)
        });
        (result, deltas, complete)
    }

    #[test]
    fn the_stream_assembles_to_the_unstreamed_reply() {
        let (streamed, deltas, complete) = assemble(&events(), &[]);
        assert!(complete);
        assert_eq!(streamed.unwrap(), parse_response(WHOLE.as_bytes()).unwrap());
        assert_eq!(
            deltas[..2],
            [
                ModelDelta::Reasoning {
                    index: 0,
                    text: "Two files ".into()
                },
                ModelDelta::Reasoning {
                    index: 0,
                    text: "to read.".into()
                },
            ]
        );
        assert!(deltas.contains(&ModelDelta::ToolCall {
            index: 3,
            id: "call_b".into(),
            name: "read_file".into()
        }));
    }

    #[test]
    fn a_server_without_usage_ids_or_done_still_completes() {
        let body = [
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"ls\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
        ]
        .concat();
        let (streamed, _, complete) = assemble(&body, &[]);
        assert!(complete, "a finish reason without [DONE] is the end");
        let streamed = streamed.unwrap();
        assert_eq!(
            streamed.message.calls().next().map(|c| c.id.as_str()),
            Some("call_0")
        );
        assert_eq!(streamed.usage.input_tokens, 0);
    }

    #[test]
    fn an_error_chunk_is_the_providers_error() {
        let body = "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}\n\n";
        let (result, _, _) = assemble(body, &[]);
        assert!(result.is_err(), "{result:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_split_of_the_stream_gives_the_same_reply(cuts in proptest::collection::vec(0usize..10_000, 0..40)) {
            let (streamed, _, complete) = assemble(&events(), &cuts);
            prop_assert!(complete);
            prop_assert_eq!(streamed.unwrap(), parse_response(WHOLE.as_bytes()).unwrap());
        }
    }
}
