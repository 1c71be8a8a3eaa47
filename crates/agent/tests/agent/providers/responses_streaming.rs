//! The Responses API streamed over HTTP (`"stream": true`), written from the streaming reference
//! (platform.openai.com/docs/api-reference/responses-streaming: `response.created`,
//! `response.output_item.added`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, `response.output_item.done`, `response.completed`
//! holding the whole `Response`). Through the agent loop: a streamed call, the tool it asks for,
//! a streamed answer; a stream cut before `response.completed` is retried from the start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use trellis_agent::providers::ResponsesModel;
use trellis_agent::providers::openai::OpenAiConfig;
use trellis_middleware::core_stack::RetryConfig;
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::stream::ModelDelta;
use trellis_middleware::*;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn event(kind: &str, mut data: Value) -> String {
    data["type"] = json!(kind);
    format!("event: {kind}\ndata: {data}\n\n")
}

fn response(output: Value) -> Value {
    json!({"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5",
           "output": output, "usage": {"input_tokens": 20, "output_tokens": 5}})
}

/// A streamed function call of `read_file`.
fn call_stream() -> String {
    let item = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file",
                      "arguments": "{\"path\":\"/a.txt\"}", "status": "completed"});
    [
        event("response.created", json!({"response": {"id": "resp_1", "status": "in_progress", "output": []}})),
        event("response.output_item.added", json!({"output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": ""}})),
        event("response.function_call_arguments.delta", json!({"output_index": 0, "item_id": "fc_1", "delta": "{\"path\":"})),
        event("response.function_call_arguments.delta", json!({"output_index": 0, "item_id": "fc_1", "delta": "\"/a.txt\"}"})),
        event("response.output_item.done", json!({"output_index": 0, "item": item})),
        event("response.completed", json!({"response": response(json!([item]))})),
    ]
    .concat()
}

/// A streamed text answer; cut before its terminal event when `complete` is false.
fn text_stream(text: &str, complete: bool) -> String {
    let (a, b) = text.split_at(text.len() / 2);
    let item = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": text, "annotations": []}]});
    let mut events = vec![
        event(
            "response.created",
            json!({"response": {"id": "resp_2", "status": "in_progress", "output": []}}),
        ),
        event(
            "response.output_item.added",
            json!({"output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        ),
        event(
            "response.content_part.added",
            json!({"output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": ""}}),
        ),
        event(
            "response.output_text.delta",
            json!({"output_index": 0, "content_index": 0, "delta": a}),
        ),
    ];
    if complete {
        events.push(event(
            "response.output_text.delta",
            json!({"output_index": 0, "content_index": 0, "delta": b}),
        ));
        events.push(event(
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        ));
        events.push(event(
            "response.completed",
            json!({"response": response(json!([item]))}),
        ));
    }
    events.concat()
}

fn sse(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_string(body)
        .insert_header("content-type", "text/event-stream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_call_runs_its_tool_and_a_cut_answer_is_retried() {
    let server = MockServer::start().await;
    let answers = [
        sse(call_stream()),
        sse(text_stream("Half an answer that never ends", false)),
        sse(text_stream("The file says hello.", true)),
    ];
    for (priority, answer) in answers.into_iter().enumerate() {
        Mock::given(method("POST"))
            .and(path("/v1/responses"))
            .respond_with(answer)
            .up_to_n_times(1)
            .with_priority(u8::try_from(priority + 1).unwrap())
            .mount(&server)
            .await;
    }
    let model = ResponsesModel::new(
        OpenAiConfig::openai("gpt-5", "sk-test").with_base_url(format!("{}/v1", server.uri())),
    )
    .unwrap();
    let read_file = FnTool::new(
        "read_file",
        "Read a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |args: Value| async move {
            assert_eq!(args, json!({"path": "/a.txt"}));
            Ok(ToolOutput::text("hello"))
        },
    );
    let agent = Agent::builder(Arc::new(model))
        .tool(read_file)
        .middleware(ModelRetryMiddleware::new(RetryConfig {
            initial_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
            jitter: 0.0,
            ..RetryConfig::default()
        }))
        .build()
        .unwrap();
    let (sink, mut rx) = EventSink::channel();
    let out = agent
        .run(RunInput::human("What does /a.txt say?").events(sink))
        .await
        .unwrap();
    assert_eq!(out.final_text().as_deref(), Some("The file says hello."));

    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 3, "the call, the cut answer, the retried answer");
    for r in &requests {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["stream"], true);
        assert_eq!(body["store"], false);
    }
    let last: Value = serde_json::from_slice(&requests[2].body).unwrap();
    let input = last["input"].as_array().unwrap();
    assert!(
        input
            .iter()
            .any(|i| i["type"] == "function_call_output" && i["output"] == "hello"),
        "{input:?}"
    );

    let mut arguments = String::new();
    let mut calls = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let RunEvent::ModelDelta { delta, .. } = event {
            match delta {
                ModelDelta::ToolArguments { json, .. } => arguments.push_str(&json),
                ModelDelta::ToolCall { id, name, .. } => calls.push((id, name)),
                _ => {}
            }
        }
    }
    assert_eq!(arguments, "{\"path\":\"/a.txt\"}");
    assert_eq!(calls, [("call_1".to_owned(), "read_file".to_owned())]);
    // Only the finished replies are in the thread: human, call, result, answer.
    assert_eq!(out.state.messages.len(), 4);
}

#[tokio::test]
async fn with_streaming_off_one_plain_request_is_made() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(ResponseTemplate::new(200).set_body_json(response(json!([
            {"type": "message", "id": "m", "role": "assistant",
             "content": [{"type": "output_text", "text": "plain"}]}
        ]))))
        .mount(&server)
        .await;
    let mut config = OpenAiConfig::openai("gpt-5", "sk").with_base_url(format!("{}/v1", server.uri()));
    config.stream = false;
    let model = ResponsesModel::new(config).unwrap();
    let ignore = |_: ModelDelta| {};
    let reply = model.stream(ModelRequest::default(), &ignore).await.unwrap();
    assert_eq!(reply.message.text_content(), "plain");
    let sent = server.received_requests().await.unwrap();
    let body: Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert!(body.get("stream").is_none());
}
