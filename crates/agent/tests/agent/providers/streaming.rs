//! Streaming replies end to end over HTTP: the Anthropic and Chat Completions event streams
//! (bodies written from the providers' streaming documentation) through `ChatModel::stream`, the
//! agent loop and the retry middleware. A mid-stream `error` event, a stream cut before its end and
//! a stream that stalls each become the right typed error; the retry middleware starts the call
//! again and nothing of a failed attempt reaches the thread.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use trellis_agent::providers::{AnthropicConfig, AnthropicModel, OpenAiConfig, OpenAiModel};
use trellis_middleware::core_stack::RetryConfig;
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::model::{ModelError, StopReason};
use trellis_middleware::runtime::stream::ModelDelta;
use trellis_middleware::*;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// An Anthropic event stream answering `text`, in two text deltas.
fn anthropic_events(text: &str, complete: bool) -> String {
    let (a, b) = text.split_at(text.len() / 2);
    let mut s = String::new();
    s.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n");
    s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    for piece in [a, b] {
        s.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{}}}}}\n\n",
            Value::String(piece.to_owned())
        ));
        if !complete {
            return s;
        }
    }
    s.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n");
    s.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":7}}\n\n");
    s.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s
}

fn sse(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

fn anthropic(server: &str) -> AnthropicModel {
    AnthropicModel::new(AnthropicConfig::new("claude-sonnet-4-5", "test-key").with_base_url(server)).unwrap()
}

fn fast_retries() -> ModelRetryMiddleware {
    ModelRetryMiddleware::new(RetryConfig {
        initial_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        jitter: 0.0,
        ..RetryConfig::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_event_and_a_cut_stream_are_retried_from_the_start() {
    let server = MockServer::start().await;
    let overloaded = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let answers = [
        sse(overloaded.to_owned()),
        sse(anthropic_events("Half an answer that never ends", false)),
        sse(anthropic_events("The whole answer.", true)),
    ];
    for (priority, answer) in answers.into_iter().enumerate() {
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(answer)
            .up_to_n_times(1)
            .with_priority(u8::try_from(priority + 1).unwrap())
            .mount(&server)
            .await;
    }
    let agent = Agent::builder(Arc::new(anthropic(&server.uri())))
        .middleware(fast_retries())
        .build()
        .unwrap();
    let (sink, mut rx) = EventSink::channel();
    let out = agent.run(RunInput::human("hi").events(sink)).await.unwrap();
    assert_eq!(out.final_text().as_deref(), Some("The whole answer."));
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 3, "one attempt per answer");
    for r in &requests {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["stream"], true);
        assert_eq!(
            r.headers.get("accept").and_then(|v| v.to_str().ok()),
            Some("text/event-stream")
        );
    }
    let mut starts = 0;
    let mut text_since_start = String::new();
    while let Ok(event) = rx.try_recv() {
        match event {
            RunEvent::ModelStreamStarted { step: 0 } => {
                starts += 1;
                text_since_start.clear();
            }
            RunEvent::ModelDelta {
                delta: ModelDelta::Text { text, .. },
                ..
            } => text_since_start.push_str(&text),
            _ => {}
        }
    }
    assert_eq!(starts, 3, "each attempt announced");
    assert_eq!(
        text_since_start, "The whole answer.",
        "the last attempt's deltas make the answer"
    );
    // Only the finished reply is in the thread.
    assert_eq!(out.state.messages.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_is_a_transport_error() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                let event = anthropic_events("never finished", false);
                let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(chunk.as_bytes()).await;
                tokio::time::sleep(Duration::from_secs(10)).await;
            });
        }
    });
    let mut config =
        AnthropicConfig::new("claude-sonnet-4-5", "test-key").with_base_url(format!("http://{addr}"));
    config.http.stream_idle_timeout = Duration::from_millis(300);
    let model = AnthropicModel::new(config).unwrap();
    let seen = Mutex::new(String::new());
    let on_delta = |d: ModelDelta| {
        if let ModelDelta::Text { text, .. } = d {
            seen.lock().unwrap().push_str(&text);
        }
    };
    let started = Instant::now();
    let err = model
        .stream(ModelRequest::default(), &on_delta)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Transport { message, .. } if message.contains("stalled")),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(seen.lock().unwrap().as_str(), "never f", "what arrived was shown");
}

#[tokio::test]
async fn chat_completions_stream_with_usage_and_tool_calls() {
    let chunks = [
        r#"{"id":"c1","object":"chat.completion.chunk","model":"gpt-4.1","choices":[{"index":0,"delta":{"role":"assistant","content":"Let me "},"finish_reason":null}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","model":"gpt-4.1","choices":[{"index":0,"delta":{"content":"look."},"finish_reason":null}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"ls","arguments":"{\"path\":"}}]},"finish_reason":null}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"/\"}"}}]},"finish_reason":"tool_calls"}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":32}}}"#,
        "[DONE]",
    ];
    let body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse(body))
        .mount(&server)
        .await;
    let model = OpenAiModel::new(
        OpenAiConfig::openai("gpt-4.1", "test-key").with_base_url(format!("{}/v1", server.uri())),
    )
    .unwrap();
    let deltas = Mutex::new(Vec::new());
    let on_delta = |d: ModelDelta| deltas.lock().unwrap().push(d);
    let reply = model.stream(ModelRequest::default(), &on_delta).await.unwrap();
    assert_eq!(reply.message.text_content(), "Let me look.");
    let call = reply.message.calls().next().unwrap();
    assert_eq!((call.id.as_str(), call.name.as_str()), ("call_1", "ls"));
    assert_eq!(call.args, serde_json::json!({"path": "/"}));
    assert_eq!(reply.stop_reason, StopReason::ToolUse);
    assert_eq!(
        (reply.usage.cache_read_tokens, reply.usage.output_tokens),
        (32, 9)
    );
    let request: Value = serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(request["stream"], true);
    assert_eq!(request["stream_options"]["include_usage"], true);
    let deltas = deltas.into_inner().unwrap();
    assert_eq!(
        deltas.last(),
        Some(&ModelDelta::Finished {
            stop_reason: StopReason::ToolUse,
            usage: reply.usage
        })
    );
}

#[tokio::test]
async fn a_gateway_that_ignores_stream_still_works() {
    let whole = serde_json::json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "One body."}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 3, "output_tokens": 2}
    });
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(whole))
        .mount(&server)
        .await;
    let deltas = Mutex::new(Vec::new());
    let on_delta = |d: ModelDelta| deltas.lock().unwrap().push(d);
    let reply = anthropic(&server.uri())
        .stream(ModelRequest::default(), &on_delta)
        .await
        .unwrap();
    assert_eq!(reply.message.text_content(), "One body.");
    assert_eq!(
        deltas.into_inner().unwrap()[0],
        ModelDelta::Text {
            index: 0,
            text: "One body.".into()
        }
    );
}
