//! Many `trellis serve` workers sharing runs (`--database`): real `trellis serve` processes
//! sharing one PostgreSQL database (a fresh one per test on the cluster `TRELLIS_DATABASE_URL`
//! names; `cargo xtask test` starts it, and without it these tests skip — or fail under
//! `TRELLIS_EMULATORS=required`) and one state dir, against a mock model, over plain HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

use super::harness::{AGENT_FILE, Served, first_then, http};
use super::lifecycle::slow_or_quick_after;
use crate::cli::harness::{messages, reply, trellis};
use crate::cli::streaming::EVENTS as STREAMED;
use crate::queue::postgres::test_database as database;

/// One `trellis serve --database URL` worker in `dir` (agent file and state dir shared by every
/// worker of the test), with leases of `lease` seconds.
fn worker(dir: &Path, model: &MockServer, url: &str, keys: bool, lease: f64) -> Served {
    let mut command = trellis();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--agent"])
        .arg(dir.join("trellis.toml"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--database", url, "--lease-seconds", &lease.to_string()]);
    if keys {
        command.arg("--api-keys").arg(dir.join("keys"));
    }
    // Which worker runs which run: the tests read it from the workers' log.
    command.env("RUST_LOG", "warn,trellis_agent::server::workers=info");
    Served::spawn(command, dir, model)
}

fn setup(keys: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trellis.toml"), AGENT_FILE).unwrap();
    if let Some(keys) = keys {
        std::fs::write(dir.path().join("keys"), keys).unwrap();
    }
    dir
}

fn say(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

/// One server-sent event: id, event name, data.
type Sse = (Option<String>, String, String);

fn parse_sse(body: &str) -> Vec<Sse> {
    body.split("\n\n")
        .filter_map(|block| {
            let (mut id, mut event, mut data) = (None, None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("event:") {
                    event = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            event.map(|e| (id, e, data))
        })
        .collect()
}

/// The ids of `events` are 0, 1, 2, … with no gap and no duplicate.
fn assert_numbered(events: &[Sse]) {
    let ids: Vec<usize> = events
        .iter()
        .map(|(id, ..)| id.as_deref().expect("an event id").parse().unwrap())
        .collect();
    assert_eq!(
        ids,
        (0..ids.len()).collect::<Vec<_>>(),
        "ids with no gap or duplicate"
    );
}

async fn post(client: &reqwest::Client, url: String, key: Option<&str>, body: Value) -> reqwest::Response {
    let mut request = client.post(url).json(&body);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    request.send().await.unwrap()
}

async fn get(client: &reqwest::Client, url: String, key: Option<&str>) -> reqwest::Response {
    let mut request = client.get(url);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    request.send().await.unwrap()
}

async fn new_thread(client: &reqwest::Client, on: &Served, key: Option<&str>) -> String {
    let thread: Value = post(client, format!("{}/threads", on.url), key, json!({}))
        .await
        .json()
        .await
        .unwrap();
    thread["thread_id"].as_str().unwrap().to_owned()
}

/// Start a background run of `text` on `thread` through `on`; its record.
async fn start_run(client: &reqwest::Client, on: &Served, thread: &str, text: &str, extra: Value) -> Value {
    let mut body = json!({"assistant_id": "agent", "input": say(text)});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    let response = post(client, format!("{}/threads/{thread}/runs", on.url), None, body).await;
    assert_eq!(response.status(), 200, "{}", on.stderr());
    response.json().await.unwrap()
}

/// The run once it is no longer pending or running (asked of `on`), within `limit`.
async fn settled(client: &reqwest::Client, on: &Served, thread: &str, run: &str, limit: Duration) -> Value {
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
async fn texts(client: &reqwest::Client, on: &Served, thread: &str) -> Vec<String> {
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
async fn model_called(model: &MockServer, n: usize) {
    for _ in 0..600 {
        if model.received_requests().await.unwrap_or_default().len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the model was not called {n} times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_created_on_one_worker_streams_on_two_others_in_order() {
    let Some((_db, url)) = database().await else {
        return;
    };
    // One `ls` step, then an answer that takes 1.5 s: the joins below come while it runs.
    let ls = json!([{"type": "tool_use", "id": "toolu_ls", "name": "ls", "input": {"path": "/"}}]);
    let answer = ResponseTemplate::new(200)
        .set_body_string(STREAMED)
        .insert_header("content-type", "text/event-stream")
        .set_delay(Duration::from_millis(1500));
    let model = first_then(reply(ls, "tool_use"), answer).await;
    let dir = setup(None);
    let a = worker(dir.path(), &model, &url, false, 5.0);
    let b = worker(dir.path(), &model, &url, false, 5.0);
    let c = worker(dir.path(), &model, &url, false, 5.0);
    let client = http();
    let thread = new_thread(&client, &a, None).await;

    let body = json!({
        "assistant_id": "agent", "input": say("hi"), "stream_resumable": true,
        "stream_mode": ["values", "updates", "messages-tuple"],
    });
    let response = post(
        &client,
        format!("{}/threads/{thread}/runs/stream", a.url),
        None,
        body,
    )
    .await;
    assert_eq!(response.status(), 200);
    let location = response.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_owned();
    let run = location.rsplit('/').next().unwrap().to_owned();
    let on_a = tokio::spawn(async move { response.text().await.unwrap() });

    tokio::time::sleep(Duration::from_millis(300)).await;
    let join = |on: &Served, last: &'static str| {
        let (client, url) = (
            client.clone(),
            format!("{}/threads/{thread}/runs/{run}/stream", on.url),
        );
        async move {
            let response = client
                .get(url)
                .header("last-event-id", last)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            response.text().await.unwrap()
        }
    };
    let (whole, after_two) = tokio::join!(join(&b, "-1"), join(&c, "2"));
    let on_a = parse_sse(&on_a.await.unwrap());
    let (whole, after_two) = (parse_sse(&whole), parse_sse(&after_two));

    assert_numbered(&on_a);
    assert!(on_a.len() > 5, "a step, deltas and values: {on_a:?}");
    assert_eq!(
        whole, on_a,
        "joined on B from the start: the same events as A's stream"
    );
    assert_eq!(
        after_two,
        on_a[3..],
        "joined on C after event 2: exactly the rest"
    );
    let last_values = on_a.iter().rev().find(|(_, e, _)| e == "values").unwrap();
    assert!(last_values.2.contains("Streamed answer."), "{last_values:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_sent_to_one_worker_stops_the_run_on_another() {
    let Some((_db, url)) = database().await else {
        return;
    };
    let model = MockServer::start().await;
    messages()
        .respond_with(
            reply(json!([{"type": "text", "text": "late"}]), "end_turn").set_delay(Duration::from_secs(60)),
        )
        .mount(&model)
        .await;
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

/// Worker A in a fresh state dir whose model answers `first` (after `delay`) to the first call
/// and `then` at once to later ones, with leases of `lease` s, running a resumable run of `hi`
/// (every mode) on a new thread, caught inside its first model call.
struct MidCall {
    dir: tempfile::TempDir,
    model: MockServer,
    a: Served,
    client: reqwest::Client,
    thread: String,
    run: String,
}

async fn mid_call(url: &str, (first, delay): (&str, Duration), then: &str, lease: f64) -> MidCall {
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
async fn replay(client: &reqwest::Client, on: &Served, thread: &str, run: &str) -> String {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_model_call_is_taken_over() {
    let Some((_db, url)) = database().await else {
        return;
    };
    // The first call never answers in time; later calls answer at once.
    let MidCall {
        dir,
        model,
        a,
        client,
        thread,
        run,
    } = mid_call(&url, ("never", Duration::from_secs(120)), "done", 2.0).await;
    let b = worker(dir.path(), &model, &url, false, 2.0);
    let killed = Instant::now();
    a.kill();

    let ended = settled(&client, &b, &thread, &run, Duration::from_secs(60)).await;
    eprintln!(
        "kill -9 to the run finished on the other worker: {:?}",
        killed.elapsed()
    );
    assert_eq!(ended["status"], "success", "{}", b.stderr());
    assert_eq!(ended["attempt"], 2);
    assert!(
        b.stderr()
            .contains(&format!("running run {run} of thread {thread} (attempt 2)"))
    );
    assert_eq!(model.received_requests().await.unwrap().len(), 2);
    assert_eq!(texts(&client, &b, &thread).await, ["hi", "done"], "no step twice");
    let history: Value = post(
        &client,
        format!("{}/threads/{thread}/history", b.url),
        None,
        json!({"limit": 100}),
    )
    .await
    .json()
    .await
    .unwrap();
    let steps: Vec<Value> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["metadata"]["step"].clone())
        .collect();
    let mut unique = steps.clone();
    unique.dedup();
    assert_eq!(steps, unique, "each step checkpointed once: {steps:?}");

    let replay = replay(&client, &b, &thread, &run).await;
    let events = parse_sse(&replay);
    assert_numbered(&events);
    let last = events.last().unwrap();
    assert_eq!(last.1, "values");
    assert!(last.2.contains("done") && !last.2.contains("never"), "{last:?}");
}

/// A slow run started on `on`, once a worker runs it and has checkpointed its input.
async fn slow_run(client: &reqwest::Client, on: &Served, thread: &str) -> String {
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

/// Send `signal` (`STOP`, `CONT`, `TERM`) to `served`.
fn signal(served: &Served, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(served.pid().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

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
