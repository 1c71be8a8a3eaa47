//! The OpenAI Responses API provider (`openai-responses:MODEL`), against a mock server. Bodies are
//! written from the API reference (platform.openai.com/docs/api-reference/responses: `input`
//! items `message` / `function_call` / `function_call_output` / `reasoning`, `store`, `include:
//! ["reasoning.encrypted_content"]`, `tools` of type `function`, `text.format`, the `Response`
//! object with `output`, `status`, `incomplete_details` and `usage.input_tokens_details`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use trellis_agent::providers::openai::OpenAiConfig;
use trellis_agent::providers::responses::parse_response;
use trellis_agent::providers::{ResponsesModel, from_model_string_with_env};
use trellis_middleware::runtime::model::{ModelError, ReasoningEffort, StopReason, ToolChoice};
use trellis_middleware::{
    Agent, ChatModel, FnTool, Message, ModelRequest, RunInput, SystemBlock, ToolOutput,
};
use wiremock::ResponseTemplate;

use crate::providers::common::{assert_json_eq, body_json, read_file_tool, server_answering};
use crate::providers::stop_reasons::server_answering_in_turn;

fn model_at(uri: &str) -> ResponsesModel {
    ResponsesModel::new(OpenAiConfig::openai("gpt-5", "sk-test").with_base_url(format!("{uri}/v1"))).unwrap()
}

fn reply(status: &str, output: Value) -> Value {
    json!({
        "id": "resp_1", "object": "response", "model": "gpt-5-2025-08-07", "status": status,
        "output": output,
        "usage": {"input_tokens": 2006, "input_tokens_details": {"cached_tokens": 1920},
                  "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 256}}
    })
}

fn reasoning_and_call() -> Value {
    reply(
        "completed",
        json!([
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look at the file."}],
             "encrypted_content": "gAAAAB-opaque"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file",
             "arguments": "{\"path\":\"/a.txt\"}", "status": "completed"}
        ]),
    )
}

#[test]
fn a_response_becomes_reasoning_calls_and_usage() {
    let response = parse_response(&serde_json::to_vec(&reasoning_and_call()).unwrap()).unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.usage.input_tokens, 86);
    assert_eq!(response.usage.cache_read_tokens, 1920);
    assert_eq!(response.usage.output_tokens, 300);
    let calls: Vec<_> = response.message.calls().collect();
    assert_eq!(calls[0].id, "call_1");
    assert_eq!(calls[0].args, json!({"path": "/a.txt"}));

    let text = reply(
        "completed",
        json!([{"type": "message", "id": "msg_1", "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello.", "annotations": []}]}]),
    );
    let response = parse_response(&serde_json::to_vec(&text).unwrap()).unwrap();
    assert_eq!(response.message.text_content(), "Hello.");
    assert_eq!(response.stop_reason, StopReason::EndTurn);

    let mut cut = reasoning_and_call();
    cut["status"] = json!("incomplete");
    cut["incomplete_details"] = json!({"reason": "max_output_tokens"});
    let response = parse_response(&serde_json::to_vec(&cut).unwrap()).unwrap();
    assert_eq!(
        response.stop_reason,
        StopReason::MaxTokens,
        "a cut call is not a tool-use stop"
    );

    let refusal = reply(
        "completed",
        json!([{"type": "message", "content": [{"type": "refusal", "refusal": "I can't help."}]}]),
    );
    let response = parse_response(&serde_json::to_vec(&refusal).unwrap()).unwrap();
    assert_eq!(response.stop_reason, StopReason::Refusal);
    assert!(parse_response(b"{\"output\": 3}").is_err());
    assert!(parse_response(b"not json").is_err());
}

#[test]
fn the_request_body_is_stateless_input_items() {
    let request = ModelRequest {
        system: vec![SystemBlock::new("Be brief.")],
        messages: vec![Message::human("Read /a.txt")].into(),
        tools: vec![read_file_tool()],
        tool_choice: Some(ToolChoice::Auto),
        max_output_tokens: Some(1000),
        reasoning_effort: Some(ReasoningEffort::Low),
        ..ModelRequest::default()
    };
    let body = model_at("http://localhost:1").request_body(&request).unwrap();
    assert_json_eq(
        &body,
        &json!({
            "model": "gpt-5",
            "instructions": "Be brief.",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "Read /a.txt"}]}],
            "tools": [{"type": "function", "name": "read_file", "description": "Read a file.",
                       "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
                       "strict": false}],
            "tool_choice": "auto",
            "max_output_tokens": 1000,
            "reasoning": {"effort": "low"},
            "store": false,
            "include": ["reasoning.encrypted_content"]
        }),
    );
    let mut stop = request.clone();
    stop.stop_sequences = vec!["END".into()];
    let err = model_at("http://localhost:1").request_body(&stop).unwrap_err();
    assert!(matches!(&err, ModelError::BadRequest { message, .. } if message.contains("stop_sequences")));
}

#[tokio::test]
async fn reasoning_items_and_calls_go_back_on_the_next_turn_through_the_loop() {
    let server = server_answering_in_turn(
        "/v1/responses",
        vec![
            reasoning_and_call(),
            reply(
                "completed",
                json!([{"type": "message", "content": [{"type": "output_text", "text": "It says hi."}]}]),
            ),
        ],
    )
    .await;
    let tool = FnTool::new(
        "read_file",
        "Read a file.",
        read_file_tool().parameters.clone(),
        |_| async { Ok(ToolOutput::text("hi")) },
    );
    let agent = Agent::builder(Arc::new(model_at(&server.uri())))
        .tool(tool)
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("Read /a.txt")).await.unwrap();
    assert_eq!(out.final_text().as_deref(), Some("It says hi."));
    let requests = server.received_requests().await.unwrap();
    let second = body_json(&requests[1]);
    assert_json_eq(
        &second["input"],
        &json!([
            {"role": "user", "content": [{"type": "input_text", "text": "Read /a.txt"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look at the file."}],
             "encrypted_content": "gAAAAB-opaque"},
            {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"/a.txt\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "hi"}
        ]),
    );
    assert!(second.get("previous_response_id").is_none());
}

#[tokio::test]
async fn errors_are_typed_and_keep_the_request_id() {
    let server = server_answering(
        "/v1/responses",
        ResponseTemplate::new(429)
            .set_body_string(
                json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}})
                    .to_string(),
            )
            .insert_header("content-type", "application/json")
            .insert_header("x-request-id", "req_resp_9")
            .insert_header("retry-after", "2"),
    )
    .await;
    let err = model_at(&server.uri())
        .invoke(ModelRequest::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::RateLimited { .. }), "{err:?}");
    assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(2)));
    assert_eq!(err.request_id(), Some("req_resp_9"));
}

#[test]
fn the_model_string_names_the_responses_provider() {
    let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk".to_owned());
    let model = from_model_string_with_env("openai-responses:gpt-5", env).unwrap();
    assert_eq!(model.id(), "gpt-5");
    assert!(format!("{model:?}").contains("ResponsesModel"));
    assert!(from_model_string_with_env("openai-responses:gpt-5", |_| None).is_err());
}
