//! Runs started from an older checkpoint (`checkpoint_id` / `checkpoint` in the run body), as the
//! chat UIs edit a message or regenerate an answer, through the official Python client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::harness::always_done;
use super::sdk::script;
use crate::support::skip_unless_langgraph;

/// Edit: a run from the checkpoint before the second question continues from there with the new
/// text, and the thread's state is that branch. Regenerate: a run from the checkpoint holding a
/// question, with no input, asks the model again there. Ids of no checkpoint of the thread are a
/// 404 (another thread's included), a resume from a checkpoint and a branch of a thread a run would create are 422, and none of them changed
/// the thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_from_an_older_checkpoint_edit_and_regenerate() {
    let py = skip_unless_langgraph!();
    script(&py, always_done().await, None, r#"
def texts(values):
    return [m["content"] for m in values["messages"]]

def say(text):
    return {"messages": [{"role": "user", "content": text}]}

async def main():
    c = get_client(url=URL, api_key=None)
    tid = (await c.threads.create())["thread_id"]
    await c.runs.wait(tid, "agent", input=say("first"))
    out = await c.runs.wait(tid, "agent", input=say("second"))
    assert texts(out) == ["first", "done", "second", "done"], out
    history = await c.threads.get_history(tid, limit=100)
    before_second = next(h for h in history if texts(h["values"]) == ["first", "done"])

    # Edit the second question: from the checkpoint before it.
    out = await c.runs.wait(tid, "agent", input=say("changed"), checkpoint_id=before_second["checkpoint_id"])
    assert texts(out) == ["first", "done", "changed", "done"], out
    state = await c.threads.get_state(tid)
    assert texts(state["values"]) == ["first", "done", "changed", "done"], state
    assert (await c.threads.get(tid))["status"] == "idle"
    # The old line is still in the history, before the branch.
    history = await c.threads.get_history(tid, limit=100)
    lines = [texts(h["values"]) for h in reversed(history)]
    assert ["first", "done", "second", "done"] in lines, lines
    assert lines.index(["first", "done", "second", "done"]) < lines.index(["first", "done", "changed", "done"]), lines

    # Regenerate the last answer: from the checkpoint holding the question, no input.
    asked = next(h for h in history if texts(h["values"]) == ["first", "done", "changed"])
    out = await c.runs.wait(tid, "agent", input=None, checkpoint={"checkpoint_id": asked["checkpoint_id"]})
    assert texts(out) == ["first", "done", "changed", "done"], out
    assert len(await c.threads.get_history(tid, limit=100)) > len(history)

    # Refusals change nothing.
    head = (await c.threads.get_state(tid))["checkpoint_id"]
    other = (await c.threads.create())["thread_id"]
    await expect_status(404, c.runs.wait(other, "agent", input=say("x"), checkpoint_id=head))
    other_state = await c.threads.get_state(other)
    assert other_state["checkpoint_id"] is None, other_state
    await c.runs.wait(other, "agent", input=say("x"))
    foreign = (await c.threads.get_state(other))["checkpoint_id"]
    await expect_status(404, c.runs.wait(tid, "agent", input=say("x"), checkpoint_id="00000000-0000-4000-8000-000000000000"))
    await expect_status(422, c.runs.wait(tid, "agent", input=say("x"), checkpoint={"checkpoint_id": foreign, "thread_id": other}))
    await expect_status(422, c.runs.wait(tid, "agent", command={"resume": {"decisions": []}}, checkpoint_id=head))
    fresh = "6f1b6f7e-0000-4000-8000-00000000abcd"
    await expect_status(422, c.runs.wait(fresh, "agent", input=say("x"), if_not_exists="create", checkpoint_id=head))
    await expect_status(404, c.threads.get(fresh))
    assert (await c.threads.get_state(tid))["checkpoint_id"] == head
    print("ok")

asyncio.run(main())
"#).await;
}
