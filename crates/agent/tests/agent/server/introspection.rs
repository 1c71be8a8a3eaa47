//! The stream modes that show how a run proceeds — `tasks`, `checkpoints`, `debug`, `custom` —
//! through the official Python client, on a run that retries its first model call, calls `ls`
//! and answers; and a subagent's events under its namespace with `stream_subgraphs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use wiremock::{MockServer, ResponseTemplate};

use super::sdk::script;
use crate::cli::harness::{calls_then_done, messages, reply};
use crate::support::skip_unless_langgraph;

/// A model that is overloaded once (529, retried), then calls `ls` on `/`, then answers `done`.
async fn retried_ls_then_done() -> MockServer {
    let server = MockServer::start().await;
    messages()
        .respond_with(ResponseTemplate::new(529).set_body_json(
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    let ls = json!([{"type": "tool_use", "id": "toolu_ls", "name": "ls", "input": {"path": "/"}}]);
    messages()
        .respond_with(reply(ls, "tool_use"))
        .up_to_n_times(1)
        .with_priority(2)
        .mount(&server)
        .await;
    messages()
        .respond_with(reply(json!([{"type": "text", "text": "done"}]), "end_turn"))
        .mount(&server)
        .await;
    server
}

/// `tasks`: every task that starts ends, in order, with the model's reply or the tool's result;
/// `checkpoints`: one per checkpoint of the run, each naming its parent, the last one the
/// thread's state with nothing next; `debug`: the same tasks and checkpoints, wrapped; `custom`:
/// the retry middleware's report. A run that did not ask for these modes gets none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_checkpoints_debug_and_custom_show_how_a_run_proceeds() {
    let py = skip_unless_langgraph!();
    script(&py, retried_ls_then_done().await, None, r#"
async def main():
    c = get_client(url=URL, api_key=None)
    t = await c.threads.create()
    tid = t["thread_id"]
    parts = []
    async for part in c.runs.stream(tid, "agent", input={"messages": [{"role": "user", "content": "list"}]},
                                    stream_mode=["tasks", "checkpoints", "debug", "custom"]):
        assert part.event != "error", part.data
        parts.append((part.event, part.data))
    events = [e for e, _ in parts]
    assert events[0] == "metadata", events
    assert set(events[1:]) == {"tasks", "checkpoints", "debug", "custom"}, events

    tasks = [d for e, d in parts if e == "tasks"]
    started = [d for d in tasks if "input" in d]
    ended = [d for d in tasks if "result" in d]
    assert [d["name"] for d in started] == ["model", "tools", "model"], tasks
    assert started[0]["input"] is None and started[0]["triggers"], started[0]
    assert started[1]["input"] == {"id": "toolu_ls", "name": "ls", "type": "tool_call"}, started[1]
    assert sorted(d["id"] for d in ended) == sorted(d["id"] for d in started), tasks
    assert len({d["id"] for d in started}) == 3, started
    for d in ended:
        start = next(s for s in started if s["id"] == d["id"])
        assert tasks.index(start) < tasks.index(d), tasks
        assert d["name"] == start["name"] and d["error"] is None and d["interrupts"] == [], d
    by_id = {d["id"]: d["result"]["messages"][0] for d in ended}
    replies = [by_id[s["id"]] for s in started]
    assert replies[0]["type"] == "ai" and replies[0]["tool_calls"][0]["name"] == "ls", replies[0]
    assert replies[1]["type"] == "tool" and replies[1]["tool_call_id"] == "toolu_ls", replies[1]
    assert replies[2]["type"] == "ai" and replies[2]["content"] == "done", replies[2]

    checkpoints = [d for e, d in parts if e == "checkpoints"]
    history = await c.threads.get_history(tid, limit=100)
    assert len(checkpoints) == len(history), ([(cp["config"]["configurable"]["checkpoint_id"], cp["metadata"], cp["next"], [m["type"] for m in cp["values"]["messages"]]) for cp in checkpoints], [(h["checkpoint_id"], h["metadata"]) for h in history])
    ids = [cp["config"]["configurable"]["checkpoint_id"] for cp in checkpoints]
    assert ids == [h["checkpoint_id"] for h in reversed(history)], (ids, history)
    for before, after in zip(checkpoints, checkpoints[1:]):
        assert after["parent_config"]["configurable"]["checkpoint_id"] == before["config"]["configurable"]["checkpoint_id"]
    state = await c.threads.get_state(tid)
    last = checkpoints[-1]
    assert last["next"] == [] and ids[-1] == state["checkpoint_id"], last
    assert [m["content"] for m in last["values"]["messages"]][-1] == "done", last
    assert checkpoints[0]["next"] == ["model"], checkpoints[0]

    debug = [d for e, d in parts if e == "debug"]
    assert [d["payload"] for d in debug if d["type"] == "checkpoint"] == checkpoints, debug
    assert [d["payload"] for d in debug if d["type"] in ("task", "task_result")] == tasks, debug
    assert all(isinstance(d["step"], int) and d["timestamp"] for d in debug), debug

    custom = [d for e, d in parts if e == "custom"]
    assert any(d["kind"] == "retry" for d in custom), custom

    # Not asked for: none of these parts, even on a join asking for them.
    run = await c.runs.create(tid, "agent", input={"messages": [{"role": "user", "content": "again"}]},
                              stream_mode=["values"])
    seen = [p.event async for p in c.runs.join_stream(tid, run["run_id"], stream_mode=["tasks", "checkpoints", "values"])]
    assert "tasks" not in seen and "checkpoints" not in seen, seen
    print("ok")

asyncio.run(main())
"#).await;
}

/// `stream_subgraphs`: the subagent a `task` call starts streams its reply, updates and values as
/// `<mode>|tools:<id>`, where the id is the `task` call's task id in the `tasks` mode, and its
/// message metadata names the namespace; the run's own events keep their plain names, and a run
/// without `stream_subgraphs` sends no namespaced event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_streams_under_its_namespace_with_stream_subgraphs() {
    let py = skip_unless_langgraph!();
    let task = json!({"type": "tool_use", "id": "toolu_task", "name": "task",
        "input": {"description": "Say done.", "subagent_type": "general-purpose"}});
    script(&py, calls_then_done(vec![task]).await, None, r#"
async def main():
    c = get_client(url=URL, api_key=None)
    tid = (await c.threads.create())["thread_id"]
    parts = []
    async for part in c.runs.stream(tid, "agent", input={"messages": [{"role": "user", "content": "delegate"}]},
                                    stream_mode=["values", "updates", "messages-tuple", "tasks"], stream_subgraphs=True):
        assert part.event != "error", part.data
        parts.append((part.event, part.data))
    task_id = next(d["id"] for e, d in parts if e == "tasks" and d.get("input", {}) and d["input"].get("id") == "toolu_task")
    ns = f"tools:{task_id}"
    nested = [(e, d) for e, d in parts if "|" in e]
    assert nested, [e for e, _ in parts]
    assert {e.split("|", 1)[1] for e, _ in nested} == {ns}, [e for e, _ in nested]
    assert {e.split("|")[0] for e, _ in nested} == {"values", "updates", "messages"}, [e for e, _ in nested]
    sub_values = [d for e, d in nested if e == f"values|{ns}"][-1]
    assert [(m["type"], m["content"]) for m in sub_values["messages"]] == [("human", "Say done."), ("ai", "done")], sub_values
    chunks = [d for e, d in nested if e == f"messages|{ns}"]
    assert all(meta["langgraph_checkpoint_ns"] == ns for _, meta in chunks), chunks
    assert "".join(ch["content"] for ch, _ in chunks if isinstance(ch["content"], str)) == "done", chunks
    # The parent's own parts keep their names; its final values hold the task's result.
    final = [d for e, d in parts if e == "values"][-1]
    assert [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "ai"], final
    # Without stream_subgraphs, nothing namespaced.
    events = [p.event async for p in c.runs.stream(tid, "agent", input={"messages": [{"role": "user", "content": "again"}]},
                                                   stream_mode=["values", "messages-tuple"])]
    assert not any("|" in e for e in events), events
    print("ok")

asyncio.run(main())
"#).await;
}
