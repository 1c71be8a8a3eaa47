//! What streaming costs: a 2,000-token answer from a loopback server, streamed (2,000 text
//! deltas) against one non-streaming body, through the Anthropic provider, in one run; and how
//! long a delta takes from the moment its bytes are on the socket to the moment the caller's
//! `on_delta` sees it. Prints JSON. Under `cargo test --all-targets` (no `--bench`) it does a
//! quick smoke run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trellis_agent::providers::{AnthropicConfig, AnthropicModel};
use trellis_middleware::runtime::stream::ModelDelta;
use trellis_middleware::{ChatModel, ModelRequest};

fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// Tokens of the answer (a "token" here is 4 characters).
const TOKENS: usize = 2_000;

fn piece(i: usize) -> String {
    format!("w{:03}", i % 1000)
}

fn whole_body() -> String {
    let text: String = (0..TOKENS).map(piece).collect();
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
           "usage": {"input_tokens": 10, "output_tokens": TOKENS}})
    .to_string()
}

fn event(name: &str, data: serde_json::Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn head_events() -> String {
    event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    ) + &event(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    )
}

fn delta_event(i: usize) -> String {
    event(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece(i)}}),
    )
}

fn tail_events() -> String {
    event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ) + &event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": TOKENS}}),
    ) + &event("message_stop", json!({"type": "message_stop"}))
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Whole,
    Stream,
    /// Stream `n` deltas, one at a time, recording when each was written.
    Paced(usize),
}

/// Serve every connection in `mode`; paced writes record their instants in `sent`.
async fn server(mode: Mode, sent: Arc<Mutex<Vec<Instant>>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let sent = sent.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = vec![0u8; 64 * 1024];
                // Read the request head and its body (content-length).
                loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| {
                                l.strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if request.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let content_type = if mode == Mode::Whole {
                    "application/json"
                } else {
                    "text/event-stream"
                };
                let head =
                    format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n");
                let _ = socket.write_all(head.as_bytes()).await;
                match mode {
                    Mode::Whole => {
                        let _ = socket.write_all(whole_body().as_bytes()).await;
                    }
                    Mode::Stream => {
                        let body: String = std::iter::once(head_events())
                            .chain((0..TOKENS).map(delta_event))
                            .chain(std::iter::once(tail_events()))
                            .collect();
                        let _ = socket.write_all(body.as_bytes()).await;
                    }
                    Mode::Paced(n) => {
                        let _ = socket.write_all(head_events().as_bytes()).await;
                        for i in 0..n {
                            let _ = socket.write_all(delta_event(i).as_bytes()).await;
                            let _ = socket.flush().await;
                            sent.lock().unwrap().push(Instant::now());
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        let _ = socket.write_all(tail_events().as_bytes()).await;
                    }
                }
                let _ = socket.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let runs = if smoke() { 3 } else { 30 };
    let none = Arc::new(Mutex::new(Vec::new()));
    let whole = AnthropicModel::new(
        AnthropicConfig::new("claude-sonnet-4-5", "k").with_base_url(server(Mode::Whole, none.clone()).await),
    )
    .unwrap();
    let streaming = AnthropicModel::new(
        AnthropicConfig::new("claude-sonnet-4-5", "k").with_base_url(server(Mode::Stream, none).await),
    )
    .unwrap();
    let expected: String = (0..TOKENS).map(piece).collect();
    let mut plain_times = Vec::new();
    let mut stream_times = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let reply = whole.invoke(ModelRequest::default()).await.unwrap();
        plain_times.push(t.elapsed());
        assert_eq!(reply.message.text_content(), expected);
        let count = Mutex::new(0usize);
        let on_delta = |d: ModelDelta| {
            if matches!(d, ModelDelta::Text { .. }) {
                *count.lock().unwrap() += 1;
            }
        };
        let t = Instant::now();
        let reply = streaming
            .stream(ModelRequest::default(), &on_delta)
            .await
            .unwrap();
        stream_times.push(t.elapsed());
        assert_eq!(reply.message.text_content(), expected);
        assert_eq!(*count.lock().unwrap(), TOKENS);
    }
    let (plain, streamed) = (median(plain_times), median(stream_times));
    println!(
        "{}",
        json!({"case": "2,000-token answer", "runs": runs, "non_streaming_ms": ms(plain), "streaming_ms": ms(streamed),
               "ratio": streamed.as_secs_f64() / plain.as_secs_f64(), "deltas": TOKENS})
    );

    let n = if smoke() { 20 } else { 300 };
    let sent = Arc::new(Mutex::new(Vec::new()));
    let paced = AnthropicModel::new(
        AnthropicConfig::new("claude-sonnet-4-5", "k")
            .with_base_url(server(Mode::Paced(n), sent.clone()).await),
    )
    .unwrap();
    let received = Mutex::new(Vec::new());
    let on_delta = |d: ModelDelta| {
        if matches!(d, ModelDelta::Text { .. }) {
            received.lock().unwrap().push(Instant::now());
        }
    };
    paced.stream(ModelRequest::default(), &on_delta).await.unwrap();
    let sent = sent.lock().unwrap().clone();
    let received = received.into_inner().unwrap();
    assert_eq!(sent.len(), received.len());
    let mut latencies: Vec<Duration> = sent
        .iter()
        .zip(&received)
        .map(|(s, r)| r.saturating_duration_since(*s))
        .collect();
    latencies.sort();
    println!(
        "{}",
        json!({"case": "delta latency, socket to on_delta", "deltas": n,
               "median_us": latencies[latencies.len() / 2].as_secs_f64() * 1e6,
               "p99_us": latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)].as_secs_f64() * 1e6})
    );
}
