//! The run lifecycle through the official Python client: cancel (`interrupt` keeps what the run
//! checkpointed, `rollback` puts the thread back and forgets the run), run delete, the four
//! `multitask_strategy` values, `on_disconnect`, and stateless runs (`on_completion`); plus, over
//! plain HTTP, a cancel that kills the command the run has running in the sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use wiremock::MockServer;

use super::harness::{AGENT_FILE, Served, http, python};
use super::sdk::PRELUDE;
use crate::cli::harness::{messages, reply};
use crate::support::skip_unless_langgraph;

/// Matches a Messages request whose last message is the user's and ends saying `slow please`.
struct LastSaysSlow;

impl wiremock::Match for LastSaysSlow {
    fn matches(&self, request: &wiremock::Request) -> bool {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        // Consecutive user messages arrive as one, with a content block each: the last block counts.
        let Some(last) = body["messages"].as_array().and_then(|m| m.last()) else {
            return false;
        };
        let text = match &last["content"] {
            Value::Array(blocks) => blocks.last().map(|b| b["text"].clone()).unwrap_or(Value::Null),
            other => other.clone(),
        };
        last["role"] == "user" && text.as_str().is_some_and(|t| t.contains("slow please"))
    }
}

/// A mock model that takes 8 s to answer `slow` when the conversation ends with the user's
/// `slow please`, and answers `quick` at once otherwise.
async fn slow_or_quick() -> MockServer {
    slow_or_quick_after(Duration::from_secs(8)).await
}

/// [`slow_or_quick`] taking `delay` to answer `slow`.
pub(crate) async fn slow_or_quick_after(delay: Duration) -> MockServer {
    let server = MockServer::start().await;
    let slow = reply(json!([{"type": "text", "text": "slow"}]), "end_turn");
    messages()
        .and(LastSaysSlow)
        .respond_with(slow.set_delay(delay))
        .with_priority(1)
        .mount(&server)
        .await;
    messages()
        .respond_with(reply(json!([{"type": "text", "text": "quick"}]), "end_turn"))
        .mount(&server)
        .await;
    server
}

/// Helpers for the scripts: a user message, a slow run started in the background and seen
/// running with its input checkpointed, a run's status once it has ended, and the texts of a
/// thread's messages.
const HELPERS: &str = r#"
def say(text):
    return {"messages": [{"role": "user", "content": text}]}

async def running(c, tid, **kwargs):
    """A slow run, once it is running and has checkpointed its input."""
    run = await c.runs.create(tid, "agent", input=say("slow please"), **kwargs)
    for _ in range(200):
        got = await c.runs.get(tid, run["run_id"])
        if got["status"] == "running" and (await texts(c, tid))[-1:] == ["slow please"]:
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"never running: {got}")

async def settled(c, tid, run_id):
    for _ in range(300):
        got = await c.runs.get(tid, run_id)
        if got["status"] not in ("pending", "running"):
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(f"still going: {got}")

async def texts(c, tid):
    state = await c.threads.get_state(tid)
    return [m["content"] for m in (state["values"] or {}).get("messages", [])]
"#;

async fn lifecycle_script(model: MockServer, body: &str) {
    keyed_script(model, None, body).await;
}

/// [`lifecycle_script`] with these API keys (`USER KEY` a line).
async fn keyed_script(model: MockServer, keys: Option<&str>, body: &str) {
    let py = skip_unless_langgraph!();
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, keys);
    let out = python(&py, &served, &format!("{PRELUDE}{HELPERS}{body}")).await;
    assert!(out.starts_with("ok"), "{out}");
}

/// `runs.cancel` with `interrupt` stops a running run: it ends `interrupted`, the thread is `idle`
/// and keeps what the run checkpointed (its input), the next run goes through; with `rollback` the
/// thread is back as it was before the run (state and runs), the run is a 404. A finished run can
/// be deleted (then 404), a running one cannot (409); cancelling a finished run with `interrupt`
/// changes nothing, with `rollback` is a 409. `runs.cancel_many` cancels by ids (all or none)
/// and by status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_with_interrupt_or_rollback_and_delete() {
    lifecycle_script(
        slow_or_quick().await,
        r#"
async def main():
    c = get_client(url=URL, api_key=None)
    tid = (await c.threads.create())["thread_id"]
    run = await running(c, tid)
    await expect_status(409, c.runs.delete(tid, run["run_id"]))
    assert (await c.threads.get(tid))["status"] == "busy"
    await c.runs.cancel(tid, run["run_id"], wait=True, action="interrupt")
    got = await c.runs.get(tid, run["run_id"])
    assert got["status"] == "interrupted", got
    thread = await c.threads.get(tid)
    assert thread["status"] == "idle", thread
    assert await texts(c, tid) == ["slow please"], await texts(c, tid)
    out = await c.runs.wait(tid, "agent", input=say("go on"))
    assert [m["content"] for m in out["messages"]] == ["slow please", "go on", "quick"], out
    # A finished run: cancel (interrupt) changes nothing, rollback is too late; delete forgets it.
    done = (await c.runs.list(tid))[0]
    assert done["status"] == "success", done
    await c.runs.cancel(tid, done["run_id"])
    assert (await c.runs.get(tid, done["run_id"]))["status"] == "success"
    await expect_status(409, c.runs.cancel(tid, done["run_id"], action="rollback"))
    await c.runs.delete(tid, done["run_id"])
    await expect_status(404, c.runs.get(tid, done["run_id"]))
    assert [r["run_id"] for r in await c.runs.list(tid)] == [run["run_id"]]

    # rollback, without waiting: the thread goes back to its state before the run.
    before = await texts(c, tid)
    runs_before = [r["run_id"] for r in await c.runs.list(tid)]
    doomed = await running(c, tid)
    assert await texts(c, tid) == before + ["slow please"]
    await c.runs.cancel(tid, doomed["run_id"], action="rollback")
    for _ in range(100):
        if (await c.threads.get(tid))["status"] != "busy":
            break
        await asyncio.sleep(0.05)
    await expect_status(404, c.runs.get(tid, doomed["run_id"]))
    assert await texts(c, tid) == before, await texts(c, tid)
    assert [r["run_id"] for r in await c.runs.list(tid)] == runs_before
    assert (await c.threads.get(tid))["status"] == "idle"
    # Rolled back on a thread that had no checkpoint: empty again.
    fresh = (await c.threads.create())["thread_id"]
    doomed = await running(c, fresh)
    await c.runs.cancel(fresh, doomed["run_id"], wait=True, action="rollback")
    assert await texts(c, fresh) == [], await texts(c, fresh)
    await expect_status(404, c.runs.cancel(fresh, doomed["run_id"]))

    # Many at once: by ids (a pending one too), then by status.
    tid = (await c.threads.create())["thread_id"]
    first = await running(c, tid)
    queued = await c.runs.create(tid, "agent", input=say("never"), multitask_strategy="enqueue")
    await expect_status(422, c.runs.cancel_many(thread_id=tid, run_ids=[first["run_id"]], status="all"))
    await expect_status(404, c.runs.cancel_many(thread_id=tid, run_ids=[first["run_id"], "00000000-0000-4000-8000-000000000000"]))
    assert (await c.runs.get(tid, first["run_id"]))["status"] == "running", "a 404 cancels nothing"
    await c.runs.cancel_many(thread_id=tid, run_ids=[first["run_id"], queued["run_id"]])
    for run in (first, queued):
        assert (await settled(c, tid, run["run_id"]))["status"] == "interrupted"
    other = (await c.threads.create())["thread_id"]
    run = await running(c, other)
    await c.runs.cancel_many(status="running", action="interrupt")
    assert (await settled(c, other, run["run_id"]))["status"] == "interrupted"
    print("ok")

asyncio.run(main())
"#,
    )
    .await;
}

/// A second run while one is running: `reject` is a 409; `interrupt` cancels the first (which
/// ends `interrupted`, its input kept) and runs; `rollback` cancels the first, drops what it
/// checkpointed and forgets it; `enqueue` waits `pending` and runs after the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_multitask_strategy() {
    lifecycle_script(
        slow_or_quick().await,
        r#"
async def main():
    c = get_client(url=URL, api_key=None)

    tid = (await c.threads.create())["thread_id"]
    first = await running(c, tid)
    await expect_status(409, c.runs.create(tid, "agent", input=say("x"), multitask_strategy="reject"))
    out = await c.runs.wait(tid, "agent", input=say("instead"), multitask_strategy="interrupt")
    assert [m["content"] for m in out["messages"]] == ["slow please", "instead", "quick"], out
    got = await c.runs.get(tid, first["run_id"])
    assert got["status"] == "interrupted", got
    latest = (await c.runs.list(tid))[0]
    assert latest["multitask_strategy"] == "interrupt" and latest["status"] == "success", latest

    tid = (await c.threads.create())["thread_id"]
    await c.runs.wait(tid, "agent", input=say("one"))
    first = await running(c, tid)
    out = await c.runs.wait(tid, "agent", input=say("instead"), multitask_strategy="rollback")
    assert [m["content"] for m in out["messages"]] == ["one", "quick", "instead", "quick"], out
    await expect_status(404, c.runs.get(tid, first["run_id"]))

    tid = (await c.threads.create())["thread_id"]
    first = await running(c, tid)
    queued = await c.runs.create(tid, "agent", input=say("after"), multitask_strategy="enqueue")
    assert (await c.runs.get(tid, queued["run_id"]))["status"] == "pending"
    assert (await c.threads.get(tid))["status"] == "busy"
    out = await c.runs.join(tid, queued["run_id"])
    assert [m["content"] for m in out["messages"]] == ["slow please", "slow", "after", "quick"], out
    for run in (first, queued):
        assert (await c.runs.get(tid, run["run_id"]))["status"] == "success"
    assert (await c.threads.get(tid))["status"] == "idle"

    # A queued run cancelled before its turn never runs.
    tid = (await c.threads.create())["thread_id"]
    first = await running(c, tid)
    queued = await c.runs.create(tid, "agent", input=say("never"), multitask_strategy="enqueue")
    await c.runs.cancel(tid, queued["run_id"], wait=True)
    assert (await c.runs.get(tid, queued["run_id"]))["status"] == "interrupted"
    out = await c.runs.join(tid, first["run_id"])
    assert [m["content"] for m in out["messages"]] == ["slow please", "slow"], out
    print("ok")

asyncio.run(main())
"#,
    )
    .await;
}

/// `on_disconnect: "cancel"`: a streaming client that goes away cancels its run, and so does a
/// waiting one; with the default (`continue`) the run finishes. Stateless runs: `/runs/wait` and `/runs/stream` run on a
/// temporary thread deleted afterwards, kept with `on_completion: "keep"`; a stateless resume is
/// a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_disconnect_and_stateless_runs() {
    lifecycle_script(slow_or_quick().await, r#"
async def leave_after_metadata(c, tid, **kwargs):
    stream = c.runs.stream(tid, "agent", input=say("slow please"), **kwargs)
    async for part in stream:
        assert part.event == "metadata", part
        run_id = part.data["run_id"]
        break
    await stream.aclose()
    return run_id


async def main():
    c = get_client(url=URL, api_key=None)
    tid = (await c.threads.create())["thread_id"]
    run_id = await leave_after_metadata(c, tid, on_disconnect="cancel")
    got = await settled(c, tid, run_id)
    assert got["status"] == "interrupted", got
    run_id = await leave_after_metadata(c, tid)
    got = await settled(c, tid, run_id)
    assert got["status"] == "success", got
    assert (await texts(c, tid))[-1] == "slow", await texts(c, tid)
    # The same for /wait: a client that gives up waiting cancels the run it asked to.
    try:
        await asyncio.wait_for(c.runs.wait(tid, "agent", input=say("slow please"), on_disconnect="cancel"), 1)
        raise AssertionError("the slow run answered within 1 s")
    except asyncio.TimeoutError:
        pass
    got = await settled(c, tid, (await c.runs.list(tid))[0]["run_id"])
    assert got["status"] == "interrupted", got

    assert await c.threads.search() != []
    mine = {t["thread_id"] for t in await c.threads.search(limit=100)}
    out = await c.runs.wait(None, "agent", input=say("hi"))
    assert [m["content"] for m in out["messages"]] == ["hi", "quick"], out
    events = [p.event async for p in c.runs.stream(None, "agent", input=say("hi"), stream_mode="values")]
    assert events[0] == "metadata" and events[-1] == "values", events
    assert {t["thread_id"] for t in await c.threads.search(limit=100)} == mine, "temporary threads are deleted"
    out = await c.runs.wait(None, "agent", input=say("keep me"), on_completion="keep")
    kept = [t for t in await c.threads.search(limit=100) if t["thread_id"] not in mine]
    assert len(kept) == 1 and kept[0]["values"]["messages"][-1]["content"] == "quick", kept
    await expect_status(400, c.runs.wait(None, "agent", command={"resume": {"decisions": []}}))
    await expect_status(422, c.runs.wait(None, "agent", input=say("x"), on_completion="later"))
    print("ok")

asyncio.run(main())
"#).await;
}

/// A user can neither see nor stop another user's runs: with Bob's run going, Alice's cancel,
/// join, get, delete and wait on Bob's thread are 404, her `cancel_many(status="all")` leaves
/// Bob's run alone, and Bob's run finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_cannot_stop_each_others_runs() {
    keyed_script(
        slow_or_quick().await,
        Some("alice ka\nbob kb\n"),
        r#"
async def main():
    alice = get_client(url=URL, api_key="ka")
    bob = get_client(url=URL, api_key="kb")
    tid = (await bob.threads.create())["thread_id"]
    run = await running(bob, tid)
    rid = run["run_id"]
    await expect_status(404, alice.runs.cancel(tid, rid))
    await expect_status(404, alice.runs.cancel(tid, rid, action="rollback"))
    await expect_status(404, alice.runs.cancel_many(thread_id=tid, run_ids=[rid]))
    await expect_status(404, alice.runs.get(tid, rid))
    await expect_status(404, alice.runs.delete(tid, rid))
    await expect_status(404, alice.runs.wait(tid, "agent", input=say("x"), multitask_strategy="interrupt"))
    await alice.runs.cancel_many(status="all")
    assert (await bob.runs.get(tid, rid))["status"] == "running"
    assert (await settled(bob, tid, rid))["status"] == "success"
    print("ok")

asyncio.run(main())
"#,
    )
    .await;
}

/// True while a process of this machine runs `sleep 4242` (the command the model starts).
fn sleeping() -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|entry| std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmd| cmd == b"sleep\x004242\x00"))
}

/// Cancelling a run while its command runs in the bubblewrap sandbox kills the command: the
/// `sleep 4242` the model started is gone within seconds, the run is `interrupted`, and the
/// thread keeps the step before the command (the call, no result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_the_sandboxed_command() {
    if trellis_agent::cli::sandbox::select(Some(trellis_agent::cli::sandbox::SandboxChoice::Bwrap)).is_err() {
        assert_ne!(
            std::env::var("TRELLIS_SANDBOX").as_deref(),
            Ok("required"),
            "bubblewrap unavailable but TRELLIS_SANDBOX=required"
        );
        eprintln!("skipped: no bubblewrap");
        return;
    }
    assert!(!sleeping(), "a sleep 4242 is already running");
    let model = MockServer::start().await;
    let call = json!([{"type": "tool_use", "id": "toolu_sleep", "name": "execute", "input": {"command": "sleep 4242"}}]);
    messages()
        .respond_with(reply(call, "tool_use"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&model)
        .await;
    messages()
        .respond_with(reply(json!([{"type": "text", "text": "done"}]), "end_turn"))
        .mount(&model)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let agent_file = AGENT_FILE.replace("kind = \"none\"", "kind = \"bwrap\"");
    let served = Served::with_agent_file(dir.path(), &model, None, &agent_file);
    let u = &served.url;
    let client = http();
    let json_of = |r: reqwest::Response| async move { r.json::<Value>().await.unwrap() };
    let thread = json_of(
        client
            .post(format!("{u}/threads"))
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let body =
        json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "sleep"}]}});
    let run = json_of(
        client
            .post(format!("{u}/threads/{tid}/runs"))
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    let rid = run["run_id"].as_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    while !sleeping() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the command never started:\n{}",
            served.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancelled = client
        .post(format!(
            "{u}/threads/{tid}/runs/{rid}/cancel?wait=1&action=interrupt"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status().as_u16(), 200);
    let result: Value = serde_json::from_str(&cancelled.text().await.unwrap()).unwrap();
    let stopped = std::time::Instant::now();
    while sleeping() {
        assert!(
            stopped.elapsed() < Duration::from_secs(10),
            "sleep 4242 outlived the cancel"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let run = json_of(
        client
            .get(format!("{u}/threads/{tid}/runs/{rid}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(run["status"], "interrupted", "{run}");
    let types: Vec<&str> = result["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["human", "ai"],
        "the call is kept, it has no result: {result}"
    );
    let thread = json_of(client.get(format!("{u}/threads/{tid}")).send().await.unwrap()).await;
    assert_eq!(thread["status"], "idle", "{thread}");
}

/// What a `kill -9` leaves of the run lifecycle: a thread whose run was running (and another
/// queued behind it) comes back `idle` with the input the run had checkpointed, no run record
/// (both 404, an empty list), and takes a new run that continues from that checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_mid_run_leaves_the_thread_idle_with_its_checkpoints() {
    let model = slow_or_quick().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let u = served.url.clone();
    let c = http();
    let send = |r: reqwest::RequestBuilder| async move {
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().await.unwrap_or(Value::Null))
    };
    let say = |text: &str, strategy: &str| {
        json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": text}]},
               "multitask_strategy": strategy})
    };
    let (_, thread) = send(c.post(format!("{u}/threads")).json(&json!({}))).await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let (status, first) = send(
        c.post(format!("{u}/threads/{tid}/runs"))
            .json(&say("slow please", "reject")),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let (status, queued) = send(
        c.post(format!("{u}/threads/{tid}/runs"))
            .json(&say("after", "enqueue")),
    )
    .await;
    assert_eq!(status, 200, "{queued}");
    let texts = |state: &Value| -> Vec<String> {
        state["values"]["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .map(|m| m["content"].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let started = std::time::Instant::now();
    loop {
        let (_, state) = send(c.get(format!("{u}/threads/{tid}/state"))).await;
        if texts(&state) == ["slow please"] {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never checkpointed: {state}\nruns: {}",
            send(c.get(format!("{u}/threads/{tid}/runs"))).await.1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, busy) = send(c.get(format!("{u}/threads/{tid}"))).await;
    assert_eq!(busy["status"], "busy");
    served.kill();

    let served = Served::start(dir.path(), &model, None);
    let u = served.url.clone();
    let (_, thread) = send(c.get(format!("{u}/threads/{tid}"))).await;
    assert_eq!(thread["status"], "idle", "{thread}");
    for run in [&first, &queued] {
        let rid = run["run_id"].as_str().unwrap();
        let (status, _) = send(c.get(format!("{u}/threads/{tid}/runs/{rid}"))).await;
        assert_eq!(status, 404);
    }
    let (_, runs) = send(c.get(format!("{u}/threads/{tid}/runs"))).await;
    assert_eq!(runs, json!([]));
    let (status, result) = send(
        c.post(format!("{u}/threads/{tid}/runs/wait"))
            .json(&say("again", "reject")),
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(
        texts(&json!({"values": result})),
        ["slow please", "again", "quick"],
        "continued from the checkpoint"
    );
}
