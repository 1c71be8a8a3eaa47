//! `command.resume` through the official Python client: a run that stopped for an approval is
//! continued with approve, edit, reject (the model sees the message) and respond, as a single
//! value or a map keyed by the interrupt's id, over stream, wait and background + join; a resume
//! that cannot apply (a wrong id, a wrong count, a malformed or disallowed decision, nothing
//! pending) and new input on a waiting thread are 4xx and leave the thread as it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use wiremock::MockServer;
use wiremock::matchers::body_string_contains;

use super::harness::{AGENT_FILE, Served, python};
use super::sdk::PRELUDE;
use crate::cli::harness::{messages, reply};
use crate::support::skip_unless_langgraph;

/// A mock model that calls `ls` on `/` (call id `toolu_ls`) in a conversation that has no such
/// call yet, and answers `done` once it has one (then it has its result too).
pub(crate) async fn ls_until_answered() -> MockServer {
    let server = MockServer::start().await;
    messages()
        .and(body_string_contains("toolu_ls"))
        .respond_with(reply(json!([{"type": "text", "text": "done"}]), "end_turn"))
        .with_priority(1)
        .mount(&server)
        .await;
    let ls = json!([{"type": "tool_use", "id": "toolu_ls", "name": "ls", "input": {"path": "/"}}]);
    messages()
        .respond_with(reply(ls, "tool_use"))
        .mount(&server)
        .await;
    server
}

/// The agent file of [`AGENT_FILE`] with approvals asked before `ls`.
pub(crate) fn asks_before_ls() -> String {
    let file = AGENT_FILE.replace("ask = [\"none\"]", "ask = [\"ls\"]");
    assert_ne!(file, AGENT_FILE);
    file
}

/// Stop a new thread at the `ls` approval; its id and the interrupt (a helper every script of
/// this file starts with).
const STOP: &str = r#"
async def stop(c):
    t = await c.threads.create()
    out = await c.runs.wait(t["thread_id"], "agent", input={"messages": [{"role": "user", "content": "list"}]})
    intr = out["__interrupt__"]
    assert len(intr) == 1, out
    assert intr[0]["value"]["action_requests"][0]["name"] == "ls", intr
    return t["thread_id"], intr[0]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_edit_reject_and_respond_through_command_resume() {
    let py = skip_unless_langgraph!();
    let model = ls_until_answered().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::with_agent_file(dir.path(), &model, None, &asks_before_ls());
    let out = python(&py, &served, &format!("{PRELUDE}{STOP}{}", r#"
async def main():
    c = get_client(url=URL, api_key=None)

    # approve, as a single value, streamed: ls runs and the model answers.
    approved, intr = await stop(c)
    assert (await c.threads.get(approved))["status"] == "interrupted"
    events, last = [], None
    async for part in c.runs.stream(approved, "agent", command={"resume": {"decisions": [{"type": "approve"}]}},
                                    stream_mode=["values", "updates"]):
        assert part.event != "error", part.data
        events.append(part.event)
        if part.event == "values":
            last = part.data
    assert events[0] == "metadata" and events[-1] == "values", events
    msgs = last["messages"]
    assert [m["type"] for m in msgs] == ["human", "ai", "tool", "ai"], msgs
    assert msgs[2]["status"] == "success" and msgs[3]["content"] == "done", msgs
    assert "__interrupt__" not in last, last
    thread = await c.threads.get(approved)
    assert thread["status"] == "idle" and thread["interrupts"] == {}, thread
    state = await c.threads.get_state(approved)
    assert state["interrupts"] == [] and state["next"] == [], state

    # edit, keyed by the interrupt's id, with wait: the edited arguments are what runs.
    edited, intr = await stop(c)
    out = await c.runs.wait(edited, "agent", command={"resume": {intr["id"]: {"decisions": [
        {"type": "edit", "edited_action": {"name": "ls", "args": {"path": "/nowhere"}}}]}}})
    assert "__error__" not in out, out
    msgs = out["messages"]
    assert msgs[1]["tool_calls"][0]["args"] == {"path": "/nowhere"}, msgs[1]
    assert "/nowhere" in json.dumps(msgs[2]["content"]), msgs[2]

    # reject with a message, in the background: the model gets the message as the call's result.
    rejected, intr = await stop(c)
    run = await c.runs.create(rejected, "agent", command={"resume": {"decisions": [
        {"type": "reject", "message": "not now, please"}]}})
    out = await c.runs.join(rejected, run["run_id"])
    tool = out["messages"][2]
    assert tool["status"] == "error" and "not now, please" in json.dumps(tool["content"]), tool
    assert (await c.runs.get(rejected, run["run_id"]))["status"] == "success"

    # respond: the answer is the call's result.
    responded, intr = await stop(c)
    out = await c.runs.wait(responded, "agent", command={"resume": {"decisions": [
        {"type": "respond", "message": "a.txt b.txt"}]}})
    tool = out["messages"][2]
    assert tool["content"] == "a.txt b.txt" and tool["status"] == "success", tool

    # Answers that cannot apply are refused and leave the thread as it was.
    waiting, intr = await stop(c)
    before = await c.threads.get_state(waiting)
    runs_before = await c.runs.list(waiting)
    for command in [
        {"resume": {"0" * 32: {"decisions": [{"type": "approve"}]}}},
        {"resume": {"decisions": [{"type": "approve"}, {"type": "approve"}]}},
        {"resume": {"decisions": []}},
        {"resume": {"decisions": [{"type": "maybe"}]}},
        {"resume": {"decisions": [{"type": "respond"}]}},
        {"resume": {"decisions": [{"type": "edit", "edited_action": {"name": "ls", "args": "/"}}]}},
        {"resume": {"decisions": [{"type": "edit", "edited_action": {"name": "rm", "args": {}}}]}},
        {"resume": [{"type": "approve"}]},
        {"resume": {"decisions": [{"type": "approve"}]}, "goto": "__end__"},
    ]:
        await expect_status(422, c.runs.wait(waiting, "agent", command=command))
    # New input while it waits for decisions.
    await expect_status(409, c.runs.wait(waiting, "agent", input={"messages": [{"role": "user", "content": "x"}]}))
    assert await c.threads.get_state(waiting) == before
    assert await c.runs.list(waiting) == runs_before
    assert (await c.threads.get(waiting))["status"] == "interrupted"
    # Nothing to resume on a thread that finished.
    await expect_status(409, c.runs.wait(approved, "agent", command={"resume": {"decisions": [{"type": "approve"}]}}))
    # The waiting thread still takes the right answer afterwards.
    out = await c.runs.wait(waiting, "agent", command={"resume": {"decisions": [{"type": "approve"}]}})
    assert out["messages"][-1]["content"] == "done", out
    print("ok")

asyncio.run(main())
"#)).await;
    assert!(out.starts_with("ok"), "{out}");
    let requests = model.received_requests().await.unwrap();
    // Five stops and five resumes; none of the refused answers reached the model.
    assert_eq!(requests.len(), 10, "model calls");
    assert!(
        requests
            .iter()
            .any(|r| String::from_utf8_lossy(&r.body).contains("not now, please")),
        "the model saw the rejection's message"
    );
}

/// A mock model for a parent that hands `SUBTASK-7` to the general-purpose subagent, which calls
/// `ls` (asked about: the approval stops both) and then answers `sub done`; the parent then
/// answers `done`.
async fn delegates_ls() -> MockServer {
    let server = MockServer::start().await;
    let text = |t: &str| reply(json!([{"type": "text", "text": t}]), "end_turn");
    let ls = json!([{"type": "tool_use", "id": "toolu_sub", "name": "ls", "input": {"path": "/"}}]);
    let task = json!([{"type": "tool_use", "id": "toolu_task", "name": "task",
        "input": {"description": "SUBTASK-7", "subagent_type": "general-purpose"}}]);
    // The parent, once the task has a result.
    messages()
        .and(body_string_contains("toolu_task"))
        .respond_with(text("done"))
        .with_priority(1)
        .mount(&server)
        .await;
    // The subagent, once ls has a result.
    messages()
        .and(body_string_contains("toolu_sub"))
        .respond_with(text("sub done"))
        .with_priority(2)
        .mount(&server)
        .await;
    // The subagent's first call.
    messages()
        .and(body_string_contains("SUBTASK-7"))
        .respond_with(reply(ls, "tool_use"))
        .with_priority(3)
        .mount(&server)
        .await;
    messages()
        .respond_with(reply(task, "tool_use"))
        .with_priority(4)
        .mount(&server)
        .await;
    server
}

/// An approval asked inside a subagent stops the parent's run with the subagent's call in the
/// interrupt's `action_requests`; resuming the parent with `command.resume` (keyed by the
/// interrupt's id) runs the subagent's call and both agents finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_inside_a_subagent_is_resumed_from_the_parent() {
    let py = skip_unless_langgraph!();
    let model = delegates_ls().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::with_agent_file(dir.path(), &model, None, &asks_before_ls());
    let out = python(&py, &served, &format!("{PRELUDE}{}", r#"
async def main():
    c = get_client(url=URL, api_key=None)
    tid = (await c.threads.create())["thread_id"]
    out = await c.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "delegate"}]})
    intr = out["__interrupt__"]
    assert len(intr) == 1, out
    actions = intr[0]["value"]["action_requests"]
    assert [a["name"] for a in actions] == ["ls"] and actions[0]["args"] == {"path": "/"}, actions
    assert out["messages"][-1]["tool_calls"][0]["name"] == "task", out["messages"]
    thread = await c.threads.get(tid)
    assert thread["status"] == "interrupted", thread
    await expect_status(422, c.runs.wait(tid, "agent", command={"resume": {"decisions": [
        {"type": "approve"}, {"type": "approve"}]}}))
    out = await c.runs.wait(tid, "agent", command={"resume": {intr[0]["id"]: {"decisions": [{"type": "approve"}]}}})
    assert "__error__" not in out and "__interrupt__" not in out, out
    msgs = out["messages"]
    assert [m["type"] for m in msgs] == ["human", "ai", "tool", "ai"], msgs
    assert "sub done" in json.dumps(msgs[2]["content"]) and msgs[3]["content"] == "done", msgs
    assert (await c.threads.get(tid))["status"] == "idle"
    print("ok")

asyncio.run(main())
"#)).await;
    assert!(out.starts_with("ok"), "{out}");
    let requests = model.received_requests().await.unwrap();
    let ls_ran = requests.iter().any(|r| {
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        body.to_string().contains("tool_result") && body.to_string().contains("toolu_sub")
    });
    assert!(ls_ran, "the subagent got its ls result");
}

/// An approval stop outlives a `kill -9` of the server: after the restart the thread is still
/// `interrupted` with the same interrupt, and `command.resume` with that interrupt's id
/// continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_stop_is_resumed_after_a_restart() {
    let model = ls_until_answered().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::with_agent_file(dir.path(), &model, None, &asks_before_ls());
    let c = super::harness::http();
    let send = |r: reqwest::RequestBuilder| async move {
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json::<serde_json::Value>().await.unwrap())
    };
    let u = served.url.clone();
    let (_, thread) = send(c.post(format!("{u}/threads")).json(&json!({}))).await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let list = json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "list"}]}});
    let (_, stopped) = send(c.post(format!("{u}/threads/{tid}/runs/wait")).json(&list)).await;
    let interrupt = stopped["__interrupt__"][0].clone();
    assert!(interrupt["id"].is_string(), "{stopped}");
    served.kill();

    let served = Served::with_agent_file(dir.path(), &model, None, &asks_before_ls());
    let u = served.url.clone();
    let (_, thread) = send(c.get(format!("{u}/threads/{tid}"))).await;
    assert_eq!(thread["status"], "interrupted", "{thread}");
    let (_, state) = send(c.get(format!("{u}/threads/{tid}/state"))).await;
    assert_eq!(state["interrupts"], json!([interrupt]), "{state}");
    let id = interrupt["id"].as_str().unwrap();
    let resume = json!({"assistant_id": "agent",
        "command": {"resume": {id: {"decisions": [{"type": "approve"}]}}}});
    let (status, out) = send(c.post(format!("{u}/threads/{tid}/runs/wait")).json(&resume)).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["messages"][3]["content"], "done", "{out}");
    let (_, thread) = send(c.get(format!("{u}/threads/{tid}"))).await;
    assert_eq!(thread["status"], "idle", "{thread}");
}
