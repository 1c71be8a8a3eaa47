//! `command.update` and `command.goto` on run create, through the official Python client: an
//! update applied as its own checkpoint before the run, `goto` to the model, and what Trellis
//! refuses (other nodes, `goto` with `resume`, bad updates) leaving the thread as it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::harness::always_done;
use super::sdk::script;
use crate::support::skip_unless_langgraph;

/// A run with `command.update` alone: its messages and todos are in the thread (a checkpoint of
/// `source: update` written by `__start__`) and the model answers them. `goto: "model"` with no
/// update asks the model again; an update of files shows in the run's values. Refused with 422
/// before anything changes: `goto` another node, `goto` with `resume`, unknown keys, a message the
/// server cannot read, an empty command. An update the thread refuses when the run starts (the
/// removal of a message it does not have) fails the run with `UpdateError` and leaves the thread
/// as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_update_and_goto_model() {
    let py = skip_unless_langgraph!();
    script(&py, always_done().await, None, r#"
def texts(values):
    return [m["content"] for m in values["messages"]]

async def main():
    c = get_client(url=URL, api_key=None)
    tid = (await c.threads.create())["thread_id"]
    todos = [{"content": "plan", "status": "pending"}]
    out = await c.runs.wait(tid, "agent", command={"update": {"messages": [{"role": "user", "content": "from update"}], "todos": todos}})
    assert texts(out) == ["from update", "done"], out
    assert out["todos"] == todos, out
    updates = await c.threads.get_history(tid, metadata={"source": "update"})
    assert len(updates) == 1 and updates[0]["metadata"]["writes"] == {"__start__": ["messages", "todos"]}, updates
    assert texts(updates[0]["values"]) == ["from update"], updates

    out = await c.runs.wait(tid, "agent", command={"goto": "model"})
    assert texts(out) == ["from update", "done", "done"], out
    out = await c.runs.wait(tid, "agent", command={"update": {"files": {"/n.md": {"content": "hi"}}}, "goto": ["model"]})
    assert out["files"]["/n.md"]["content"] == "hi", out
    assert texts(out)[-1] == "done" and len(texts(out)) == 4, out

    head = (await c.threads.get_state(tid))["checkpoint_id"]
    for command in [
        {"goto": "tools"},
        {"goto": "__end__"},
        {"goto": "model", "resume": {"decisions": []}},
        {"resume": {"decisions": []}, "update": {"messages": [{"role": "user", "content": "x"}]}},
        {"update": {"secret": 1}},
        {"update": {"messages": [{"type": "robot", "content": "x"}]}},
        {"update": {"todos": "no"}},
        {"update": None, "goto": None},
    ]:
        await expect_status(422, c.runs.wait(tid, "agent", command=command))
    await expect_status(422, c.runs.wait(tid, "agent", input={"messages": []}, command={"goto": "model"}))
    assert (await c.threads.get_state(tid))["checkpoint_id"] == head

    out = await c.runs.wait(tid, "agent", command={"update": {"messages": [{"type": "remove", "id": "nope"}]}}, raise_error=False)
    assert out["__error__"]["error"] == "UpdateError", out
    assert (await c.threads.get_state(tid))["checkpoint_id"] == head
    assert (await c.threads.get(tid))["status"] == "idle"
    print("ok")

asyncio.run(main())
"#).await;
}
