//! A worker that stops running a run: frozen past its lease, or asked to drain with SIGTERM;
//! another worker finishes the run and the stopped one commits nothing. (Killed: `kill_points.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::{
    MidCall, assert_numbered, get, mid_call, parse_sse, replay, settled, signal, texts, worker,
};
use crate::queue::postgres::test_database as database;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_frozen_past_its_lease_commits_nothing_when_it_wakes() {
    let Some((_db, url)) = database().await else {
        return;
    };
    // A's call answers after 3 s, while A is frozen; B's answers at once.
    let MidCall {
        dir,
        model,
        a,
        client,
        thread,
        run,
    } = mid_call(&url, ("from A", Duration::from_secs(3)), "from B", 1.0).await;
    signal(&a, "STOP");
    let b = worker(dir.path(), &model, &url, false, 1.0);
    let ended = settled(&client, &b, &thread, &run, Duration::from_secs(60)).await;
    assert_eq!(
        (ended["status"].as_str(), ended["attempt"].as_u64()),
        (Some("success"), Some(2))
    );

    // A wakes with its model's answer in hand, long past its lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    signal(&a, "CONT");
    for _ in 0..100 {
        if a.stderr().contains("lost the lease") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        a.stderr().contains(&format!("lost the lease of run {run}")),
        "{}",
        a.stderr()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        texts(&client, &a, &thread).await,
        ["hi", "from B"],
        "A committed nothing"
    );
    let record: Value = get(&client, format!("{}/threads/{thread}", a.url), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(record["status"], "idle", "A did not mark the thread");
    let after: Value = get(&client, format!("{}/threads/{thread}/runs/{run}", a.url), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (after["status"].as_str(), after["attempt"].as_u64()),
        (Some("success"), Some(2))
    );
    let replay = replay(&client, &a, &thread, &run).await;
    let events = parse_sse(&replay);
    assert_numbered(&events);
    assert!(
        !replay.contains("from A"),
        "no event of A's after it lost the run"
    );
    // What stopped A: on waking, its overdue heartbeat and its model's answer race. Either its
    // heartbeat finds the lease lost and stops the run before it saves, or its step's checkpoint
    // save fails on the thread head's version (B saved after it); nothing is committed either way
    // (asserted above).
    let log = a.stderr();
    assert!(
        log.contains("ended after losing its lease, storing nothing"),
        "{log}"
    );
    let fence = if log.contains("another writer saved it first") {
        "the checkpoint head's version check"
    } else {
        "the heartbeat, before any save"
    };
    eprintln!("the frozen worker was stopped by {fence}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_an_unfinished_run_back() {
    let Some((_db, url)) = database().await else {
        return;
    };
    // Leases of 30 s: a run finished well before that was handed back, not reaped.
    let MidCall {
        dir,
        model,
        a,
        client,
        thread,
        run,
    } = mid_call(&url, ("never", Duration::from_secs(120)), "done", 30.0).await;
    let b = worker(dir.path(), &model, &url, false, 30.0);
    let asked = Instant::now();
    signal(&a, "TERM");
    let ended = settled(&client, &b, &thread, &run, Duration::from_secs(25)).await;
    eprintln!(
        "SIGTERM to the run finished on the other worker: {:?}",
        asked.elapsed()
    );
    assert_eq!(
        (ended["status"].as_str(), ended["attempt"].as_u64()),
        (Some("success"), Some(2))
    );
    assert!(
        asked.elapsed() < Duration::from_secs(25),
        "before the lease could expire"
    );
    assert!(
        a.stderr().contains(&format!("handed run {run} back")),
        "{}",
        a.stderr()
    );
    assert_eq!(texts(&client, &b, &thread).await, ["hi", "done"]);
}
