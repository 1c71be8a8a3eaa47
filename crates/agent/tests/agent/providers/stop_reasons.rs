//! Stop reasons that change what the agent loop does, through each provider's wire format and the
//! real loop (issue 21, items 3 and 4).
//!
//! * Anthropic `stop_reason: "max_tokens"` with a half-written `tool_use` block ("Handling stop
//!   reasons", docs.anthropic.com/en/api/handling-stop-reasons: "if the response was cut off
//!   during tool use … retry the request with a higher max_tokens").
//! * OpenAI `finish_reason: "length"` with `tool_calls` (openai-python
//!   `types/chat/chat_completion.py`, `Choice.finish_reason`: "`length` if the maximum number of
//!   tokens specified in the request was reached").
//!
//! * Anthropic `stop_reason: "pause_turn"` (same page: "send the response back as-is in a
//!   subsequent request to let Claude continue its turn") and `"refusal"`.
//!
//! Before the fix, OpenAI's reply was reported as a tool-use stop and both loops ran the cut call;
//! a paused turn ended the run as `Other("pause_turn")` with half an answer, and a refusal could
//! not be told from an answer by the caller of a run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use trellis_agent::providers::anthropic::{AnthropicConfig, AnthropicModel};
use trellis_agent::providers::openai::{OpenAiConfig, OpenAiModel};
use trellis_middleware::runtime::model::StopReason;
use trellis_middleware::runtime::stream::ModelDelta;
use trellis_middleware::{Agent, AgentError, ChatModel, FnTool, ModelRequest, RunInput, ToolOutput};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::providers::common::body_json;

/// A server answering POSTs to `route` with `bodies`, one each, in order.
pub(crate) async fn server_answering_in_turn(route: &str, bodies: Vec<Value>) -> MockServer {
    let server = MockServer::start().await;
    for (priority, body) in bodies.into_iter().enumerate() {
        Mock::given(method("POST"))
            .and(path(route))
            .respond_with(ResponseTemplate::new(200).set_body_json(body))
            .up_to_n_times(1)
            .with_priority(u8::try_from(priority + 1).unwrap())
            .mount(&server)
            .await;
    }
    server
}

/// `write_file`, recording every argument object it runs with.
fn recording_write(ran: Arc<Mutex<Vec<Value>>>) -> FnTool {
    FnTool::new(
        "write_file",
        "Write a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}),
        move |args| {
            let ran = ran.clone();
            async move {
                ran.lock().unwrap().push(args);
                Ok(ToolOutput::text("written"))
            }
        },
    )
}

fn anthropic_reply(stop_reason: &str, content: Value) -> Value {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 4096}
    })
}

fn anthropic_at(uri: &str) -> Arc<dyn ChatModel> {
    let mut config = AnthropicConfig::new("claude-sonnet-4-5", "test-key").with_base_url(uri);
    config.stream = false;
    Arc::new(AnthropicModel::new(config).unwrap())
}

fn openai_reply(finish_reason: &str, tool_calls: Value) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
        "choices": [{"index": 0, "finish_reason": finish_reason,
            "message": {"role": "assistant", "content": null, "tool_calls": tool_calls}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 4096}
    })
}

fn openai_at(uri: &str) -> Arc<dyn ChatModel> {
    let mut config = OpenAiConfig::openai("gpt-4.1", "sk-test").with_base_url(format!("{uri}/v1"));
    config.stream = false;
    Arc::new(OpenAiModel::new(config).unwrap())
}

/// Run "write notes" on `model`; the first reply was cut mid-call, the second is complete.
async fn run_truncated_then_complete(model: Arc<dyn ChatModel>, server: &MockServer) -> Vec<Value> {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(model)
        .tool(recording_write(ran.clone()))
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("write notes")).await.unwrap();
    assert_eq!(out.final_text().as_deref(), Some("done"));
    assert_eq!(out.model_calls, 3);
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 3);
    let ran = ran.lock().unwrap().clone();
    assert_eq!(
        ran,
        [json!({"path": "/notes.md", "content": "all"})],
        "only the whole call ran"
    );
    requests.iter().map(body_json).collect()
}

#[tokio::test]
async fn anthropic_max_tokens_with_a_half_written_tool_use_is_not_run() {
    let server = server_answering_in_turn(
        "/v1/messages",
        vec![
            // The non-streamed body holds whatever input was complete; here the partial text.
            anthropic_reply(
                "max_tokens",
                json!([{"type": "tool_use", "id": "toolu_01", "name": "write_file",
                        "input": "{\"path\": \"/notes.md\", \"content\": \"fir"}]),
            ),
            anthropic_reply(
                "tool_use",
                json!([{"type": "tool_use", "id": "toolu_02", "name": "write_file",
                        "input": {"path": "/notes.md", "content": "all"}}]),
            ),
            anthropic_reply("end_turn", json!([{"type": "text", "text": "done"}])),
        ],
    )
    .await;
    let bodies = run_truncated_then_complete(anthropic_at(&server.uri()), &server).await;
    // The retry shows the cut reply without its call, then the notice as user text.
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(messages[1]["role"], "assistant");
    let sent = messages[1].to_string();
    assert!(!sent.contains("tool_use"), "no dangling tool_use: {sent}");
    assert!(sent.contains("cut off at the output token limit"), "{sent}");
    assert_eq!(messages[2]["role"], "user");
    assert!(messages[2].to_string().contains("output token limit"));
}

#[tokio::test]
async fn openai_finish_reason_length_with_tool_calls_is_not_run() {
    let server = server_answering_in_turn(
        "/v1/chat/completions",
        vec![
            openai_reply(
                "length",
                json!([{"id": "call_1", "type": "function",
                        "function": {"name": "write_file", "arguments": "{\"path\": \"/notes.md\", \"con"}}]),
            ),
            openai_reply(
                "tool_calls",
                json!([{"id": "call_2", "type": "function",
                        "function": {"name": "write_file", "arguments": "{\"path\": \"/notes.md\", \"content\": \"all\"}"}}]),
            ),
            json!({"id": "chatcmpl-3", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "done"}}]}),
        ],
    )
    .await;
    let bodies = run_truncated_then_complete(openai_at(&server.uri()), &server).await;
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert!(messages[1].get("tool_calls").is_none(), "{:#?}", messages[1]);
    assert_eq!(messages[2]["role"], "user");
    assert!(messages[2].to_string().contains("output token limit"));
}

#[tokio::test]
async fn openai_length_is_a_max_tokens_stop_even_with_tool_calls() {
    let body = openai_reply(
        "length",
        json!([{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{\"pa"}}]),
    );
    let response =
        trellis_agent::providers::openai::parse_response(&serde_json::to_vec(&body).unwrap()).unwrap();
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
    // ollama answers `stop` with tool calls: still a tool-use stop.
    let mut ollama = body.clone();
    ollama["choices"][0]["finish_reason"] = json!("stop");
    let response =
        trellis_agent::providers::openai::parse_response(&serde_json::to_vec(&ollama).unwrap()).unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[tokio::test]
async fn a_run_whose_replies_stay_cut_off_fails_typed_through_a_provider() {
    let cut = anthropic_reply(
        "max_tokens",
        json!([{"type": "tool_use", "id": "toolu_01", "name": "write_file", "input": "{\"pa"}]),
    );
    let server = server_answering_in_turn("/v1/messages", vec![cut.clone(), cut.clone(), cut]).await;
    let ran = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(anthropic_at(&server.uri()))
        .tool(recording_write(ran.clone()))
        .build()
        .unwrap();
    let err = agent.run(RunInput::human("write")).await.unwrap_err();
    assert!(
        matches!(&err, AgentError::TruncatedToolCall { attempts: 3, tools, .. } if tools == &["write_file"]),
        "{err:?}"
    );
    assert!(ran.lock().unwrap().is_empty());
}

/// A paused turn: a server tool call under way, as the API sends it (blocks Trellis does not model).
fn paused_part(n: u32) -> Value {
    anthropic_reply(
        "pause_turn",
        json!([
            {"type": "text", "text": format!("part {n}")},
            {"type": "server_tool_use", "id": format!("srvtoolu_{n}"), "name": "web_search",
             "input": {"query": "rust"}}
        ]),
    )
}

#[tokio::test]
async fn anthropic_pause_turn_sends_the_content_back_and_returns_the_whole_turn() {
    let server = server_answering_in_turn(
        "/v1/messages",
        vec![
            paused_part(1),
            anthropic_reply("end_turn", json!([{"type": "text", "text": "found it"}])),
        ],
    )
    .await;
    let request = ModelRequest {
        messages: vec![trellis_middleware::Message::human("search")].into(),
        ..ModelRequest::default()
    };
    let response = anthropic_at(&server.uri()).invoke(request).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.message.text_content(), "part 1found it");
    assert_eq!(response.usage.output_tokens, 2 * 4096, "usage of both parts");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    let second = body_json(&requests[1]);
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    // The paused content goes back unchanged, the server tool block included.
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": paused_part(1)["content"]})
    );
}

#[tokio::test]
async fn anthropic_pause_turn_continues_at_most_three_times() {
    let parts = (1..=5).map(paused_part).collect();
    let server = server_answering_in_turn("/v1/messages", parts).await;
    let response = anthropic_at(&server.uri())
        .invoke(ModelRequest {
            messages: vec![trellis_middleware::Message::human("search")].into(),
            ..ModelRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(response.stop_reason, StopReason::Other("pause_turn".into()));
    assert_eq!(response.message.text_content(), "part 1part 2part 3part 4");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 4, "one call and three continuations");
    let last = body_json(&requests[3]);
    let messages = last["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "one assistant message holding every part");
    assert_eq!(messages[1]["content"].as_array().unwrap().len(), 6);
}

/// An event stream of one text block `text` ending with `stop_reason`.
fn anthropic_text_events(text: &str, stop_reason: &str) -> String {
    let text = Value::String(text.to_owned());
    [
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}"#.to_owned(),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
        format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{text}}}}}"#),
        r#"{"type":"content_block_stop","index":0}"#.to_owned(),
        format!(r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop_reason}"}},"usage":{{"output_tokens":3}}}}"#),
        r#"{"type":"message_stop"}"#.to_owned(),
    ]
    .iter()
    .map(|data| {
        let name = serde_json::from_str::<Value>(data).unwrap()["type"].as_str().unwrap().to_owned();
        format!("event: {name}\ndata: {data}\n\n")
    })
    .collect()
}

#[tokio::test]
async fn a_streamed_paused_turn_sends_deltas_indexed_into_the_whole_message_and_one_finish() {
    let server = MockServer::start().await;
    for (priority, events) in [
        anthropic_text_events("searching… ", "pause_turn"),
        anthropic_text_events("found", "end_turn"),
    ]
    .into_iter()
    .enumerate()
    {
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_string(events)
                    .insert_header("content-type", "text/event-stream"),
            )
            .up_to_n_times(1)
            .with_priority(u8::try_from(priority + 1).unwrap())
            .mount(&server)
            .await;
    }
    let model = AnthropicModel::new(
        AnthropicConfig::new("claude-sonnet-4-5", "test-key").with_base_url(server.uri()),
    )
    .unwrap();
    let deltas = Mutex::new(Vec::new());
    let sink = |delta: ModelDelta| deltas.lock().unwrap().push(delta);
    let response = model
        .stream(
            ModelRequest {
                messages: vec![trellis_middleware::Message::human("search")].into(),
                ..ModelRequest::default()
            },
            &sink,
        )
        .await
        .unwrap();
    assert_eq!(response.message.text_content(), "searching… found");
    let deltas = deltas.into_inner().unwrap();
    let texts: Vec<(usize, String)> = deltas
        .iter()
        .filter_map(|d| match d {
            ModelDelta::Text { index, text } => Some((*index, text.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(texts, [(0, "searching… ".to_owned()), (1, "found".to_owned())]);
    let finishes: Vec<&ModelDelta> = deltas
        .iter()
        .filter(|d| matches!(d, ModelDelta::Finished { .. }))
        .collect();
    assert_eq!(finishes.len(), 1, "{deltas:?}");
    assert!(
        matches!(finishes[0], ModelDelta::Finished { stop_reason: StopReason::EndTurn, usage } if usage.output_tokens == 6)
    );
}

#[tokio::test]
async fn a_refusal_reaches_the_caller_of_a_run_as_its_stop_reason() {
    // Anthropic: `stop_reason: "refusal"` (the stop-reasons page above).
    let server = server_answering_in_turn(
        "/v1/messages",
        vec![anthropic_reply(
            "refusal",
            json!([{"type": "text", "text": "I can't help with that."}]),
        )],
    )
    .await;
    let agent = Agent::builder(anthropic_at(&server.uri())).build().unwrap();
    let out = agent.run(RunInput::human("something bad")).await.unwrap();
    assert_eq!(out.stop_reason, StopReason::Refusal);

    // OpenAI: `message.refusal` (openai-python `ChatCompletionMessage.refusal`).
    let server = server_answering_in_turn(
        "/v1/chat/completions",
        vec![
            json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": null, "refusal": "I can't."}}]}),
        ],
    )
    .await;
    let agent = Agent::builder(openai_at(&server.uri())).build().unwrap();
    let out = agent.run(RunInput::human("something bad")).await.unwrap();
    assert_eq!(out.stop_reason, StopReason::Refusal);
    assert_eq!(out.final_text().as_deref(), Some("I can't."));

    // An answer is not a refusal.
    let server = server_answering_in_turn(
        "/v1/messages",
        vec![anthropic_reply(
            "end_turn",
            json!([{"type": "text", "text": "ok"}]),
        )],
    )
    .await;
    let out = Agent::builder(anthropic_at(&server.uri()))
        .build()
        .unwrap()
        .run(RunInput::human("hi"))
        .await
        .unwrap();
    assert_eq!(out.stop_reason, StopReason::EndTurn);
}
