//! The response and error parsers take untrusted bytes: they must never panic, whatever arrives.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use trellis_agent::providers::{anthropic, bedrock, openai, responses};

/// Arbitrary JSON values, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        prop_oneof![
            Just("text".to_owned()),
            Just("tool_use".to_owned()),
            Just("thinking".to_owned()),
            Just("{\"a\":".to_owned()),
            ".{0,12}"
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("type".to_owned()),
                        Just("content".to_owned()),
                        Just("choices".to_owned()),
                        Just("message".to_owned()),
                        Just("tool_calls".to_owned()),
                        Just("function".to_owned()),
                        Just("arguments".to_owned()),
                        Just("usage".to_owned()),
                        Just("error".to_owned()),
                        "[a-z_]{1,8}"
                    ],
                    inner
                ),
                0..5
            )
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

/// Valid responses with one part replaced by an arbitrary value.
fn mutated_response() -> impl Strategy<Value = Value> {
    let anthropic = json!({
        "model": "m",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "t", "name": "ls", "input": {}}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3}
    });
    let openai = json!({
        "model": "m",
        "choices": [{"message": {"content": "hi", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        ]}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 9}}
    });
    let responses = json!({
        "model": "m", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "s"}], "encrypted_content": "e"},
            {"type": "message", "content": [{"type": "output_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"}
        ],
        "usage": {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 9}, "output_tokens": 1}
    });
    (
        prop_oneof![Just(anthropic), Just(openai), Just(responses)],
        prop_oneof![
            Just("/content"),
            Just("/content/0"),
            Just("/content/1/input"),
            Just("/usage"),
            Just("/usage/input_tokens"),
            Just("/choices/0/message"),
            Just("/choices/0/message/tool_calls/0/function"),
            Just("/choices/0/message/tool_calls/0/function/arguments"),
            Just("/usage/prompt_tokens_details/cached_tokens"),
            Just("/stop_reason"),
            Just("/output"),
            Just("/output/0/summary"),
            Just("/output/1/content/0"),
            Just("/output/2/arguments"),
            Just("/incomplete_details"),
            Just("/usage/input_tokens_details"),
        ],
        json_value(),
    )
        .prop_map(|(mut base, pointer, value)| {
            if let Some(slot) = base.pointer_mut(pointer) {
                *slot = value;
            }
            base
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsers_never_panic_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256), status in any::<u16>()) {
        let _ = anthropic::parse_response(&bytes);
        let _ = openai::parse_response(&bytes);
        let _ = responses::parse_response(&bytes);
        let _ = anthropic::parse_error(status, Some(Duration::from_secs(1)), &bytes);
        let _ = bedrock::parse_error(status, None, &bytes);
        let _ = openai::parse_error(status, None, &bytes);
    }

    #[test]
    fn parsers_never_panic_on_json(value in json_value(), status in any::<u16>()) {
        let bytes = serde_json::to_vec(&value).unwrap();
        let _ = anthropic::parse_response(&bytes);
        let _ = openai::parse_response(&bytes);
        let _ = responses::parse_response(&bytes);
        let _ = anthropic::parse_error(status, None, &bytes);
        let _ = bedrock::parse_error(status, None, &bytes);
        let _ = openai::parse_error(status, None, &bytes);
    }

    #[test]
    fn parsers_never_panic_on_near_valid_responses(value in mutated_response()) {
        let bytes = serde_json::to_vec(&value).unwrap();
        let _ = anthropic::parse_response(&bytes);
        let _ = openai::parse_response(&bytes);
        let _ = responses::parse_response(&bytes);
    }
}
