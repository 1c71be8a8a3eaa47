//! Controlling a run from any worker: cancel, the four multitask strategies, and who may reach
//! a run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::super::harness::{Served, answering_after, http};
use super::super::lifecycle::slow_or_quick_after;
use super::support::{
    get, model_called, new_thread, post, say, settled, setup, slow_run, start_run, texts, worker,
};
use crate::queue::postgres::test_database as database;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_sent_to_one_worker_stops_the_run_on_another() {
    let Some((_db, url)) = database().await else {
        return;
    };
    let model = answering_after(Duration::from_secs(60)).await;
    let dir = setup(None);
    // Leases of 30 s: heartbeats come every 10 s, so a stop within the second is the
    // notification's doing.
    let a = worker(dir.path(), &model, &url, false, 30.0);
    let b = worker(dir.path(), &model, &url, false, 30.0);
    let client = http();
    let thread = new_thread(&client, &a, None).await;
    let run = start_run(&client, &a, &thread, "hi", json!({})).await;
    let run = run["run_id"].as_str().unwrap().to_owned();
    model_called(&model, 1).await;
    let running = format!("running run {run}");
    let (holder, other) = if a.stderr().contains(&running) {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert!(holder.stderr().contains(&running), "one worker runs it");

    let start = Instant::now();
    let response = post(
        &client,
        format!("{}/threads/{thread}/runs/{run}/cancel", other.url),
        None,
        json!({}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let ended = settled(&client, holder, &thread, &run, Duration::from_secs(10)).await;
    let took = start.elapsed();
    eprintln!("cancel on one worker to the run interrupted on the other: {took:?}");
    assert_eq!(ended["status"], "interrupted");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(
        texts(&client, other, &thread).await,
        ["hi"],
        "nothing after the cancel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_multitask_strategies_hold_across_workers() {
    let Some((_db, url)) = database().await else {
        return;
    };
    let model = slow_or_quick_after(Duration::from_secs(2)).await;
    let dir = setup(None);
    let a = worker(dir.path(), &model, &url, false, 5.0);
    let b = worker(dir.path(), &model, &url, false, 5.0);
    let client = http();
    let thread = new_thread(&client, &a, None).await;
    let long = Duration::from_secs(30);
    let runs = |on: &Served| format!("{}/threads/{thread}/runs", on.url);

    // reject (the default): B refuses while A's run is in flight, and stores nothing.
    let first = slow_run(&client, &a, &thread).await;
    let refused = post(
        &client,
        runs(&b),
        None,
        json!({"assistant_id": "agent", "input": say("no")}),
    )
    .await;
    assert_eq!(refused.status(), 409);
    // enqueue: waits for the first, then runs after it.
    let queued = start_run(
        &client,
        &b,
        &thread,
        "next",
        json!({"multitask_strategy": "enqueue"}),
    )
    .await;
    assert_eq!(queued["status"], "pending");
    let queued = queued["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        settled(&client, &b, &thread, &first, long).await["status"],
        "success"
    );
    assert_eq!(
        settled(&client, &a, &thread, &queued, long).await["status"],
        "success"
    );
    assert_eq!(
        texts(&client, &b, &thread).await,
        ["slow please", "slow", "next", "quick"],
        "in enqueue order, never interleaved"
    );
    let listed: Value = get(&client, runs(&b), None).await.json().await.unwrap();
    assert_eq!(
        listed.as_array().unwrap().len(),
        2,
        "the refused run was never stored"
    );

    // interrupt: the running run stops (keeping what it saved), the new one runs on.
    let stopped = slow_run(&client, &a, &thread).await;
    let newer = start_run(
        &client,
        &b,
        &thread,
        "instead",
        json!({"multitask_strategy": "interrupt"}),
    )
    .await;
    let newer = newer["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        settled(&client, &b, &thread, &stopped, long).await["status"],
        "interrupted"
    );
    assert_eq!(
        settled(&client, &b, &thread, &newer, long).await["status"],
        "success"
    );
    assert_eq!(
        texts(&client, &a, &thread).await[4..],
        ["slow please", "instead", "quick"]
    );

    // rollback: the running run is undone and forgotten.
    let undone = slow_run(&client, &b, &thread).await;
    let last = start_run(
        &client,
        &a,
        &thread,
        "last",
        json!({"multitask_strategy": "rollback"}),
    )
    .await;
    let last = last["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        settled(&client, &b, &thread, &last, long).await["status"],
        "success"
    );
    let gone = get(&client, format!("{}/threads/{thread}/runs/{undone}", a.url), None).await;
    assert_eq!(gone.status(), 404, "a rolled-back run is forgotten");
    assert_eq!(
        texts(&client, &b, &thread).await[4..],
        ["slow please", "instead", "quick", "last", "quick"],
        "the rolled-back run left nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_cannot_reach_a_run_through_another_worker() {
    let Some((_db, url)) = database().await else {
        return;
    };
    let model = slow_or_quick_after(Duration::from_secs(2)).await;
    let dir = setup(Some("alice key-a\nbob key-b\n"));
    let a = worker(dir.path(), &model, &url, true, 5.0);
    let b = worker(dir.path(), &model, &url, true, 5.0);
    let client = http();
    let (alice, bob) = (Some("key-a"), Some("key-b"));
    let thread = new_thread(&client, &a, alice).await;
    let body = json!({"assistant_id": "agent", "input": say("slow please")});
    let run: Value = post(&client, format!("{}/threads/{thread}/runs", a.url), alice, body)
        .await
        .json()
        .await
        .unwrap();
    let run = run["run_id"].as_str().unwrap();
    let theirs = format!("{}/threads/{thread}/runs/{run}", b.url);

    let seen = get(&client, theirs.clone(), alice).await;
    assert_eq!(seen.status(), 200, "the owner sees it on B");
    for (what, status) in [
        ("get", get(&client, theirs.clone(), bob).await.status()),
        ("join", get(&client, format!("{theirs}/join"), bob).await.status()),
        (
            "stream",
            get(&client, format!("{theirs}/stream"), bob).await.status(),
        ),
        (
            "cancel",
            post(&client, format!("{theirs}/cancel"), bob, json!({}))
                .await
                .status(),
        ),
        (
            "thread",
            get(&client, format!("{}/threads/{thread}", b.url), bob)
                .await
                .status(),
        ),
    ] {
        assert_eq!(status, 404, "{what} by another user");
    }
    // Through a thread of bob's own, alice's run id is no run of his.
    let own = new_thread(&client, &b, bob).await;
    let crossed = get(&client, format!("{}/threads/{own}/runs/{run}", b.url), bob).await;
    assert_eq!(crossed.status(), 404);
    let cancel_many = post(
        &client,
        format!("{}/runs/cancel", b.url),
        bob,
        json!({"thread_id": own, "run_ids": [run]}),
    )
    .await;
    assert_eq!(cancel_many.status(), 404);
    let ended: Value = get(
        &client,
        format!("{}/threads/{thread}/runs/{run}/join", a.url),
        alice,
    )
    .await
    .json()
    .await
    .unwrap();
    assert!(
        ended.to_string().contains("slow"),
        "alice's run was not stopped: {ended}"
    );
}
