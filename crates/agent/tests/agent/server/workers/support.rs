//! What the worker tests share: [`worker`] starts one `trellis serve --database URL`, and small
//! HTTP helpers (start a run, wait for it to settle, read a thread's texts, replay a stream).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::MockServer;

use super::super::db_harness;
pub(super) use super::super::db_harness::{Sse, parse_sse};
use super::super::harness::{AGENT_FILE, Served, first_then, http};
use crate::cli::harness::reply;

/// One `trellis serve --database URL` worker in `dir` (agent file and state dir shared by every
/// worker of the test), with leases of `lease` seconds.
pub(super) fn worker(dir: &Path, model: &MockServer, url: &str, keys: bool, lease: f64) -> Served {
    let lease = lease.to_string();
    let keys_file = dir.join("keys");
    let mut args = vec!["--lease-seconds", lease.as_str()];
    if keys {
        args.extend(["--api-keys", keys_file.to_str().unwrap()]);
    }
    db_harness::worker(dir, model, url, &args)
}

pub(super) fn setup(keys: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trellis.toml"), AGENT_FILE).unwrap();
    if let Some(keys) = keys {
        std::fs::write(dir.path().join("keys"), keys).unwrap();
    }
    dir
}

pub(super) fn say(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

/// The ids of `events` are 0, 1, 2, … with no gap and no duplicate.
pub(super) fn assert_numbered(events: &[Sse]) {
    db_harness::assert_numbered_from(events, 0);
}

pub(super) async fn post(
    client: &reqwest::Client,
    url: String,
    key: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut request = client.post(url).json(&body);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    request.send().await.unwrap()
}

pub(super) async fn get(client: &reqwest::Client, url: String, key: Option<&str>) -> reqwest::Response {
    let mut request = client.get(url);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    request.send().await.unwrap()
}

pub(super) async fn new_thread(client: &reqwest::Client, on: &Served, key: Option<&str>) -> String {
    let thread: Value = post(client, format!("{}/threads", on.url), key, json!({}))
        .await
        .json()
        .await
        .unwrap();
    thread["thread_id"].as_str().unwrap().to_owned()
}

/// Start a background run of `text` on `thread` through `on`; its record.
pub(super) async fn start_run(
    client: &reqwest::Client,
    on: &Served,
    thread: &str,
    text: &str,
    extra: Value,
) -> Value {
    let mut body = json!({"assistant_id": "agent", "input": say(text)});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    let response = post(client, format!("{}/threads/{thread}/runs", on.url), None, body).await;
    assert_eq!(response.status(), 200, "{}", on.stderr());
    response.json().await.unwrap()
}

/// The run once it is no longer pending or running (asked of `on`), within `limit`.
pub(super) async fn settled(
    client: &reqwest::Client,
    on: &Served,
    thread: &str,
    run: &str,
    limit: Duration,
) -> Value {
    let start = Instant::now();
    loop {
        let got: Value = get(client, format!("{}/threads/{thread}/runs/{run}", on.url), None)
            .await
            .json()
            .await
            .unwrap();
        if !matches!(got["status"].as_str(), Some("pending" | "running")) {
            return got;
        }
        assert!(
            start.elapsed() < limit,
            "run still {}: {}",
            got["status"],
            on.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The texts of the thread's messages, as `on` reads them.
pub(super) async fn texts(client: &reqwest::Client, on: &Served, thread: &str) -> Vec<String> {
    let state: Value = get(client, format!("{}/threads/{thread}/state", on.url), None)
        .await
        .json()
        .await
        .unwrap();
    state["values"]["messages"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|m| match &m["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Wait until `model` received `n` requests.
pub(super) async fn model_called(model: &MockServer, n: usize) {
    for _ in 0..600 {
        if model.received_requests().await.unwrap_or_default().len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the model was not called {n} times");
}

/// Worker A in a fresh state dir whose model answers `first` (after `delay`) to the first call
/// and `then` at once to later ones, with leases of `lease` s, running a resumable run of `hi`
/// (every mode) on a new thread, caught inside its first model call.
pub(super) struct MidCall {
    pub(super) dir: tempfile::TempDir,
    pub(super) model: MockServer,
    pub(super) a: Served,
    pub(super) client: reqwest::Client,
    pub(super) thread: String,
    pub(super) run: String,
}

pub(super) async fn mid_call(url: &str, (first, delay): (&str, Duration), then: &str, lease: f64) -> MidCall {
    let text = |t: &str| reply(json!([{"type": "text", "text": t}]), "end_turn");
    let model = first_then(text(first).set_delay(delay), text(then)).await;
    let dir = setup(None);
    let a = worker(dir.path(), &model, url, false, lease);
    let client = http();
    let thread = new_thread(&client, &a, None).await;
    let every_mode =
        json!({"stream_resumable": true, "stream_mode": ["values", "updates", "messages-tuple"]});
    let run = start_run(&client, &a, &thread, "hi", every_mode).await;
    let run = run["run_id"].as_str().unwrap().to_owned();
    model_called(&model, 1).await;
    assert!(
        a.stderr().contains(&format!("running run {run}")),
        "{}",
        a.stderr()
    );
    MidCall {
        dir,
        model,
        a,
        client,
        thread,
        run,
    }
}

/// The whole stream of `run`, replayed by `on` (`Last-Event-ID: -1`).
pub(super) async fn replay(client: &reqwest::Client, on: &Served, thread: &str, run: &str) -> String {
    client
        .get(format!("{}/threads/{thread}/runs/{run}/stream", on.url))
        .header("last-event-id", "-1")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A slow run started on `on`, once a worker runs it and has checkpointed its input.
pub(super) async fn slow_run(client: &reqwest::Client, on: &Served, thread: &str) -> String {
    let run = start_run(client, on, thread, "slow please", json!({})).await;
    let run = run["run_id"].as_str().unwrap().to_owned();
    for _ in 0..200 {
        let got: Value = get(client, format!("{}/threads/{thread}/runs/{run}", on.url), None)
            .await
            .json()
            .await
            .unwrap();
        // Running, and its input checkpointed (what an interrupt keeps).
        if got["status"] == "running"
            && texts(client, on, thread).await.last().map(String::as_str) == Some("slow please")
        {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("never running with its input saved: {}", on.stderr());
}

/// Send `signal` (`STOP`, `CONT`, `TERM`) to `served`.
pub(super) fn signal(served: &Served, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(served.pid().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// The run of "hi" (every mode, resumable) started through `on` on a new thread.
pub(super) async fn begin(on: &Served) -> (String, String) {
    let client = http();
    let thread = new_thread(&client, on, None).await;
    let every_mode =
        json!({"stream_resumable": true, "stream_mode": ["values", "updates", "messages-tuple"]});
    let run = start_run(&client, on, &thread, "hi", every_mode).await;
    (thread, run["run_id"].as_str().unwrap().to_owned())
}

/// Follow `run` on `on` from the start, once the stream answered, until it ends.
pub(super) async fn follow(on: &Served, thread: &str, run: &str) -> tokio::task::JoinHandle<String> {
    let response = http()
        .get(format!("{}/threads/{thread}/runs/{run}/stream", on.url))
        .header("last-event-id", "-1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    tokio::spawn(async move { response.text().await.unwrap() })
}
