//! Stateless runs (`POST /runs`, `/runs/stream`, `/runs/wait`) with `--database`: created on one
//! worker, run by whichever claims them, their temporary thread deleted at their end unless
//! `on_completion` is `keep`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::db_harness::{self, parse_sse};
use super::harness::{AGENT_FILE, always_done, first_then, http, json_of};
use crate::cli::harness::reply;
use crate::queue::postgres::test_database as database;

fn body(extra: Value) -> Value {
    let mut body =
        json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hi"}]}});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_runs_work_across_workers_and_clean_up_their_thread() {
    let Some((_db, url)) = database().await else {
        return;
    };
    let model = always_done().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trellis.toml"), AGENT_FILE).unwrap();
    let a = db_harness::worker(dir.path(), &model, &url, &[]);
    let b = db_harness::worker(dir.path(), &model, &url, &[]);
    let client = http();

    // /runs/wait: the run's final values.
    let waited = client
        .post(format!("{}/runs/wait", a.url))
        .json(&body(json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(waited.status(), 200, "{}", a.stderr());
    let values: Value = waited.json().await.unwrap();
    assert!(values.to_string().contains("done"), "{values}");

    // /runs/stream: every event, ending with the answer.
    let streamed = client
        .post(format!("{}/runs/stream", b.url))
        .json(&body(json!({"stream_mode": ["values"]})))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), 200);
    let events = parse_sse(&streamed.text().await.unwrap());
    let last = events.last().expect("events");
    assert_eq!(last.1, "values");
    assert!(last.2.contains("done"), "{last:?}");

    // POST /runs with `keep`, joined on the other worker: its thread stays.
    let kept: Value = json_of(
        client
            .post(format!("{}/runs", b.url))
            .json(&body(json!({"on_completion": "keep"}))),
    )
    .await;
    let (thread, run) = (
        kept["thread_id"].as_str().unwrap(),
        kept["run_id"].as_str().unwrap(),
    );
    let joined: Value = json_of(client.get(format!("{}/threads/{thread}/runs/{run}/join", a.url))).await;
    assert!(joined.to_string().contains("done"), "{joined}");
    let kept_thread = client
        .get(format!("{}/threads/{thread}", a.url))
        .send()
        .await
        .unwrap();
    assert_eq!(kept_thread.status(), 200, "on_completion keep: the thread stays");

    // POST /runs by default: its thread is deleted at its end, seen from either worker.
    let temporary: Value = json_of(client.post(format!("{}/runs", a.url)).json(&body(json!({})))).await;
    let thread = temporary["thread_id"].as_str().unwrap().to_owned();
    let start = Instant::now();
    for on in [&a, &b] {
        loop {
            let got = client
                .get(format!("{}/threads/{thread}", on.url))
                .send()
                .await
                .unwrap();
            if got.status() == 404 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the temporary thread is still there: {}",
                got.status()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A run queued on a stateless run's temporary thread through another worker keeps the thread:
/// it is deleted only when no other run of it is pending or running in the shared queue (before,
/// the worker running the stateless run looked only at its own runs and deleted the thread under
/// the queued run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_queued_on_a_temporary_thread_through_another_worker_keeps_it() {
    let Some((_db, url)) = database().await else {
        return;
    };
    let done = reply(json!([{"type": "text", "text": "done"}]), "end_turn");
    let model = first_then(done.clone().set_delay(Duration::from_secs(2)), done).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trellis.toml"), AGENT_FILE).unwrap();
    let a = db_harness::worker(dir.path(), &model, &url, &["--worker-runs", "1"]);
    let client = http();
    let temporary: Value = json_of(client.post(format!("{}/runs", a.url)).json(&body(json!({})))).await;
    let thread = temporary["thread_id"].as_str().unwrap().to_owned();
    let first = temporary["run_id"].as_str().unwrap().to_owned();
    // B starts only now, so it is A that runs the stateless run; B takes the queued one.
    let b = db_harness::worker(dir.path(), &model, &url, &[]);
    let queued: Value = json_of(
        client
            .post(format!("{}/threads/{thread}/runs", b.url))
            .json(&body(json!({"multitask_strategy": "enqueue"}))),
    )
    .await;
    let second = queued["run_id"].as_str().expect("queued").to_owned();
    let joined: Value = json_of(client.get(format!("{}/threads/{thread}/runs/{first}/join", b.url))).await;
    assert!(joined.to_string().contains("done"), "{joined}");
    let joined: Value = json_of(client.get(format!("{}/threads/{thread}/runs/{second}/join", b.url))).await;
    assert!(joined.to_string().contains("done"), "{joined}");
    let run: Value = json_of(client.get(format!("{}/threads/{thread}/runs/{second}", a.url))).await;
    assert_eq!(run["status"], "success", "{run}\n{}\n{}", a.stderr(), b.stderr());
    let kept = client
        .get(format!("{}/threads/{thread}", a.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        kept.status(),
        200,
        "the thread stays while a run of it is queued: {}",
        a.stderr()
    );
}
