//! A scripted OpenAI-compatible model on a loopback port (wiremock, request recording off), shared
//! by the benches and the load test of this crate (included with `#[path]`; not a bench target).
//!
//! The script is stateless, read from each Chat Completions request: the first user message says
//! `steps=N` (and, for the load test, `thread=ID`). While the conversation holds fewer than N tool
//! results the reply is one tool call; then the final answer `done thread=ID after N steps`.
//! The calls alternate `ls /` and `read_file` of the first `SKILL.md` the system prompt lists;
//! when the message also says `tool=execute`, every call is `execute` of `true` instead, or with
//! `write_mib=N` too, of `head -c` N MiB of zeros into `big.bin`.
//! With a `thread=ID`, the first call writes `/notes.md` holding `thread=ID` and the last reads it
//! back, and every request is checked: a request that names any other `thread=` than its own (one
//! thread seeing another's messages or files) is counted in [`Scripted::crossed`] and refused with
//! a 500.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// What the script saw, shared with the caller.
#[derive(Debug, Default)]
pub struct Seen {
    /// Requests answered.
    pub requests: AtomicUsize,
    /// Requests that named another thread's `thread=` token.
    pub crossed: AtomicUsize,
    /// Per `thread=ID`: when its last reply was sent.
    last_reply: Mutex<HashMap<String, Instant>>,
    /// Step latencies: from a thread's reply to its next request (the tools and the checkpoint
    /// of that step, as the agent sees them).
    pub gaps: Mutex<Vec<Duration>>,
}

impl Seen {
    /// A request of `thread` arrived at `arrived`: the step latency since its last reply, if any.
    pub fn arrived(&self, thread: &str, arrived: Instant) {
        if let Some(at) = self.last_reply.lock().unwrap().get(thread).copied() {
            self.gaps.lock().unwrap().push(arrived - at);
        }
    }

    /// `thread`'s reply was handed over at `at`.
    pub fn replied(&self, thread: String, at: Instant) {
        self.last_reply.lock().unwrap().insert(thread, at);
    }
}

/// The responder.
#[derive(Clone, Default)]
pub struct Scripted {
    pub seen: Arc<Seen>,
    /// How long each reply takes (zero: at once).
    pub latency: Duration,
}

impl Scripted {
    /// Requests that named another thread.
    pub fn crossed(&self) -> usize {
        self.seen.crossed.load(Ordering::Relaxed)
    }

    /// Requests answered.
    pub fn requests(&self) -> usize {
        self.seen.requests.load(Ordering::Relaxed)
    }

    /// The step latencies seen so far, sorted.
    pub fn gaps(&self) -> Vec<Duration> {
        let mut gaps = self.seen.gaps.lock().unwrap().clone();
        gaps.sort();
        gaps
    }
}

/// The value after `key=` in `text`, up to the next whitespace.
fn token<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text.find(&format!("{key}="))? + key.len() + 1;
    text[at..].split_whitespace().next()
}

fn content(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The first `/skills/…/SKILL.md` path in `text`.
fn first_skill(text: &str) -> Option<String> {
    let end = text.find("/SKILL.md")? + "/SKILL.md".len();
    let start = text[..end].rfind("/skills/")?;
    Some(text[start..end].to_owned())
}

fn call(step: usize, name: &str, arguments: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": format!("call_{step}"), "type": "function",
        "function": {"name": name, "arguments": arguments.to_string()}}]})
}

/// The `thread=ID` token of a request body's first user message.
pub fn thread_of(body: &Value) -> Option<String> {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .map(content)
        .and_then(|task| token(&task, "thread").map(str::to_owned))
}

/// The reply to one request body, or `None` when it named another thread.
pub fn reply(body: &Value) -> Option<Value> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let task = messages
        .iter()
        .find(|m| m["role"] == "user")
        .map(content)
        .unwrap_or_default();
    let steps: usize = token(&task, "steps").and_then(|s| s.parse().ok()).unwrap_or(0);
    let thread = token(&task, "thread").map(str::to_owned);
    if let Some(own) = &thread {
        let text = body.to_string();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("thread=") {
            rest = &rest[at + "thread=".len()..];
            let other = rest
                .strip_prefix(own.as_str())
                .is_none_or(|after| after.starts_with(|c: char| c.is_ascii_alphanumeric()));
            if other {
                return None;
            }
        }
    }
    let done = messages.iter().filter(|m| m["role"] == "tool").count();
    let system = messages
        .iter()
        .filter(|m| m["role"] == "system")
        .map(content)
        .collect::<String>();
    let skill = first_skill(&system).unwrap_or_else(|| "/skills".into());
    let message = if done >= steps {
        json!({"role": "assistant", "content": format!("done thread={} after {steps} steps", thread.as_deref().unwrap_or("-"))})
    } else if thread.is_some() && done == 0 {
        call(
            done,
            "write_file",
            json!({"file_path": "/notes.md", "content": format!("thread={}\n", thread.as_deref().unwrap_or_default())}),
        )
    } else if thread.is_some() && done + 1 == steps {
        call(done, "read_file", json!({"file_path": "/notes.md"}))
    } else if task.contains("tool=execute") {
        let command = match token(&task, "write_mib").and_then(|n| n.parse::<u64>().ok()) {
            Some(mib) => format!("head -c {} /dev/zero > big.bin", mib << 20),
            None => "true".to_owned(),
        };
        call(done, "execute", json!({"command": command}))
    } else if done % 2 == 0 {
        call(done, "ls", json!({"path": "/"}))
    } else {
        call(done, "read_file", json!({"file_path": skill, "limit": 20}))
    };
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    Some(json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    }))
}

impl Respond for Scripted {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.seen.requests.fetch_add(1, Ordering::Relaxed);
        let arrived = Instant::now();
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let thread = thread_of(&body);
        let answer = reply(&body);
        if let Some(thread) = thread {
            self.seen.arrived(&thread, arrived);
            self.seen.replied(thread, Instant::now());
        }
        match answer {
            Some(answer) => ResponseTemplate::new(200)
                .set_body_raw(answer.to_string(), "application/json")
                .set_delay(self.latency),
            None => {
                self.seen.crossed.fetch_add(1, Ordering::Relaxed);
                ResponseTemplate::new(500).set_body_string("a request named another thread")
            }
        }
    }
}

/// Start the scripted model; its base URL (for `OPENAI_BASE_URL`) and the responder.
pub async fn start() -> (MockServer, String, Scripted) {
    start_with_latency(Duration::ZERO).await
}

/// [`start`], each reply sent `latency` after its request.
pub async fn start_with_latency(latency: Duration) -> (MockServer, String, Scripted) {
    let server = MockServer::builder().disable_request_recording().start().await;
    let scripted = Scripted {
        latency,
        ..Scripted::default()
    };
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(scripted.clone())
        .mount(&server)
        .await;
    let url = format!("{}/v1", server.uri());
    (server, url, scripted)
}
