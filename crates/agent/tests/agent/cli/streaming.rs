//! `trellis run` against a streaming (mock) Anthropic endpoint: `--json` writes every event as
//! one JSON line, the text deltas among them; without a terminal, stdout holds only the answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use wiremock::ResponseTemplate;

use super::harness::{TrellisRun, messages};

/// A streamed Anthropic reply writing `Streamed answer.` in two deltas (the server tests reuse it).
pub(crate) const EVENTS: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Streamed \"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"answer.\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":4}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

async fn run(extra: &[&str]) -> std::process::Output {
    let server = wiremock::MockServer::start().await;
    messages()
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string(EVENTS)
                .insert_header("content-type", "text/event-stream"),
        )
        .mount(&server)
        .await;
    let state = tempfile::tempdir().unwrap();
    let output = TrellisRun::new()
        .args(["--sandbox", "none"])
        .state_dir(state.path())
        .args(extra)
        .arg("Say something")
        .anthropic(&server)
        .success()
        .await;
    let requests = server.received_requests().await.unwrap();
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["stream"], true, "the CLI streams");
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_writes_one_event_per_line_with_the_deltas() {
    let out = run(&["--json"]).await;
    let stdout = String::from_utf8(out.stdout).unwrap();
    let events: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"run_started"));
    // The run's events end with run_finished; the summary comes after them.
    assert_eq!(kinds[kinds.len() - 2..], ["run_finished", "summary"]);
    let summary = events.last().unwrap();
    assert_eq!(summary["model_calls"], 1);
    assert_eq!(summary["usage"]["input_tokens"], 12);
    assert_eq!(summary["usage"]["output_tokens"], 4);
    // claude-sonnet-4-5 at $3 / $15 per million: 12 × 3 + 4 × 15 = 96 millionths of a dollar.
    assert!(
        (summary["cost_usd"].as_f64().unwrap() - 0.000096).abs() < 1e-12,
        "{summary}"
    );
    let text: String = events
        .iter()
        .filter(|e| e["event"] == "model_delta" && e["delta"]["type"] == "text")
        .map(|e| e["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Streamed answer.");
    assert!(kinds.contains(&"model_stream_started"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_stdout_is_the_answer_alone() {
    let out = run(&[]).await;
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "Streamed answer.\n");
    // The summary line is on stderr, with tokens by kind and the cost.
    let stderr = String::from_utf8(out.stderr).unwrap();
    let line = stderr
        .lines()
        .find(|l| l.starts_with("done: "))
        .expect("a summary line");
    assert!(line.starts_with("done: 1 model calls, 0 tool calls; tokens: 12 input (12 full rate, 0 cache read, 0 cache write), 4 output; cache hit 0%; $0.0001 at list prices of "), "{line}");
}
