//! `trellis serve` driven by the official Python client, `langgraph_sdk.get_client`: streaming
//! with several modes, wait, background runs, thread search / get / state / delete, and two users
//! who cannot see each other's threads. Each test's Python script asserts what the client sees and
//! exits non-zero on the first mismatch.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use wiremock::MockServer;

use super::harness::{Served, always_done, ls_then_streamed_answer, python};
use crate::support::skip_unless_langgraph;

/// Helpers every script starts with: the HTTP status of an SDK error.
pub(crate) const PRELUDE: &str = r#"
import asyncio, json, os, sys
from langgraph_sdk import get_client

URL = os.environ["URL"]

def status_of(e):
    response = getattr(e, "response", None)
    return getattr(response, "status_code", None) or getattr(e, "status_code", None)

async def expect_status(code, coro):
    try:
        await coro
    except Exception as e:
        assert status_of(e) == code, f"expected {code}, got {status_of(e)}: {e!r}"
        return
    raise AssertionError(f"expected HTTP {code}, the call succeeded")
"#;

/// Start `trellis serve` on `model` (with these keys), run `PRELUDE` + `body` with `py`; its
/// stdout, which must start with `ok`.
pub(super) async fn script(py: &str, model: MockServer, keys: Option<&str>, body: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, keys);
    let out = python(py, &served, &format!("{PRELUDE}{body}")).await;
    assert!(out.starts_with("ok"), "{out}");
    out
}

/// One streamed run with `values`, `updates` and `messages-tuple`: `metadata` comes first, the
/// model's streamed text arrives as `messages` chunks whose id is the final AI message's id, the
/// `ls` step shows up as `updates` from `model` then `tools`, and the last event is the final
/// `values` with human, ai (tool call), tool and ai messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_with_values_updates_and_messages_tuple() {
    let py = skip_unless_langgraph!();
    let out = script(&py, ls_then_streamed_answer().await, None, r#"
async def main():
    c = get_client(url=URL, api_key=None)
    assistants = await c.assistants.search(graph_id="agent")
    assert [a["graph_id"] for a in assistants] == ["agent"], assistants
    t = await c.threads.create(metadata={"topic": "files"})
    events, chunks, updates = [], {}, []
    async for part in c.runs.stream(t["thread_id"], "agent",
                                    input={"messages": [{"role": "user", "content": "list files", "id": "human-1"}]},
                                    stream_mode=["values", "updates", "messages-tuple"]):
        assert part.event != "error", part.data
        events.append(part.event)
        if part.event == "metadata":
            assert "run_id" in part.data, part.data
        if part.event == "messages":
            chunk, meta = part.data
            assert meta["langgraph_node"] in ("model", "tools"), meta
            if chunk["type"] == "AIMessageChunk" and isinstance(chunk["content"], str):
                chunks[chunk["id"]] = chunks.get(chunk["id"], "") + chunk["content"]
        if part.event == "updates":
            updates.append(list(part.data.keys()))
        if part.event == "values":
            last_values = part.data
    assert events[0] == "metadata", events
    assert events[-1] == "values", events
    assert {"values", "updates", "messages"} <= set(events), events
    assert updates == [["model"], ["tools"], ["model"]], updates
    msgs = last_values["messages"]
    assert [m["type"] for m in msgs] == ["human", "ai", "tool", "ai"], msgs
    assert msgs[0]["id"] == "human-1" and msgs[0]["content"] == "list files", msgs[0]
    assert msgs[1]["tool_calls"][0]["name"] == "ls", msgs[1]
    assert msgs[2]["tool_call_id"] == msgs[1]["tool_calls"][0]["id"], msgs[2]
    final = msgs[3]
    assert final["content"] == "Streamed answer.", final
    assert chunks.get(final["id"]) == "Streamed answer.", (chunks, final["id"])
    assert len({m["id"] for m in msgs}) == 4, "every message has its own id"
    # The thread keeps what the stream showed, with the same ids.
    state = await c.threads.get_state(t["thread_id"])
    assert [m["id"] for m in state["values"]["messages"]] == [m["id"] for m in msgs], state
    thread = await c.threads.get(t["thread_id"])
    assert thread["status"] == "idle" and thread["metadata"] == {"topic": "files"}, thread
    assert thread["values"]["messages"][-1]["content"] == "Streamed answer.", thread
    print("ok", events)

asyncio.run(main())
"#).await;
    eprintln!("{out}");
}

/// `runs.wait` returns the final values; `runs.create` + `runs.join` run in the background and
/// `runs.get` / `runs.list` report it; search, get, `if_exists` and delete behave as the client
/// expects (a deleted thread is a 404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_background_search_get_and_delete() {
    let py = skip_unless_langgraph!();
    script(&py, always_done().await, None, r#"
async def main():
    c = get_client(url=URL, api_key=None)
    a = await c.threads.create(metadata={"n": 1})
    b = await c.threads.create(metadata={"n": 2})
    await expect_status(409, c.threads.create(thread_id=a["thread_id"]))
    same = await c.threads.create(thread_id=a["thread_id"], if_exists="do_nothing")
    assert same["thread_id"] == a["thread_id"] and same["metadata"] == {"n": 1}, same
    out = await c.runs.wait(a["thread_id"], "agent", input={"messages": [{"role": "user", "content": "hi"}]})
    assert "__error__" not in out, out
    assert [m["type"] for m in out["messages"]] == ["human", "ai"], out
    assert out["messages"][-1]["content"] == "done", out
    run = await c.runs.create(b["thread_id"], "agent", input={"messages": [{"role": "user", "content": "again"}]})
    assert run["status"] in ("pending", "running", "success"), run
    joined = await c.runs.join(b["thread_id"], run["run_id"])
    assert joined["messages"][-1]["content"] == "done", joined
    got = await c.runs.get(b["thread_id"], run["run_id"])
    assert got["status"] == "success" and got["thread_id"] == b["thread_id"], got
    listed = await c.runs.list(b["thread_id"])
    assert [r["run_id"] for r in listed] == [run["run_id"]], listed
    found = await c.threads.search(metadata={"n": 2})
    assert [t["thread_id"] for t in found] == [b["thread_id"]], found
    every = await c.threads.search(limit=10)
    assert {t["thread_id"] for t in every} == {a["thread_id"], b["thread_id"]}, every
    await c.threads.update(a["thread_id"], metadata={"title": "greeting"})
    got = await c.threads.get(a["thread_id"])
    assert got["metadata"] == {"n": 1, "title": "greeting"}, got
    await c.threads.delete(a["thread_id"])
    await expect_status(404, c.threads.get(a["thread_id"]))
    await expect_status(404, c.threads.get_state(a["thread_id"]))
    left = await c.threads.search()
    assert [t["thread_id"] for t in left] == [b["thread_id"]], left
    print("ok")

asyncio.run(main())
"#).await;
}

/// With `--api-keys`, each key is a user: a thread Alice creates is a 404 for Bob on every route
/// (get, state, runs, update, delete) and absent from his searches; a request without a key or
/// with an unknown one is 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_cannot_see_each_others_threads() {
    let py = skip_unless_langgraph!();
    script(&py, always_done().await, Some("# test users\nalice key-alice\nbob key-bob\n"), r#"
async def main():
    alice = get_client(url=URL, api_key="key-alice")
    bob = get_client(url=URL, api_key="key-bob")
    t = await alice.threads.create()
    tid = t["thread_id"]
    out = await alice.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "hi"}]})
    assert out["messages"][-1]["content"] == "done", out
    await expect_status(404, bob.threads.get(tid))
    await expect_status(404, bob.threads.get_state(tid))
    await expect_status(404, bob.threads.update(tid, metadata={"x": 1}))
    await expect_status(404, bob.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "hi"}]}))
    await expect_status(404, bob.threads.delete(tid))
    assert await bob.threads.search() == [], "bob sees none of alice's threads"
    mine = await bob.threads.create()
    assert [x["thread_id"] for x in await bob.threads.search()] == [mine["thread_id"]]
    assert [x["thread_id"] for x in await alice.threads.search()] == [tid]
    # The thread is still Alice's, untouched.
    got = await alice.threads.get(tid)
    assert got["metadata"] == {} and got["values"]["messages"][-1]["content"] == "done", got
    await expect_status(401, get_client(url=URL, api_key=None).threads.search())
    await expect_status(401, get_client(url=URL, api_key="nope").threads.get(tid))
    print("ok")

asyncio.run(main())
"#).await;
}

/// A resumable run keeps its events: `runs.stream(stream_resumable=True)` gets ids, and
/// `runs.join_stream` with `last_event_id="-1"` replays the whole stream (metadata first), and
/// with the id of an event replays exactly the events after it — no duplicate, none missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_stream_replays_a_resumable_run() {
    let py = skip_unless_langgraph!();
    script(&py, ls_then_streamed_answer().await, None, r#"
async def main():
    c = get_client(url=URL, api_key=None)
    t = await c.threads.create()
    tid = t["thread_id"]
    live = [p async for p in c.runs.stream(tid, "agent",
            input={"messages": [{"role": "user", "content": "list files"}]},
            stream_mode=["values", "updates", "messages-tuple"], stream_resumable=True)]
    assert live[0].event == "metadata" and all(p.id is not None for p in live), live
    ids = [int(p.id) for p in live]
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
    rid = live[0].data["run_id"]
    replay = [p async for p in c.runs.join_stream(tid, rid, last_event_id="-1")]
    assert [(p.event, p.id) for p in replay] == [(p.event, p.id) for p in live], (replay, live)
    assert replay[-1].data == live[-1].data
    k = len(live) // 2
    tail = [p async for p in c.runs.join_stream(tid, rid, last_event_id=live[k].id)]
    assert [(p.event, p.id, p.data) for p in tail] == [(p.event, p.id, p.data) for p in live[k + 1:]], (k, tail)
    only_values = [p async for p in c.runs.join_stream(tid, rid, stream_mode="values", last_event_id="-1")]
    assert {p.event for p in only_values} == {"metadata", "values"}, only_values
    print("ok")

asyncio.run(main())
"#).await;
}
