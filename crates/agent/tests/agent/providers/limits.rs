//! A provider endpoint is remote input: a body past `HttpConfig::max_response_bytes` is refused with a
//! typed error instead of being buffered, whether the server declares its length or streams it chunked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trellis_agent::providers::HttpConfig;
use trellis_agent::providers::anthropic::{AnthropicConfig, AnthropicModel};
use trellis_agent::providers::openai::{OpenAiConfig, OpenAiModel};
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::{ChatModel, Message, ModelRequest};
use wiremock::ResponseTemplate;

use crate::providers::common::*;

const LIMIT: usize = 4096;

fn small_limit() -> HttpConfig {
    HttpConfig {
        max_response_bytes: LIMIT,
        ..HttpConfig::default()
    }
}

fn anthropic_at(base_url: &str) -> AnthropicModel {
    AnthropicModel::new(
        AnthropicConfig::new("claude-sonnet-4-5", "test-key")
            .with_base_url(base_url)
            .with_http(small_limit()),
    )
    .unwrap()
}

fn openai_at(base_url: &str) -> OpenAiModel {
    OpenAiModel::new(
        OpenAiConfig::openai("gpt-4.1", "sk-test")
            .with_base_url(base_url)
            .with_http(small_limit()),
    )
    .unwrap()
}

fn hello() -> ModelRequest {
    ModelRequest {
        messages: vec![Message::human("hi")].into(),
        ..ModelRequest::default()
    }
}

/// A JSON text answer whose text is `filler` bytes long.
fn anthropic_answer(filler: usize) -> serde_json::Value {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "x".repeat(filler)}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 1, "output_tokens": 1}
    })
}

fn assert_over_limit(error: &ModelError) {
    match error {
        ModelError::Other { message, .. } => {
            assert!(message.contains("4096-byte limit"), "{message}");
        }
        other => panic!("expected a size-limit error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_body_under_the_limit_is_read() {
    let server = server_answering(
        "/v1/messages",
        ResponseTemplate::new(200).set_body_json(anthropic_answer(LIMIT / 2)),
    )
    .await;
    let response = anthropic_at(&server.uri()).invoke(hello()).await.unwrap();
    assert_eq!(response.message.text_content().len(), LIMIT / 2);
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_refused() {
    let server = server_answering(
        "/v1/messages",
        ResponseTemplate::new(200).set_body_json(anthropic_answer(LIMIT * 4)),
    )
    .await;
    let error = anthropic_at(&server.uri()).invoke(hello()).await.unwrap_err();
    assert_over_limit(&error);
}

#[tokio::test]
async fn an_error_body_over_the_limit_is_refused_too() {
    let server = server_answering(
        "/v1/chat/completions",
        ResponseTemplate::new(500).set_body_string("e".repeat(LIMIT + 1)),
    )
    .await;
    let error = openai_at(&format!("{}/v1", server.uri()))
        .invoke(hello())
        .await
        .unwrap_err();
    assert_over_limit(&error);
}

/// A server that answers every connection with a chunked JSON body of `total` spaces and no length.
async fn chunked_server(total: usize) -> String {
    chunked_server_of("application/json", "", b' ', total).await
}

/// A server that answers every connection with a chunked `content_type` body: `prefix`, then
/// `total` bytes of `filler`, and no length. Returns its base URL.
async fn chunked_server_of(
    content_type: &'static str,
    prefix: &'static str,
    filler: u8,
    total: usize,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0u8; 64 * 1024];
                // One read is enough for the small request these tests send.
                let _ = socket.read(&mut request).await;
                let mut head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
                );
                // An empty chunk would end the body.
                if !prefix.is_empty() {
                    head.push_str(&format!("{:x}\r\n{prefix}\r\n", prefix.len()));
                }
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![filler; 1024];
                let mut sent = 0;
                while sent < total {
                    let frame = format!("{:x}\r\n", chunk.len());
                    let ok = socket.write_all(frame.as_bytes()).await.is_ok()
                        && socket.write_all(&chunk).await.is_ok()
                        && socket.write_all(b"\r\n").await.is_ok();
                    if !ok {
                        return; // the client gave up, as it should
                    }
                    sent += chunk.len();
                }
                let _ = socket.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    format!("http://{address}")
}

#[tokio::test]
async fn a_chunked_body_is_cut_off_once_it_crosses_the_limit() {
    // 64 MiB announced by nothing: the client must stop reading at the limit, not buffer it all.
    let base = chunked_server(64 * 1024 * 1024).await;
    let error = openai_at(&format!("{base}/v1"))
        .invoke(hello())
        .await
        .unwrap_err();
    assert_over_limit(&error);
}

#[tokio::test]
async fn an_event_stream_line_that_never_ends_is_cut_off_at_the_limit() {
    // Review finding F10: `data: ` and then 64 MiB with no newline. The event parser would hold the
    // unfinished line whole; the client must count the raw bytes and stop at the limit instead of
    // waiting for an event that never completes.
    let base = chunked_server_of("text/event-stream", "data: ", b'a', 64 * 1024 * 1024).await;
    let error = openai_at(&format!("{base}/v1"))
        .stream(hello(), &|_| {})
        .await
        .unwrap_err();
    assert_over_limit(&error);
    assert!(
        !error.is_transient(),
        "a reply over the limit is not retried: {error:?}"
    );
}
