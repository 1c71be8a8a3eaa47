//! Followers of a shared run (`trellis serve --database`) are woken by notifications, not by
//! polling: every worker here reads the database again only once an hour
//! (`--follow-poll-seconds 3600`) unless woken, so a stream, `/join` or `/wait` that ends at all
//! within the test ended because a notification (`LISTEN/NOTIFY` from the worker holding the
//! run, or its in-process wake-up) woke it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::MockServer;

use super::db_harness::{self, assert_numbered_from, parse_sse};
use super::harness::{AGENT_FILE, Served, http, json_of, ls_then_streamed_answer_after};
use crate::queue::postgres::test_database as database;

/// Well below the fallback poll: a follower still waiting by then was never woken.
const LIMIT: Duration = Duration::from_secs(120);

/// A worker whose followers poll once an hour.
fn worker(dir: &Path, model: &MockServer, url: &str) -> Served {
    db_harness::worker(
        dir,
        model,
        url,
        &["--lease-seconds", "5", "--follow-poll-seconds", "3600"],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_on_every_worker_are_woken_without_polling() {
    let Some((_db, url)) = database().await else {
        return;
    };
    // One `ls` step, then an answer that takes a second: the followers below join before the
    // run's first event and wait for each of the others.
    let model = ls_then_streamed_answer_after(Duration::from_millis(500), Duration::from_millis(1000)).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trellis.toml"), AGENT_FILE).unwrap();
    let a = worker(dir.path(), &model, &url);
    let b = worker(dir.path(), &model, &url);
    let client = http();
    let thread: Value = json_of(client.post(format!("{}/threads", a.url)).json(&json!({}))).await;
    let thread = thread["thread_id"].as_str().unwrap().to_owned();
    let run: Value = client
        .post(format!("{}/threads/{thread}/runs", a.url))
        .json(&json!({
            "assistant_id": "agent", "stream_resumable": true,
            "input": {"messages": [{"role": "user", "content": "hi"}]},
            "stream_mode": ["values", "updates", "messages-tuple"],
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = run["run_id"].as_str().unwrap().to_owned();

    let stream = |on: &Served| {
        let (client, url) = (
            client.clone(),
            format!("{}/threads/{thread}/runs/{run}/stream", on.url),
        );
        async move {
            // From the start (`-1`): the metadata event 0, then every part.
            let response = client
                .get(url)
                .header("last-event-id", "-1")
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            parse_sse(&response.text().await.unwrap())
        }
    };
    let join = |on: &Served| {
        let (client, url) = (
            client.clone(),
            format!("{}/threads/{thread}/runs/{run}/join", on.url),
        );
        async move {
            let response = client.get(url).send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    let everything = async { tokio::join!(stream(&a), stream(&b), join(&a), join(&b)) };
    let (on_a, on_b, joined_a, joined_b) = tokio::time::timeout(LIMIT, everything)
        .await
        .expect("every follower was woken (the fallback poll is an hour)");

    // One worker ran it; the followers on the other were woken through PostgreSQL.
    let running = format!("running run {run}");
    let holders = [&a, &b].iter().filter(|w| w.stderr().contains(&running)).count();
    assert_eq!(holders, 1, "one worker ran the run");
    assert_numbered_from(&on_a, 0);
    assert!(on_a.len() > 5, "a step, deltas and values: {on_a:?}");
    assert_eq!(on_a, on_b, "the same events on both workers");
    let last = on_a.iter().rev().find(|(_, e, _)| e == "values").unwrap();
    assert!(last.2.contains("Streamed answer."), "{last:?}");
    assert_eq!(joined_a, joined_b, "the same result on both workers");
    assert!(joined_a.to_string().contains("Streamed answer."), "{joined_a}");

    // `/wait` on each worker: a new run whose end wakes the waiter wherever it ran.
    for on in [&a, &b] {
        let waited = tokio::time::timeout(
            LIMIT,
            client
                .post(format!("{}/threads/{thread}/runs/wait", on.url))
                .json(&json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "again"}]}}))
                .send(),
        )
        .await
        .expect("the waiter was woken")
        .unwrap();
        assert_eq!(waited.status(), 200);
        let body: Value = waited.json().await.unwrap();
        assert!(body.to_string().contains("Streamed answer."), "{body}");
    }
}
