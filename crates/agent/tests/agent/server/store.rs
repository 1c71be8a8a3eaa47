//! `trellis serve --store URL`: threads, checkpoints, thread files and the server's thread records
//! on an object store (S3, on the moto emulator), so a server on another machine — here another
//! process with an empty state dir — serves the same threads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{Value, json};

use super::harness::{AGENT_FILE, Served, always_done, http};
use crate::cli::harness::trellis;
use crate::support::require_env;

/// The S3 emulator's environment for object_store.
pub(crate) fn s3_env(command: &mut std::process::Command, endpoint: &str) {
    command
        .env("AWS_ENDPOINT", endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1");
}

fn serve_on(dir: &Path, state: &str, store: &str, endpoint: &str, model: &wiremock::MockServer) -> Served {
    std::fs::write(dir.join("trellis.toml"), AGENT_FILE).unwrap();
    let mut command = trellis();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--agent"])
        .arg(dir.join("trellis.toml"))
        .arg("--state-dir")
        .arg(dir.join(state))
        .args(["--store", store]);
    s3_env(&mut command, endpoint);
    Served::spawn(command, dir, model)
}

async fn json_of(response: reqwest::Response) -> Value {
    let status = response.status();
    let body = response.text().await.unwrap();
    assert!(status.is_success(), "{status}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// A thread made, run and given a file on one server is there whole on a second server process
/// that shares only the store (its state dir is new); the first server's state dir holds nothing of
/// it. A store that cannot be opened stops the server with an error naming `--store`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_live_on_the_object_store() {
    let [endpoint, bucket] = require_env!("TRELLIS_S3_ENDPOINT", "TRELLIS_TEST_BUCKET");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let store = format!("s3://{bucket}/serve-store-{}-{nanos}", std::process::id());
    let model = always_done().await;
    let dir = tempfile::tempdir().unwrap();
    let c = http();

    let first = serve_on(dir.path(), "state-a", &store, &endpoint, &model);
    let u = first.url.clone();
    let thread = json_of(
        c.post(format!("{u}/threads"))
            .json(&json!({"metadata": {"k": "v"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    json_of(
        c.post(format!("{u}/threads/{tid}/files?path=notes.txt"))
            .body("kept on the store")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let out = json_of(
        c.post(format!("{u}/threads/{tid}/runs/wait"))
            .json(
                &json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    let texts = |values: &Value| -> Vec<String> {
        values["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    assert_eq!(texts(&out).last().map(String::as_str), Some("done"), "{out}");
    let history = json_of(
        c.get(format!("{u}/threads/{tid}/history?limit=100"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    first.kill();
    let local = dir.path().join("state-a");
    assert!(!local.join("threads").exists(), "no checkpoint on local disk");
    assert!(!local.join("server").exists(), "no thread record on local disk");

    let second = serve_on(dir.path(), "state-b", &store, &endpoint, &model);
    let u = second.url.clone();
    let thread = json_of(c.get(format!("{u}/threads/{tid}")).send().await.unwrap()).await;
    assert_eq!(thread["metadata"], json!({"k": "v"}));
    assert_eq!(thread["status"], "idle");
    let state = json_of(c.get(format!("{u}/threads/{tid}/state")).send().await.unwrap()).await;
    assert_eq!(texts(&state["values"]), texts(&out));
    let again = json_of(
        c.get(format!("{u}/threads/{tid}/history?limit=100"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(again, history);
    let file = c
        .get(format!("{u}/threads/{tid}/files?path=/uploads/notes.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(file.status(), 200);
    assert_eq!(file.text().await.unwrap(), "kept on the store");
    drop(second);

    let mut bad = trellis();
    bad.args(["serve", "--listen", "127.0.0.1:0", "--agent"])
        .arg(dir.path().join("trellis.toml"))
        .args(["--store", "nope://x/y"])
        .env("ANTHROPIC_API_KEY", "k");
    let out = bad.output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--store"), "{stderr}");
}
