//! Tool-call ids stay unique in a thread even when an OpenAI-compatible server sends none.
//!
//! The server below answers in the documented Chat Completions shape but leaves out every
//! `tool_calls[].id`, as some local servers do; the parser then names the calls `call_0` in every
//! turn. Each turn's tool result is large enough to be evicted to `/large_tool_results/<call id>`,
//! so a repeated id would overwrite the earlier turn's file and show the model the wrong result.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use trellis_agent::backend::{BackendExt, StateBackend, VirtualPath};
use trellis_agent::deep_agent;
use trellis_agent::middleware::{FnTool, Message, RunInput, ThreadId, ToolOutput};
use trellis_agent::providers::openai::{OpenAiConfig, OpenAiModel};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const TURNS: usize = 5;

/// Odd requests: a tool call without an id; even ones: a text answer.
struct NoIds(AtomicUsize);

impl Respond for NoIds {
    fn respond(&self, _request: &Request) -> ResponseTemplate {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        let turn = n / 2;
        let calls_tool = n.is_multiple_of(2);
        let message = if calls_tool {
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "type": "function",
                "function": {"name": "report", "arguments": json!({"turn": turn}).to_string()}
            }]})
        } else {
            json!({"role": "assistant", "content": format!("turn {turn} done")})
        };
        let finish = if calls_tool { "tool_calls" } else { "stop" };
        ResponseTemplate::new(200).set_body_json(json!({
            "id": format!("chatcmpl-{n}"),
            "object": "chat.completion",
            "created": 1741569952,
            "model": "local-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        }))
    }
}

/// A report of 100,000+ characters that names its turn on every line.
fn report(turn: u64) -> String {
    (0..2_000)
        .map(|i| format!("turn {turn} line {i:04} {}\n", "x".repeat(40)))
        .collect()
}

#[tokio::test]
async fn five_turns_without_provider_ids_evict_to_five_distinct_files() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(NoIds(AtomicUsize::new(0)))
        .mount(&server)
        .await;
    let model = OpenAiModel::new(
        OpenAiConfig::openai("local-model", "sk-test").with_base_url(format!("{}/v1", server.uri())),
    )
    .unwrap();
    let backend = Arc::new(StateBackend::new());
    let tool = FnTool::new(
        "report",
        "A long report.",
        json!({"type": "object"}),
        |args: Value| async move { Ok(ToolOutput::text(report(args["turn"].as_u64().unwrap_or(99)))) },
    );
    let agent = deep_agent(Arc::new(model))
        .backend(backend)
        .tool(tool)
        .build()
        .unwrap();

    let thread = ThreadId::new("no-ids").unwrap();
    let mut last = None;
    for turn in 0..TURNS {
        let out = agent
            .run(RunInput::human(format!("report {turn}")).thread(thread.clone()))
            .await
            .unwrap();
        assert_eq!(
            out.final_text().as_deref(),
            Some(format!("turn {turn} done").as_str())
        );
        last = Some(out);
    }
    let messages = last.unwrap().state.messages;
    let results: Vec<_> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), TURNS);
    let ids: BTreeSet<&str> = results.iter().map(|t| t.call_id.as_str()).collect();
    assert_eq!(ids.len(), TURNS, "every call got its own id: {ids:?}");

    // Evicted results are the thread's own, even when the agent's files are shared.
    let backend = agent.thread_files(&thread).expect("thread files");
    let dir = VirtualPath::parse("/large_tool_results").unwrap();
    let saved = backend.list_files(&dir, 100).await.unwrap();
    assert_eq!(saved.files.len(), TURNS, "{:?}", saved.files);
    for (turn, result) in results.iter().enumerate() {
        let notice = Message::Tool(result.clone()).text();
        let path = saved
            .files
            .iter()
            .map(|f| f.path.as_str().to_owned())
            .find(|p| notice.contains(p.as_str()))
            .unwrap_or_else(|| panic!("turn {turn}: the notice names no saved file: {notice:.300}"));
        let content = backend
            .read_to_string(&VirtualPath::parse(&path).unwrap())
            .await
            .unwrap();
        assert_eq!(
            content,
            report(turn as u64),
            "turn {turn} reads back its own result from {path}"
        );
    }
}
