//! `POST /runs/batch` through the official Python client's `runs.create_batch`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::harness::always_done;
use super::sdk::script;
use crate::support::skip_unless_langgraph;

/// A batch starts one stateless run per payload, each on a thread of its own, answered in order;
/// a batch with one bad payload is refused whole, naming it, and starts nothing; an empty or
/// oversized batch is a 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_starts_every_run_or_none() {
    let py = skip_unless_langgraph!();
    script(
        &py,
        always_done().await,
        None,
        r#"
def payload(text, **extra):
    return {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": text}]},
            "on_completion": "keep", **extra}

async def main():
    c = get_client(url=URL, api_key=None)
    runs = await c.runs.create_batch([payload("one"), payload("two", metadata={"n": 2})])
    assert len(runs) == 2 and runs[1]["metadata"] == {"n": 2}, runs
    assert runs[0]["thread_id"] != runs[1]["thread_id"], runs
    for run, text in zip(runs, ["one", "two"]):
        out = await c.runs.join(run["thread_id"], run["run_id"])
        assert [m["content"] for m in out["messages"]] == [text, "done"], out
    before = len(await c.threads.search(limit=100))
    try:
        await c.runs.create_batch([payload("fine"), payload("bad", stream_mode="nope")])
        raise AssertionError("a bad batch was accepted")
    except Exception as e:
        assert status_of(e) == 422, e
        assert "run 1" in e.response.text, e.response.text
    await expect_status(422, c.runs.create_batch([]))
    await expect_status(422, c.runs.create_batch([payload(str(i)) for i in range(101)]))
    await asyncio.sleep(0.3)
    assert len(await c.threads.search(limit=100)) == before, "a refused batch started nothing"
    print("ok")

asyncio.run(main())
"#,
    )
    .await;
}
