//! With `--database`: `POST /runs/cancel` by `status` and the 32-runs cap of a thread's queue,
//! across two `trellis serve` workers sharing one database, with two users.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::MockServer;

use super::db_harness;
use super::harness::{AGENT_FILE, Served, answering_after, http};
use crate::queue::postgres::test_database as database;

fn worker(dir: &Path, model: &MockServer, url: &str) -> Served {
    let keys = dir.join("keys");
    db_harness::worker(dir, model, url, &["--api-keys", keys.to_str().unwrap()])
}

/// A request as `key`'s user.
async fn call(request: reqwest::RequestBuilder, key: &str) -> reqwest::Response {
    request.header("x-api-key", key).send().await.unwrap()
}

async fn thread(client: &reqwest::Client, on: &Served, key: &str) -> String {
    let made: Value = call(client.post(format!("{}/threads", on.url)).json(&json!({})), key)
        .await
        .json()
        .await
        .unwrap();
    made["thread_id"].as_str().unwrap().to_owned()
}

/// Enqueue a run on `thread`; the response.
async fn start(client: &reqwest::Client, on: &Served, key: &str, thread: &str) -> reqwest::Response {
    let body = json!({"assistant_id": "agent", "multitask_strategy": "enqueue",
                      "input": {"messages": [{"role": "user", "content": "hi"}]}});
    call(
        client
            .post(format!("{}/threads/{thread}/runs", on.url))
            .json(&body),
        key,
    )
    .await
}

async fn run_id(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 200);
    let run: Value = response.json().await.unwrap();
    run["run_id"].as_str().unwrap().to_owned()
}

async fn status(client: &reqwest::Client, on: &Served, key: &str, thread: &str, run: &str) -> String {
    let got: Value = call(client.get(format!("{}/threads/{thread}/runs/{run}", on.url)), key)
        .await
        .json()
        .await
        .unwrap();
    got["status"].as_str().unwrap_or_default().to_owned()
}

/// Until the run reads `want` (asked of `on`), within a minute.
async fn until(client: &reqwest::Client, on: &Served, key: &str, thread: &str, run: &str, want: &str) {
    let start = Instant::now();
    loop {
        let now = status(client, on, key, thread, run).await;
        if now == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "run {run} still {now}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_by_status_and_the_thread_cap_hold_across_workers() {
    let Some((_db, url)) = database().await else {
        return;
    };
    // A model that takes a minute: runs stay running until cancelled.
    let model = answering_after(Duration::from_secs(60)).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trellis.toml"), AGENT_FILE).unwrap();
    std::fs::write(dir.path().join("keys"), "alice key-a\nbob key-b\n").unwrap();
    let (a, b) = (worker(dir.path(), &model, &url), worker(dir.path(), &model, &url));
    let client = http();
    let (alice, bob) = ("key-a", "key-b");

    // Alice: one run running and one pending behind it; Bob: one running.
    let hers = thread(&client, &a, alice).await;
    let first = run_id(start(&client, &a, alice, &hers).await).await;
    let second = run_id(start(&client, &b, alice, &hers).await).await;
    let his = thread(&client, &b, bob).await;
    let bobs = run_id(start(&client, &a, bob, &his).await).await;
    until(&client, &a, alice, &hers, &first, "running").await;
    until(&client, &b, bob, &his, &bobs, "running").await;
    assert_eq!(status(&client, &b, alice, &hers, &second).await, "pending");

    // The cap: a thread of Alice's with 32 active runs refuses the 33rd, on either worker.
    let full = thread(&client, &b, alice).await;
    let mut queued = Vec::new();
    for n in 0..32 {
        let on = if n % 2 == 0 { &a } else { &b };
        queued.push(run_id(start(&client, on, alice, &full).await).await);
    }
    until(&client, &a, alice, &full, &queued[0], "running").await;
    let refused = start(&client, &a, alice, &full).await;
    assert_eq!(refused.status(), 409, "the 33rd active run of a thread");
    let detail: Value = refused.json().await.unwrap();
    assert!(
        detail["detail"].as_str().unwrap().contains("32 runs waiting"),
        "{detail}"
    );
    assert_eq!(start(&client, &b, alice, &full).await.status(), 409);

    // Cancel by status, on the worker that holds none of them or either: Alice's pending runs.
    let cancelled = call(
        client
            .post(format!("{}/runs/cancel", b.url))
            .json(&json!({"status": "pending"})),
        alice,
    )
    .await;
    assert_eq!(cancelled.status(), 204);
    assert_eq!(status(&client, &a, alice, &hers, &second).await, "interrupted");
    assert_eq!(
        status(&client, &a, alice, &hers, &first).await,
        "running",
        "not pending"
    );
    let fulls: Value = call(
        client.get(format!("{}/threads/{full}/runs?limit=40", a.url)),
        alice,
    )
    .await
    .json()
    .await
    .unwrap();
    let fulls = fulls.as_array().unwrap();
    assert_eq!(fulls.len(), 32);
    assert_eq!(
        fulls.iter().filter(|r| r["status"] == "interrupted").count(),
        31,
        "every pending run of the full thread; its running one stays: {fulls:?}"
    );

    // Then all of Alice's: her running runs stop; Bob's run is not hers and runs on.
    let cancelled = call(
        client
            .post(format!("{}/runs/cancel", a.url))
            .json(&json!({"status": "all"})),
        alice,
    )
    .await;
    assert_eq!(cancelled.status(), 204);
    until(&client, &b, alice, &hers, &first, "interrupted").await;
    assert_eq!(
        status(&client, &a, bob, &his, &bobs).await,
        "running",
        "another user's run"
    );
    // The full thread has room again.
    run_id(start(&client, &a, alice, &full).await).await;
}
