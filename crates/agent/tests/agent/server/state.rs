//! A thread's state over the API, driven by the official Python client: `get_state` (latest, at a
//! checkpoint id, at a checkpoint), `get_history` (newest first, limit, before, metadata filter,
//! parents consistent with the states), `update_state` (messages merged by id, todos, `as_node`,
//! a stale checkpoint is a 409) and `threads.copy`; and another user's key gets 404 for each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::harness::{AGENT_FILE, Served, always_done, ls_then_streamed_answer, python};
use super::sdk::{PRELUDE, script};
use crate::support::skip_unless_langgraph;

/// A run with a tool call leaves several checkpoints: the history lists them newest first, each
/// entry's parent is the next entry, the newest is the state, and the state at any checkpoint id
/// (GET) or checkpoint (POST) is that entry. An update replaces the last AI message in place by
/// its id and sets todos in a new checkpoint (`source: update`, `writes` by `as_node`) whose
/// parent is the old head; an update naming the old head is then a 409 and changes nothing; the
/// next run continues from the updated state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_state_at_checkpoints_and_update_state() {
    let py = skip_unless_langgraph!();
    script(&py, ls_then_streamed_answer().await, None, r##"
import httpx, uuid

def ids(states):
    return [s["checkpoint"]["checkpoint_id"] for s in states]

async def main():
    c = get_client(url=URL, api_key=None)
    tid = (await c.threads.create())["thread_id"]
    empty = await c.threads.get_state(tid)
    assert empty["values"] == {} and empty["checkpoint"] is None, empty
    assert await c.threads.get_history(tid) == []
    await c.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "list files"}]})
    hist = await c.threads.get_history(tid, limit=100)
    assert len(hist) >= 2, hist
    state = await c.threads.get_state(tid)
    assert hist[0]["checkpoint"] == state["checkpoint"] and hist[0]["values"] == state["values"], (hist[0], state)
    assert [m["type"] for m in state["values"]["messages"]] == ["human", "ai", "tool", "ai"], state
    for newer, older in zip(hist, hist[1:]):
        assert newer["parent_checkpoint"]["checkpoint_id"] == older["checkpoint"]["checkpoint_id"], (newer, older)
        assert newer["parent_checkpoint_id"] == older["checkpoint_id"]
        assert newer["metadata"]["step"] > older["metadata"]["step"], (newer["metadata"], older["metadata"])
        assert len(newer["values"]["messages"]) >= len(older["values"]["messages"])
        assert newer["metadata"]["source"] == "loop"
    assert hist[-1]["parent_checkpoint"] is None, hist[-1]
    assert len(set(ids(hist))) == len(hist), "every checkpoint has its own id"
    for entry in hist:
        at = await c.threads.get_state(tid, checkpoint_id=entry["checkpoint"]["checkpoint_id"])
        assert at["checkpoint"] == entry["checkpoint"] and at["values"] == entry["values"], (at, entry)
        assert at["parent_checkpoint"] == entry["parent_checkpoint"]
    mid = hist[len(hist) // 2]
    posted = await c.threads.get_state(tid, checkpoint={"checkpoint_id": mid["checkpoint"]["checkpoint_id"], "checkpoint_ns": ""})
    assert posted["values"] == mid["values"], posted
    assert ids(await c.threads.get_history(tid, limit=2)) == ids(hist[:2])
    async with httpx.AsyncClient(base_url=URL) as raw:
        r = await raw.get(f"/threads/{tid}/history", params={"limit": 2})
        assert r.status_code == 200 and ids(r.json()) == ids(hist[:2]), r.text
        r = await raw.get(f"/threads/{tid}/history", params={"limit": 100, "before": hist[0]["checkpoint_id"]})
        assert ids(r.json()) == ids(hist[1:]), r.text
        for bad in [{"limit": "x"}, {"sort": "asc"}, {"before": "nope"}]:
            r = await raw.get(f"/threads/{tid}/history", params=bad)
            assert r.status_code == 422 and "detail" in r.json(), (bad, r.text)
    assert ids(await c.threads.get_history(tid, limit=100, before=hist[0]["checkpoint"])) == ids(hist[1:])
    assert ids(await c.threads.get_history(tid, limit=100, before=hist[1]["checkpoint"]["checkpoint_id"])) == ids(hist[2:])
    assert ids(await c.threads.get_history(tid, checkpoint={"checkpoint_id": mid["checkpoint_id"]})) == [mid["checkpoint_id"]]
    await expect_status(404, c.threads.get_state(tid, checkpoint_id=str(uuid.uuid4())))
    await expect_status(422, c.threads.get_state(tid, checkpoint_id="not-a-uuid"))

    last = state["values"]["messages"][-1]
    res = await c.threads.update_state(tid, {
        "messages": [{"type": "ai", "content": "Edited answer.", "id": last["id"]}],
        "todos": [{"content": "review the list", "status": "pending"}],
    }, as_node="model")
    new_id = res["checkpoint"]["checkpoint_id"]
    after = await c.threads.get_state(tid)
    assert after["checkpoint"]["checkpoint_id"] == new_id, (res, after)
    assert after["parent_checkpoint"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"], after
    msgs = after["values"]["messages"]
    assert len(msgs) == 4 and msgs[-1]["id"] == last["id"] and msgs[-1]["content"] == "Edited answer.", msgs
    assert after["values"]["todos"] == [{"content": "review the list", "status": "pending"}], after
    assert after["metadata"]["source"] == "update" and after["metadata"]["writes"] == {"model": ["messages", "todos"]}, after
    assert ids(await c.threads.get_history(tid, metadata={"source": "update"})) == [new_id]
    # The client read `state` before the update: its checkpoint is stale now.
    await expect_status(409, c.threads.update_state(tid, {"todos": []}, checkpoint_id=state["checkpoint"]["checkpoint_id"]))
    await expect_status(409, c.threads.update_state(tid, {"todos": []}, checkpoint=state["checkpoint"]))
    assert (await c.threads.get_state(tid))["checkpoint"]["checkpoint_id"] == new_id, "a refused update changes nothing"
    appended = await c.threads.update_state(tid, {"messages": {"type": "human", "content": "note", "id": "n-1"}}, checkpoint_id=new_id)
    got = await c.threads.get_state(tid)
    assert [m["id"] for m in got["values"]["messages"]][-1] == "n-1", got
    await c.threads.update_state(tid, {"messages": [{"type": "remove", "id": "n-1"}]})
    for bad in [{"nope": 1}, {"messages": [{"type": "robot", "content": "x"}]}, {"messages": [{"type": "remove", "id": "missing"}]}, {"todos": "x"}]:
        await expect_status(422, c.threads.update_state(tid, bad))
    await expect_status(422, c.threads.update_state(tid, {"todos": []}, as_node="nowhere"))
    await expect_status(404, c.threads.update_state(tid, {"todos": []}, checkpoint_id=str(uuid.uuid4())))

    out = await c.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "again"}]})
    assert [m["content"] for m in out["messages"]][3:5] == ["Edited answer.", "again"], out["messages"]
    print("ok")

asyncio.run(main())
"##).await;
}

/// Two clients update the same thread at once from the same checkpoint, and two more write the
/// same file from the same version: of each pair exactly one succeeds and the other gets a 409;
/// the winner's change is what the thread holds, and nothing of the loser's was applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_one_wins_the_other_is_a_409() {
    let py = skip_unless_langgraph!();
    script(&py, always_done().await, None, r##"
async def race(*calls):
    results = await asyncio.gather(*calls, return_exceptions=True)
    won = [i for i, r in enumerate(results) if not isinstance(r, Exception)]
    lost = [r for r in results if isinstance(r, Exception)]
    assert len(won) == 1 and [status_of(e) for e in lost] == [409], results
    return won[0]

async def main():
    c = get_client(url=URL, api_key=None)
    tid = (await c.threads.create())["thread_id"]
    await c.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "hi"}]})
    for _ in range(5):
        head = (await c.threads.get_state(tid))["checkpoint"]["checkpoint_id"]
        todos = [[{"content": who, "status": "pending"}] for who in ("a", "b")]
        w = await race(*[c.threads.update_state(tid, {"todos": t}, checkpoint_id=head) for t in todos])
        state = await c.threads.get_state(tid)
        assert state["values"]["todos"] == todos[w], (w, state["values"])
        assert state["parent_checkpoint"]["checkpoint_id"] == head, "one checkpoint after the head"
    await c.threads.update_state(tid, {"files": {"/shared.md": {"content": "v1"}}})
    version = (await c.threads.get_state(tid))["values"]["files"]["/shared.md"]["version"]
    texts = ["from a", "from b"]
    w = await race(*[c.threads.update_state(tid, {"files": {"/shared.md": {"content": t, "version": version}}}) for t in texts])
    assert (await c.threads.get_state(tid))["values"]["files"]["/shared.md"]["content"] == texts[w]
    print("ok")

asyncio.run(main())
"##).await;
}

/// `threads.copy`: a new thread of the same user with the same history (states, order, steps) and
/// files, independent of the source (a run on the copy leaves the source as it was).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_keeps_history_and_files() {
    let py = skip_unless_langgraph!();
    script(&py, always_done().await, None, r##"
async def main():
    c = get_client(url=URL, api_key=None)
    src = await c.threads.create(metadata={"title": "original"})
    tid = src["thread_id"]
    await c.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "hi"}]})
    await c.threads.update_state(tid, {"files": {"/notes.md": {"content": "# Notes\n", "encoding": "utf-8"}}})
    before = await c.threads.get_history(tid, limit=100)
    copy = await c.threads.copy(tid)
    cid = copy["thread_id"]
    assert cid != tid and copy["metadata"] == {"title": "original"}, copy
    hist = await c.threads.get_history(cid, limit=100)
    assert [h["values"]["messages"] for h in hist] == [h["values"]["messages"] for h in before], (hist, before)
    assert [h["metadata"] for h in hist] == [h["metadata"] for h in before]
    assert hist[-1]["parent_checkpoint"] is None and all(h["checkpoint"]["thread_id"] == cid for h in hist), hist
    files = (await c.threads.get_state(cid))["values"]["files"]
    assert files["/notes.md"]["content"] == "# Notes\n", files
    assert (await c.threads.get(cid))["values"]["files"] == files, "the thread's values carry them too"
    assert {t["thread_id"] for t in await c.threads.search()} == {tid, cid}
    await c.runs.wait(cid, "agent", input={"messages": [{"role": "user", "content": "more"}]})
    assert len(await c.threads.get_history(tid, limit=100)) == len(before), "the source is untouched"
    assert len((await c.threads.get_state(cid))["values"]["messages"]) == 4
    print("ok")

asyncio.run(main())
"##).await;
}

/// Another user's key gets 404 for every state, history, update, file and copy route of a thread,
/// and the thread is unchanged afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_gets_404_for_state_history_update_files_and_copy() {
    let py = skip_unless_langgraph!();
    script(
        &py,
        always_done().await,
        Some("alice key-alice\nbob key-bob\n"),
        r##"
import httpx

async def main():
    alice = get_client(url=URL, api_key="key-alice")
    bob = get_client(url=URL, api_key="key-bob")
    tid = (await alice.threads.create())["thread_id"]
    await alice.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "hi"}]})
    await alice.threads.update_state(tid, {"files": {"/a.md": {"content": "mine"}}})
    state = await alice.threads.get_state(tid)
    cp = state["checkpoint"]
    await expect_status(404, bob.threads.get_state(tid))
    await expect_status(404, bob.threads.get_state(tid, checkpoint_id=cp["checkpoint_id"]))
    await expect_status(404, bob.threads.get_state(tid, checkpoint=cp))
    await expect_status(404, bob.threads.get_history(tid))
    await expect_status(404, bob.threads.update_state(tid, {"todos": []}))
    await expect_status(404, bob.threads.update_state(tid, {"files": {"/a.md": None}}))
    await expect_status(404, bob.threads.copy(tid))
    async with httpx.AsyncClient(base_url=URL, headers={"x-api-key": "key-bob"}) as raw:
        r = await raw.get(f"/threads/{tid}/files", params={"path": "/a.md"})
        assert r.status_code == 404 and "detail" in r.json(), r.text
        r = await raw.post(f"/threads/{tid}/files", params={"path": "x.txt"}, content=b"bob's")
        assert r.status_code == 404 and "detail" in r.json(), r.text
    async with httpx.AsyncClient(base_url=URL, headers={"x-api-key": "key-alice"}) as raw:
        r = await raw.get(f"/threads/{tid}/files", params={"path": "/a.md"})
        assert r.status_code == 200 and r.content == b"mine", r.text
    assert await bob.threads.search() == []
    again = await alice.threads.get_state(tid)
    assert again["checkpoint"] == cp and again["values"] == state["values"], "untouched"
    assert [t["thread_id"] for t in await alice.threads.search()] == [tid], "no copy was made"
    mine = (await alice.threads.copy(tid))["thread_id"]
    assert {t["thread_id"] for t in await alice.threads.search()} == {tid, mine}, "the copy is alice's"
    assert (await alice.threads.get_state(mine))["values"]["files"]["/a.md"]["content"] == "mine"
    await expect_status(404, bob.threads.get_state(mine))
    await expect_status(404, bob.threads.get_history(mine))
    assert await bob.threads.search() == []
    print("ok")

asyncio.run(main())
"##,
    )
    .await;
}

/// A thread stopped for an approval: its state and the newest history entry carry the interrupt
/// (`next`, the `tools` task, `interrupts`), older entries none; its messages cannot be changed
/// while it waits (409), its todos can, and the interrupt stays; a copy waits for the same
/// approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_thread_in_state_history_update_and_copy() {
    let py = skip_unless_langgraph!();
    let model = ls_then_streamed_answer().await;
    let dir = tempfile::tempdir().unwrap();
    let agent_file = AGENT_FILE.replace("ask = [\"none\"]", "ask = [\"ls\"]");
    let served = Served::with_agent_file(dir.path(), &model, None, &agent_file);
    let body = r##"
async def main():
    c = get_client(url=URL, api_key=None)
    tid = (await c.threads.create())["thread_id"]
    await c.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "list files"}]})
    state = await c.threads.get_state(tid)
    intr = state["interrupts"]
    assert intr and intr[0]["value"]["action_requests"][0]["name"] == "ls", state
    assert state["next"] == ["tools"] and state["tasks"][0]["interrupts"] == intr, state
    hist = await c.threads.get_history(tid, limit=100)
    assert hist[0]["interrupts"] == intr and hist[0]["checkpoint"] == state["checkpoint"], hist[0]
    assert all(h["interrupts"] == [] and h["next"] == [] and h["tasks"] == [] for h in hist[1:]), hist
    await expect_status(409, c.threads.update_state(tid, {"messages": [{"type": "human", "content": "x"}]}))
    await c.threads.update_state(tid, {"todos": [{"content": "approve ls", "status": "pending"}]})
    after = await c.threads.get_state(tid)
    assert after["interrupts"] == intr and after["next"] == ["tools"], after
    assert after["values"]["messages"] == state["values"]["messages"], "messages untouched"
    assert (await c.threads.get(tid))["status"] == "interrupted"
    copy = (await c.threads.copy(tid))["thread_id"]
    assert (await c.threads.get(copy))["status"] == "interrupted"
    copied = await c.threads.get_state(copy)
    assert [i["value"] for i in copied["interrupts"]] == [i["value"] for i in intr], copied
    print("ok")

asyncio.run(main())
"##;
    let out = python(&py, &served, &format!("{PRELUDE}{body}")).await;
    assert!(out.starts_with("ok"), "{out}");
}

/// An agent file with `todos = true` gives the served agent `write_todos`: the todos it writes are
/// in the thread's values; without it the model is not offered the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todos_true_gives_the_agent_write_todos_and_its_todos_are_in_the_values() {
    use serde_json::{Value, json};

    use super::harness::json_of;

    let todos = json!([{"content": "Write the report", "status": "in_progress"}]);
    let call = json!({"type": "tool_use", "id": "toolu_t", "name": "write_todos", "input": {"todos": todos}});
    for on in [true, false] {
        let model = crate::cli::harness::calls_then_done(vec![call.clone()]).await;
        let dir = tempfile::tempdir().unwrap();
        let file = if on {
            format!("todos = true\n{AGENT_FILE}")
        } else {
            AGENT_FILE.to_owned()
        };
        let served = Served::with_agent_file(dir.path(), &model, None, &file);
        let c = super::harness::http();
        let thread: Value = json_of(c.post(format!("{}/threads", served.url)).json(&json!({}))).await;
        let tid = thread["thread_id"].as_str().unwrap();
        let body =
            json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "plan"}]}});
        let out: Value = json_of(
            c.post(format!("{}/threads/{tid}/runs/wait", served.url))
                .json(&body),
        )
        .await;
        let first = model.received_requests().await.unwrap().remove(0);
        let offered = String::from_utf8_lossy(&first.body).contains("\"write_todos\"");
        assert_eq!(offered, on, "write_todos offered: {out}");
        if on {
            assert_eq!(out["todos"], todos, "{out}");
            let state: Value = json_of(c.get(format!("{}/threads/{tid}/state", served.url))).await;
            assert_eq!(state["values"]["todos"], todos, "{state}");
        } else {
            assert_eq!(out.get("todos"), None, "{out}");
        }
    }
}
