//! The Responses API event stream (`"stream": true`), assembled into the `Response` object a
//! non-streaming call returns, so [`parse_response`](super::parse_response) reads both.
//!
//! Events (platform.openai.com/docs/api-reference/responses-streaming): `response.created` /
//! `response.in_progress` (the response so far), `response.output_item.added` / `.done` (one
//! output item: `message`, `function_call`, `reasoning`, …, by `output_index`),
//! `response.content_part.added`, `response.output_text.delta`, `response.refusal.delta`,
//! `response.function_call_arguments.delta`, `response.reasoning_summary_text.delta`, and one
//! terminal event holding the whole response: `response.completed`, `response.incomplete` or
//! `response.failed`. `error` (`code`, `message`) ends the stream with the provider's error.
//! Other events (`*.done` of parts, annotations, keep-alives) are ignored, as the SDKs do.
//!
//! Deltas are numbered as [`parse_response`](super::parse_response) numbers the blocks: one per
//! `output_text` or `refusal` part of a message, one per function call, one per reasoning item
//! (its summaries joined by a blank line), other items none. The terminal event's response is the
//! reply; when its `output` is empty, the items of `response.output_item.done` are used (a proxy
//! that trims the final event still gives the whole reply).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::stream::{DeltaSink, ModelDelta};

use crate::providers::openai::parse_error;
use crate::providers::streamed::{Assemble, bad_event};

/// A reply being assembled from its events.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    /// The response of the terminal event (or of `response.created` until then).
    response: Option<Value>,
    /// Items of `response.output_item.done`, by output index.
    items: BTreeMap<u64, Value>,
    /// Block index of each streamed part: (output index, content index) → block.
    parts: BTreeMap<(u64, u64), usize>,
    /// Block index of each function call or reasoning item, by output index, and the summary
    /// index last seen for a reasoning item.
    whole_items: BTreeMap<u64, (usize, Option<u64>)>,
    /// Blocks numbered so far.
    blocks: usize,
    done: bool,
}

impl Assemble for Assembler {
    fn take(&mut self, name: Option<&str>, data: &str, on_delta: DeltaSink<'_>) -> Result<(), ModelError> {
        let event: Value = serde_json::from_str(data)
            .map_err(|e| bad_event("Responses API", name.unwrap_or("message"), &e))?;
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .or(name)
            .unwrap_or("")
            .to_owned();
        let number = |key: &str| event.get(key).and_then(Value::as_u64).unwrap_or(0);
        let text = |key: &str| event.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
        match kind.as_str() {
            "response.created" | "response.in_progress" => {
                self.response = event.get("response").cloned();
            }
            "response.completed" | "response.incomplete" => {
                self.response = event.get("response").cloned();
                self.done = true;
            }
            "response.failed" => {
                let error = event
                    .get("response")
                    .and_then(|r| r.get("error"))
                    .cloned()
                    .unwrap_or(Value::Null);
                return Err(stream_error(&error));
            }
            "error" => return Err(stream_error(&event)),
            "response.output_item.added" => {
                let item = event.get("item").cloned().unwrap_or(Value::Null);
                let output = number("output_index");
                match item.get("type").and_then(Value::as_str) {
                    Some("function_call") => {
                        let index = self.next_block();
                        self.whole_items.insert(output, (index, None));
                        let str_of = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
                        let id = Some(str_of("call_id"))
                            .filter(|id| !id.is_empty())
                            .unwrap_or(str_of("id"));
                        on_delta(ModelDelta::ToolCall {
                            index,
                            id: id.to_owned(),
                            name: str_of("name").to_owned(),
                        });
                    }
                    Some("reasoning") => {
                        let index = self.next_block();
                        self.whole_items.insert(output, (index, None));
                    }
                    _ => {}
                }
            }
            "response.content_part.added" => {
                let part = event
                    .get("part")
                    .and_then(|p| p.get("type"))
                    .and_then(Value::as_str);
                if matches!(part, Some("output_text" | "refusal")) {
                    self.part(number("output_index"), number("content_index"));
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let index = self.part(number("output_index"), number("content_index"));
                on_delta(ModelDelta::Text {
                    index,
                    text: text("delta"),
                });
            }
            "response.function_call_arguments.delta" => {
                if let Some((index, _)) = self.whole_items.get(&number("output_index")) {
                    on_delta(ModelDelta::ToolArguments {
                        index: *index,
                        json: text("delta"),
                    });
                }
            }
            "response.reasoning_summary_text.delta" => {
                let output = number("output_index");
                let summary = number("summary_index");
                let next = self.blocks;
                let (index, last) = self.whole_items.entry(output).or_insert((next, None));
                let index = *index;
                if index == next {
                    self.blocks += 1;
                }
                let mut piece = text("delta");
                if last.is_some_and(|last| last != summary) {
                    piece.insert_str(0, "\n\n");
                }
                *last = Some(summary);
                on_delta(ModelDelta::Reasoning { index, text: piece });
            }
            "response.output_item.done" => {
                if let Some(item) = event.get("item") {
                    self.items.insert(number("output_index"), item.clone());
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// True once a terminal event (`response.completed`, `response.incomplete`) arrived.
    fn is_done(&self) -> bool {
        self.done
    }

    fn finish(self) -> Vec<u8> {
        let mut response = self.response.unwrap_or_else(|| json!({}));
        let empty = response
            .get("output")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if empty
            && !self.items.is_empty()
            && let Value::Object(map) = &mut response
        {
            map.insert("output".into(), Value::Array(self.items.into_values().collect()));
        }
        serde_json::to_vec(&response).unwrap_or_default()
    }
}

impl Assembler {
    fn next_block(&mut self) -> usize {
        self.blocks += 1;
        self.blocks - 1
    }

    /// The block of a message part, numbered when first seen.
    fn part(&mut self, output: u64, content: u64) -> usize {
        if let Some(index) = self.parts.get(&(output, content)) {
            return *index;
        }
        let index = self.next_block();
        self.parts.insert((output, content), index);
        index
    }
}

/// The error of an `error` event or a failed response (`code`, `message`): read as an error body
/// of the status the code stands for, so a rate limit or a server error mid-stream is retried.
fn stream_error(error: &Value) -> ModelError {
    let code = error.get("code").and_then(Value::as_str).unwrap_or("");
    let status = match code {
        "rate_limit_exceeded" => 429,
        "server_error" | "vector_store_timeout" => 500,
        "" => 200,
        _ => 400,
    };
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the Responses API stream failed");
    let body = json!({"error": {"message": message, "code": code}});
    parse_error(status, None, body.to_string().as_bytes())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {

    use proptest::prelude::*;

    use super::*;
    use crate::providers::responses::parse_response;
    use crate::providers::sse::assemble_split;
    use trellis_middleware::ModelResponse;
    use trellis_middleware::runtime::message::ContentBlock;
    use trellis_middleware::runtime::model::StopReason;

    /// The reply's output items as the `Response` object documents them: a reasoning item with
    /// two summaries, a message with multi-byte text, and a function call.
    fn output() -> Value {
        json!([
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "enc-abc",
             "summary": [{"type": "summary_text", "text": "Check the file."},
                         {"type": "summary_text", "text": "Then answer."}]},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Reading it. Ünïcode ✓", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file",
             "arguments": "{\"file_path\":\"/notes.md\"}", "status": "completed"}
        ])
    }

    fn whole(output: Value) -> Value {
        json!({"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5",
               "output": output,
               "usage": {"input_tokens": 300, "input_tokens_details": {"cached_tokens": 256},
                         "output_tokens": 40}})
    }

    fn event(kind: &str, mut data: Value) -> String {
        data["type"] = json!(kind);
        format!("event: {kind}\ndata: {data}\n\n")
    }

    /// The documented event sequence of that reply; `final_output` is the terminal event's.
    fn events(final_output: Value) -> String {
        let items = output();
        [
            event("response.created", json!({"response": {"id": "resp_1", "status": "in_progress", "output": []}})),
            event("response.output_item.added", json!({"output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": []}})),
            event("response.reasoning_summary_part.added", json!({"output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}})),
            event("response.reasoning_summary_text.delta", json!({"output_index": 0, "summary_index": 0, "delta": "Check "})),
            event("response.reasoning_summary_text.delta", json!({"output_index": 0, "summary_index": 0, "delta": "the file."})),
            event("response.reasoning_summary_text.delta", json!({"output_index": 0, "summary_index": 1, "delta": "Then answer."})),
            event("response.output_item.done", json!({"output_index": 0, "item": items[0]})),
            event("response.output_item.added", json!({"output_index": 1, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}})),
            event("response.content_part.added", json!({"output_index": 1, "content_index": 0, "part": {"type": "output_text", "text": ""}})),
            event("response.output_text.delta", json!({"output_index": 1, "content_index": 0, "delta": "Reading it. "})),
            event("response.output_text.delta", json!({"output_index": 1, "content_index": 0, "delta": "Ünïcode ✓"})),
            event("response.output_text.done", json!({"output_index": 1, "content_index": 0, "text": "Reading it. Ünïcode ✓"})),
            event("response.output_item.done", json!({"output_index": 1, "item": items[1]})),
            event("response.output_item.added", json!({"output_index": 2, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": ""}})),
            event("response.function_call_arguments.delta", json!({"output_index": 2, "delta": "{\"file_path\":"})),
            event("response.function_call_arguments.delta", json!({"output_index": 2, "delta": "\"/notes.md\"}"})),
            event("response.output_item.done", json!({"output_index": 2, "item": items[2]})),
            event("response.completed", json!({"response": whole(final_output)})),
        ]
        .concat()
    }

    fn assemble(body: &str, cuts: &[usize]) -> (Result<ModelResponse, ModelError>, Vec<ModelDelta>) {
        let (result, deltas) = assemble_split::<Assembler>(body, cuts);
        let result = result.and_then(|(body, complete)| {
            assert!(complete);
            parse_response(&body)
        });
        (result, deltas)
    }

    /// The deltas of one block, joined.
    fn joined(deltas: &[ModelDelta], block: usize) -> String {
        deltas
            .iter()
            .filter_map(|d| match d {
                ModelDelta::Text { index, text } | ModelDelta::Reasoning { index, text }
                    if *index == block =>
                {
                    Some(text.as_str())
                }
                ModelDelta::ToolArguments { index, json } if *index == block => Some(json.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_stream_assembles_to_the_unstreamed_reply_and_deltas_match_its_blocks() {
        let (streamed, deltas) = assemble(&events(output()), &[]);
        let streamed = streamed.unwrap();
        let unstreamed = parse_response(whole(output()).to_string().as_bytes()).unwrap();
        assert_eq!(streamed, unstreamed);
        assert_eq!(streamed.stop_reason, StopReason::ToolUse);
        assert_eq!(streamed.usage.cache_read_tokens, 256);
        let ContentBlock::Reasoning { text, .. } = &streamed.message.content[0] else {
            panic!("not reasoning")
        };
        assert_eq!(
            &joined(&deltas, 0),
            text,
            "summaries are joined as the parser joins them"
        );
        assert_eq!(joined(&deltas, 1), "Reading it. Ünïcode ✓");
        assert_eq!(joined(&deltas, 2), "{\"file_path\":\"/notes.md\"}");
        assert!(deltas.contains(&ModelDelta::ToolCall {
            index: 2,
            id: "call_1".into(),
            name: "read_file".into()
        }));
    }

    #[test]
    fn a_terminal_event_without_output_is_filled_from_the_items() {
        let (streamed, _) = assemble(&events(json!([])), &[]);
        let unstreamed = parse_response(whole(output()).to_string().as_bytes()).unwrap();
        assert_eq!(streamed.unwrap(), unstreamed);
    }

    #[test]
    fn error_events_and_failed_responses_are_typed() {
        let mut reply = Assembler::default();
        let ignore = |_: ModelDelta| {};
        let err = reply
            .take(
                Some("error"),
                r#"{"type":"error","code":"rate_limit_exceeded","message":"Slow down","param":null}"#,
                &ignore,
            )
            .unwrap_err();
        assert!(matches!(err, ModelError::RateLimited { .. }), "{err:?}");
        let err = reply
            .take(
                Some("response.failed"),
                r#"{"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"server_error","message":"Boom"}}}"#,
                &ignore,
            )
            .unwrap_err();
        assert!(err.is_transient() && err.message().contains("Boom"), "{err:?}");
        let err = reply
            .take(Some("response.output_text.delta"), "{not json", &ignore)
            .unwrap_err();
        assert!(matches!(err, ModelError::Other { .. }), "{err:?}");
    }

    #[test]
    fn an_incomplete_response_ends_the_stream_with_its_stop_reason() {
        let body = event(
            "response.incomplete",
            json!({"response": {"id": "r", "status": "incomplete", "output": [],
                                "incomplete_details": {"reason": "max_output_tokens"}}}),
        );
        let (streamed, _) = assemble(&body, &[]);
        assert_eq!(streamed.unwrap().stop_reason, StopReason::MaxTokens);
    }

    /// Events of every known type with arbitrary fields: never a panic, whatever arrives.
    fn any_event() -> impl Strategy<Value = (String, String)> {
        let kind = prop_oneof![
            Just("response.created"),
            Just("response.completed"),
            Just("response.output_item.added"),
            Just("response.output_item.done"),
            Just("response.content_part.added"),
            Just("response.output_text.delta"),
            Just("response.function_call_arguments.delta"),
            Just("response.reasoning_summary_text.delta"),
            Just("response.failed"),
            Just("error"),
        ];
        let field = prop_oneof![
            Just(json!(null)),
            Just(json!(0)),
            Just(json!(u64::MAX)),
            Just(json!("x")),
            Just(json!({"type": "function_call"})),
            Just(json!({"type": "reasoning"})),
            Just(json!({"type": "output_text"})),
            Just(json!({"output": "not a list"})),
        ];
        (kind, field.clone(), field.clone(), field).prop_map(|(kind, a, b, c)| {
            let data = json!({"type": kind, "output_index": a, "content_index": b, "summary_index": a,
                              "item": c, "part": b, "response": c, "delta": a, "code": b});
            (kind.to_owned(), data.to_string())
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn arbitrary_events_never_panic(events in proptest::collection::vec(any_event(), 0..24)) {
            let mut reply = Assembler::default();
            let ignore = |_: ModelDelta| {};
            for (name, data) in &events {
                if reply.take(Some(name), data, &ignore).is_err() {
                    break;
                }
            }
            let _ = parse_response(&reply.finish());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_split_of_the_stream_gives_the_same_reply_and_deltas(cuts in proptest::collection::vec(0usize..10_000, 0..40)) {
            let body = events(json!([]));
            let (whole_streamed, whole_deltas) = assemble(&body, &[]);
            let (streamed, deltas) = assemble(&body, &cuts);
            prop_assert_eq!(streamed.unwrap(), whole_streamed.unwrap());
            prop_assert_eq!(deltas, whole_deltas);
        }
    }
}
