//! `trellis serve` over plain HTTP (no Python needed): bad input gets a 4xx with `detail`, a
//! thread runs one run at a time, threads survive a restart (even a `kill -9`), and the server
//! refuses a non-loopback address without keys; `/info` and a `Prefer: return=minimal` PATCH.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

use super::harness::{AGENT_FILE, Served, always_done, ls_then_streamed_answer};
use crate::cli::harness::{messages, reply, trellis};

fn client() -> reqwest::Client {
    super::harness::http()
}

/// The status and JSON body of a response.
async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn post(url: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    answer(
        client()
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn get(url: &str) -> (u16, Value) {
    answer(client().get(url).send().await.unwrap()).await
}

/// The status of `DELETE url`.
async fn delete(url: &str) -> u16 {
    client().delete(url).send().await.unwrap().status().as_u16()
}

fn hi() -> Value {
    json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hi"}]}})
}

/// Hostile ids, malformed and oversized bodies, unknown fields and modes not built: each a 4xx
/// whose body has a `detail`, never a 5xx, and the server still answers afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_4xx_with_detail() {
    let model = always_done().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let u = &served.url;
    let (_, thread) = post(&format!("{u}/threads"), "{}").await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let huge = format!("{{\"metadata\": {{\"x\": \"{}\"}}}}", "a".repeat(2 * 1024 * 1024));
    let cases: Vec<(&str, (u16, Value), u16)> = vec![
        (
            "non-uuid thread",
            get(&format!("{u}/threads/not-a-uuid")).await,
            422,
        ),
        (
            "traversal id",
            get(&format!("{u}/threads/..%2F..%2Fetc")).await,
            422,
        ),
        (
            "unknown thread",
            get(&format!("{u}/threads/00000000-0000-4000-8000-000000000000")).await,
            404,
        ),
        (
            "unknown assistant",
            get(&format!("{u}/assistants/nope")).await,
            404,
        ),
        (
            "not json",
            post(&format!("{u}/threads"), "{\"metadata\": ").await,
            400,
        ),
        (
            "unknown field",
            post(&format!("{u}/threads"), "{\"colour\": 1}").await,
            422,
        ),
        (
            "wrong type",
            post(&format!("{u}/threads/search"), "{\"limit\": \"ten\"}").await,
            422,
        ),
        ("oversized", post(&format!("{u}/threads"), huge).await, 413),
        (
            "mode not built",
            post(
                &format!("{u}/threads/{tid}/runs/wait"),
                json!({"assistant_id": "agent", "input": {"messages": []}, "stream_mode": ["events"]})
                    .to_string(),
            )
            .await,
            422,
        ),
        (
            "resume with nothing pending",
            post(
                &format!("{u}/threads/{tid}/runs/wait"),
                json!({"assistant_id": "agent", "command": {"resume": {"decisions": []}}}).to_string(),
            )
            .await,
            409,
        ),
        (
            "stateless resume",
            post(
                &format!("{u}/runs/wait"),
                json!({"assistant_id": "agent", "command": {"resume": {"decisions": []}}}).to_string(),
            )
            .await,
            400,
        ),
        (
            "unknown strategy",
            post(
                &format!("{u}/threads/{tid}/runs"),
                json!({"assistant_id": "agent", "input": {"messages": []}, "multitask_strategy": "queue"})
                    .to_string(),
            )
            .await,
            422,
        ),
        (
            "on_completion on a thread",
            post(
                &format!("{u}/threads/{tid}/runs"),
                json!({"assistant_id": "agent", "input": {"messages": []}, "on_completion": "keep"})
                    .to_string(),
            )
            .await,
            422,
        ),
        (
            "cancel: non-uuid run",
            post(&format!("{u}/threads/{tid}/runs/nope/cancel"), "").await,
            422,
        ),
        (
            "cancel: unknown run",
            post(
                &format!("{u}/threads/{tid}/runs/00000000-0000-4000-8000-000000000000/cancel"),
                "",
            )
            .await,
            404,
        ),
        (
            "delete: unknown run",
            answer(
                client()
                    .delete(format!(
                        "{u}/threads/{tid}/runs/00000000-0000-4000-8000-000000000000"
                    ))
                    .send()
                    .await
                    .unwrap(),
            )
            .await,
            404,
        ),
        (
            "ai input",
            post(
                &format!("{u}/threads/{tid}/runs/wait"),
                json!({"assistant_id": "agent", "input": {"messages": [{"type": "ai", "content": "x"}]}})
                    .to_string(),
            )
            .await,
            422,
        ),
        ("unknown route", get(&format!("{u}/nope")).await, 404),
        ("wrong method", get(&format!("{u}/threads/search")).await, 405),
    ];
    for (what, (status, body), want) in cases {
        assert_eq!(status, want, "{what}: {body}");
        assert!(body["detail"].is_string(), "{what}: no detail in {body}");
    }
    let (status, body) = get(&format!("{u}/ok")).await;
    assert_eq!((status, body), (200, json!({"ok": true})));
    assert_eq!(
        model.received_requests().await.unwrap().len(),
        0,
        "no bad run reached the model"
    );
}

/// While a run is in flight on a thread, a second run of that thread is a 409 and deleting the
/// thread is a 409; `/join` writes keep-alive newlines before the result; once the run ends, a new
/// run and the delete work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_runs_one_run_at_a_time() {
    // The first reply takes 6 s: longer than the 5 s between `/join`'s keep-alive newlines.
    let model = MockServer::start().await;
    let slow = reply(json!([{"type": "text", "text": "slow"}]), "end_turn");
    messages()
        .respond_with(slow.set_delay(Duration::from_secs(6)))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&model)
        .await;
    messages()
        .respond_with(reply(json!([{"type": "text", "text": "quick"}]), "end_turn"))
        .mount(&model)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let u = &served.url;
    let (_, thread) = post(&format!("{u}/threads"), "{}").await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let (status, run) = post(&format!("{u}/threads/{tid}/runs"), hi().to_string()).await;
    assert_eq!(status, 200, "{run}");
    let (status, body) = post(&format!("{u}/threads/{tid}/runs/wait"), hi().to_string()).await;
    assert_eq!(status, 409, "{body}");
    let (status, thread) = get(&format!("{u}/threads/{tid}")).await;
    assert_eq!((status, thread["status"].as_str()), (200, Some("busy")));
    assert_eq!(delete(&format!("{u}/threads/{tid}")).await, 409);
    let rid = run["run_id"].as_str().unwrap();
    let joined = client()
        .get(format!("{u}/threads/{tid}/runs/{rid}/join"))
        .send()
        .await
        .unwrap();
    assert_eq!(joined.status().as_u16(), 200);
    let text = joined.text().await.unwrap();
    assert!(
        text.starts_with('\n'),
        "a keep-alive newline while the run went on: {text:?}"
    );
    let result: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(result["messages"][1]["content"], "slow", "{result}");
    let (status, result) = post(&format!("{u}/threads/{tid}/runs/wait"), hi().to_string()).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["messages"].as_array().unwrap().len(), 4, "{result}");
    assert_eq!(delete(&format!("{u}/threads/{tid}")).await, 204);
}

/// Threads, their owners and their messages survive a `kill -9` of the server: a new server on the
/// same state dir shows the thread to its owner (and only to them) and continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_survive_a_restart() {
    let model = always_done().await;
    let dir = tempfile::tempdir().unwrap();
    let keys = "alice ka\nbob kb\n";
    let served = Served::start(dir.path(), &model, Some(keys));
    let u = served.url.clone();
    let c = client();
    let thread: Value = c
        .post(format!("{u}/threads"))
        .header("x-api-key", "ka")
        .json(&json!({"metadata": {"k": "v"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let wait = c
        .post(format!("{u}/threads/{tid}/runs/wait"))
        .bearer_auth("ka")
        .json(&hi())
        .send()
        .await
        .unwrap();
    let (status, result) = answer(wait).await;
    assert_eq!(
        (status, &result["messages"][1]["content"]),
        (200, &json!("done")),
        "{result}"
    );
    served.kill();

    let served = Served::start(dir.path(), &model, Some(keys));
    let u = served.url.clone();
    let got = c
        .get(format!("{u}/threads/{tid}"))
        .header("x-api-key", "ka")
        .send()
        .await
        .unwrap();
    let (status, got) = answer(got).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["metadata"], json!({"k": "v"}));
    assert_eq!(got["status"], "idle");
    assert_eq!(got["values"]["messages"][1]["content"], "done", "{got}");
    let other = c
        .get(format!("{u}/threads/{tid}"))
        .header("x-api-key", "kb")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status().as_u16(), 404, "still Alice's only");
    let wait = c
        .post(format!("{u}/threads/{tid}/runs/wait"))
        .header("x-api-key", "ka")
        .json(&hi())
        .send()
        .await
        .unwrap();
    let (status, result) = answer(wait).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(
        result["messages"].as_array().unwrap().len(),
        4,
        "continued: {result}"
    );
}

/// Run `command` (a `trellis serve` expected to refuse to start) and return its stderr; fail if
/// it exits 0 or is still running (serving) after 30 s.
fn refused(mut command: std::process::Command) -> String {
    use std::io::Read;
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("trellis serve started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    stderr
}

/// Without `--api-keys`, `trellis serve` refuses to listen on a non-loopback address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_keys_means_loopback_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trellis.toml"), super::harness::AGENT_FILE).unwrap();
    let mut command = trellis();
    command
        .current_dir(dir.path())
        .args(["serve", "--listen", "0.0.0.0:0", "--state-dir"])
        .arg(dir.path().join("state"));
    let stderr = refused(command);
    assert!(stderr.contains("loopback"), "{stderr}");
}

/// With `--api-keys`, an agent file that sets `workdir` is refused: every user would share it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_never_share_a_workdir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("work")).unwrap();
    let agent_file = AGENT_FILE.replace("[sandbox]", "workdir = \"work\"\n[sandbox]");
    std::fs::write(dir.path().join("trellis.toml"), agent_file).unwrap();
    std::fs::write(dir.path().join("keys"), "alice ka\n").unwrap();
    let mut command = trellis();
    command
        .current_dir(dir.path())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--agent",
            "trellis.toml",
            "--api-keys",
            "keys",
        ])
        .arg("--state-dir")
        .arg(dir.path().join("state"));
    let stderr = refused(command);
    assert!(stderr.contains("workdir"), "{stderr}");
}

/// A model error ends a streamed run with an `error` event and the thread in status `error`;
/// `/wait` answers 200 with `__error__`, as the reference server does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_reports_error() {
    let model = MockServer::start().await;
    messages()
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({
            "type": "error", "error": {"type": "invalid_request_error", "message": "bad request"}
        })))
        .mount(&model)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let u = &served.url;
    let (_, thread) = post(&format!("{u}/threads"), "{}").await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let (status, result) = post(&format!("{u}/threads/{tid}/runs/wait"), hi().to_string()).await;
    assert_eq!(status, 200);
    assert_eq!(result["__error__"]["error"], "AgentError", "{result}");
    let stream = client()
        .post(format!("{u}/threads/{tid}/runs/stream"))
        .json(&hi())
        .send()
        .await
        .unwrap();
    assert_eq!(
        stream.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let text = stream.text().await.unwrap();
    let events: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert_eq!(events.first(), Some(&"metadata"), "{text}");
    assert_eq!(events.last(), Some(&"error"), "{text}");
    let (_, thread) = get(&format!("{u}/threads/{tid}")).await;
    assert_eq!(thread["status"], "error");
}

/// A run that stops for an approval (the agent file asks before `ls`) ends its stream with the
/// full values plus `__interrupt__` in the shape of LangChain's human-in-the-loop middleware, an
/// `updates` event with the interrupt, and leaves the thread `interrupted`; `trellis resume`
/// continues it; deleting the thread removes its checkpoints and saved run settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_stop_is_an_interrupt() {
    let model = ls_then_streamed_answer().await;
    let dir = tempfile::tempdir().unwrap();
    let agent_file = AGENT_FILE.replace("ask = [\"none\"]", "ask = [\"ls\"]");
    assert_ne!(agent_file, AGENT_FILE);
    let served = Served::with_agent_file(dir.path(), &model, None, &agent_file);
    let u = &served.url;
    let (_, thread) = post(&format!("{u}/threads"), "{}").await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let mut body = hi();
    body["stream_mode"] = json!(["values", "updates"]);
    let text = client()
        .post(format!("{u}/threads/{tid}/runs/stream"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut events: Vec<(String, Value)> = Vec::new();
    let mut name = String::new();
    for line in text.lines() {
        if let Some(event) = line.strip_prefix("event: ") {
            name = event.to_owned();
        } else if let Some(data) = line.strip_prefix("data: ") {
            events.push((name.clone(), serde_json::from_str(data).unwrap()));
        }
    }
    let (last, values) = events.last().unwrap();
    assert_eq!(last, "values", "{text}");
    let interrupt = &values["__interrupt__"][0];
    assert_eq!(interrupt["value"]["action_requests"][0]["name"], "ls", "{values}");
    assert_eq!(
        interrupt["value"]["action_requests"][0]["args"],
        json!({"path": "/"})
    );
    assert_eq!(interrupt["value"]["review_configs"][0]["action_name"], "ls");
    assert!(
        interrupt["value"]["review_configs"][0]["allowed_decisions"]
            .as_array()
            .unwrap()
            .contains(&json!("approve"))
    );
    assert_eq!(interrupt["id"].as_str().unwrap().len(), 32, "{interrupt}");
    assert_eq!(values["messages"][1]["tool_calls"][0]["name"], "ls");
    assert!(
        events
            .iter()
            .any(|(e, d)| e == "updates" && d["__interrupt__"] == values["__interrupt__"]),
        "{text}"
    );
    let (_, thread) = get(&format!("{u}/threads/{tid}")).await;
    assert_eq!(thread["status"], "interrupted", "{thread}");
    let waiting: Vec<&Value> = thread["interrupts"].as_object().unwrap().values().collect();
    assert_eq!(waiting, [&values["__interrupt__"]], "{thread}");
    let (_, state) = get(&format!("{u}/threads/{tid}/state")).await;
    assert_eq!(state["interrupts"], values["__interrupt__"], "{state}");
    assert_eq!(
        state["tasks"][0]["interrupts"], values["__interrupt__"],
        "{state}"
    );
    assert_eq!(state["next"], json!(["tools"]));
    assert_eq!(
        model.received_requests().await.unwrap().len(),
        1,
        "stopped before running ls"
    );
    // `trellis resume` continues the thread from the command line, and the server sees the result.
    let resumed = trellis()
        .current_dir(dir.path())
        .args(["resume", &tid, "--approve", "all", "--state-dir"])
        .arg(dir.path().join("state"))
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", model.uri())
        .output()
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let (_, state) = get(&format!("{u}/threads/{tid}/state")).await;
    let types: Vec<&str> = state["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["human", "ai", "tool", "ai"], "{state}");
    // Deleting the thread removes its saved run settings too.
    let saved = dir.path().join("state").join("runs").join(format!("{tid}.json"));
    assert!(saved.is_file());
    assert_eq!(delete(&format!("{u}/threads/{tid}")).await, 204);
    assert!(!saved.exists(), "{} is left", saved.display());
    let left = walk(&dir.path().join("state").join("threads").join(&tid));
    assert!(
        left.is_empty(),
        "the thread's checkpoints and files are gone: {left:?}"
    );
}

/// The files under `dir` (none when it does not exist).
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.map(Result::unwrap) {
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&entry.path()));
        } else {
            out.push(entry.path());
        }
    }
    out
}

/// `GET /info` says what the server offers (no crons), and `PATCH` with `Prefer: return=minimal`
/// answers 204 with no body yet merges the metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_and_a_minimal_patch() {
    let model = always_done().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let u = &served.url;
    let (status, info) = get(&format!("{u}/info")).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"), "{info}");
    assert_eq!(info["flags"]["crons"], false, "{info}");
    let (_, thread) = post(&format!("{u}/threads"), r#"{"metadata": {"team": "a"}}"#).await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let patched = client()
        .patch(format!("{u}/threads/{tid}"))
        .header("content-type", "application/json")
        .header("prefer", "return=minimal")
        .body(r#"{"metadata": {"topic": "b"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status().as_u16(), 204);
    assert!(patched.text().await.unwrap().is_empty());
    let (status, thread) = get(&format!("{u}/threads/{tid}")).await;
    assert_eq!(status, 200, "{thread}");
    assert_eq!(thread["metadata"]["team"], "a", "{thread}");
    assert_eq!(thread["metadata"]["topic"], "b", "{thread}");
}
