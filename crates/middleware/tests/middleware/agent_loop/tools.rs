//! Tools in the loop, against the scripted model: concurrent calls with results in call order,
//! unknown tools, failing and panicking tools and hooks, cancellation when a run is dropped, slot
//! writes from tools, invalid arguments, and file tools with the run's context.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::{Barrier, Notify};
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;

use crate::common::*;

/// A tool whose calls meet at a barrier (so they must run concurrently) and then finish in an
/// order set by their arguments: `{"id": "a", "after": "b"}` finishes only after `b` finished.
#[derive(Debug)]
struct Rendezvous {
    barrier: Barrier,
    done: HashMap<&'static str, Notify>,
    finished: Log,
}

#[async_trait]
impl Tool for Rendezvous {
    fn name(&self) -> &str {
        "rendezvous"
    }
    fn description(&self) -> &str {
        "test"
    }
    fn parameters(&self) -> &Value {
        any_args()
    }
    async fn call(&self, args: Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let id = args["id"].as_str().unwrap().to_owned();
        self.barrier.wait().await;
        if let Some(after) = args["after"].as_str() {
            self.done[after].notified().await;
        }
        self.finished.push(id.clone());
        self.done[id.as_str()].notify_one();
        Ok(ToolOutput::text(format!("result of {id}")))
    }
}

#[tokio::test]
async fn tool_calls_run_concurrently_and_results_keep_call_order() {
    let finished = Log::default();
    let tool = Rendezvous {
        barrier: Barrier::new(3),
        done: ["a", "b", "c"].into_iter().map(|k| (k, Notify::new())).collect(),
        finished: finished.clone(),
    };
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                call("a", "rendezvous", json!({"id": "a", "after": "b"})),
                call("b", "rendezvous", json!({"id": "b", "after": "c"})),
                call("c", "rendezvous", json!({"id": "c"})),
            ])
            .then_text("done"),
    );
    let agent = Agent::builder(model.clone()).tool(tool).build().unwrap();
    // Run sequentially, the first call would wait at the barrier forever.
    let out = tokio::time::timeout(Duration::from_secs(10), agent.run(RunInput::human("go")))
        .await
        .expect("tool calls did not run concurrently")
        .unwrap();

    assert_eq!(finished.entries(), ["c", "b", "a"], "completion order");
    assert_eq!(
        shape(&out.state.messages),
        [
            "human:go",
            "ai:calls[a,b,c]",
            "tool:a",
            "tool:b",
            "tool:c",
            "ai:done"
        ]
    );
    assert_eq!(
        tool_result(&out.state.messages, "a").content[0].as_text(),
        Some("result of a")
    );
}

#[tokio::test]
async fn unknown_tools_are_answered_with_the_available_ones() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call("c1", "teleport", json!({}))])
            .then_text("ok"),
    );
    let agent = Agent::builder(model.clone())
        .tool(echo_tool())
        .middleware(TodoListMiddleware::new())
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("hi")).await.unwrap();
    let result = tool_result(&out.state.messages, "c1");
    assert!(result.is_error);
    let text = Message::Tool(result.clone()).text();
    assert!(text.contains("\"teleport\""), "{text}");
    assert!(text.contains("Available tools: echo, write_todos."), "{text}");
    assert_eq!(out.final_text().as_deref(), Some("ok"));
}

#[tokio::test]
async fn failing_and_panicking_tools_become_error_results() {
    let failing = FnTool::new("fail", "fails", object_schema(), |_| async move {
        Err(ToolError::failed("disk on fire"))
    });
    let panicking = FnTool::new("panic", "panics", object_schema(), |_| async move {
        if true {
            panic!("tool bug");
        }
        Ok(ToolOutput::text("unreachable"))
    });
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                call("f", "fail", json!({})),
                call("p", "panic", json!({})),
                call("e", "echo", json!({"text": "still fine"})),
            ])
            .then_text("recovered"),
    );
    let agent = Agent::builder(model.clone())
        .tool(failing)
        .tool(panicking)
        .tool(echo_tool())
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("hi")).await.unwrap();

    let msgs = &out.state.messages;
    assert_eq!(
        shape(msgs),
        [
            "human:hi",
            "ai:calls[f,p,e]",
            "tool:f!",
            "tool:p!",
            "tool:e",
            "ai:recovered"
        ]
    );
    assert_eq!(
        Message::Tool(tool_result(msgs, "f").clone()).text(),
        "Error: disk on fire"
    );
    let panic_text = Message::Tool(tool_result(msgs, "p").clone()).text();
    assert!(panic_text.contains("panicked: tool bug"), "{panic_text}");
    // The model saw all three results.
    assert_eq!(model.requests()[1].messages.len(), 5);
}

/// Panics inside its wrap_tool_call hook.
#[derive(Debug)]
struct PanickyWrapper;

#[async_trait]
impl Middleware for PanickyWrapper {
    fn name(&self) -> &str {
        "panicky"
    }
    async fn wrap_tool_call(
        &self,
        call: ToolCall,
        cx: &ToolContext<'_>,
        next: ToolNext<'_>,
    ) -> Result<ToolOutput, AgentError> {
        if call.name == "echo" {
            panic!("hook bug");
        }
        next.run(call, cx).await
    }
}

#[tokio::test]
async fn a_panicking_tool_hook_is_an_error_result_too() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call("e", "echo", json!({"text": "x"}))])
            .then_text("ok"),
    );
    let agent = Agent::builder(model)
        .tool(echo_tool())
        .middleware(PanickyWrapper)
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("hi")).await.unwrap();
    let result = tool_result(&out.state.messages, "e");
    assert!(result.is_error);
    assert!(Message::Tool(result.clone()).text().contains("hook bug"));
}

/// Sets a flag when dropped.
struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct Hang {
    started: Arc<Notify>,
    dropped: Arc<AtomicBool>,
}

#[async_trait]
impl Tool for Hang {
    fn name(&self) -> &str {
        "hang"
    }
    fn description(&self) -> &str {
        "never returns"
    }
    fn parameters(&self) -> &Value {
        any_args()
    }
    async fn call(&self, _args: Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let _flag = DropFlag(self.dropped.clone());
        self.started.notify_one();
        std::future::pending::<()>().await;
        Ok(ToolOutput::text("unreachable"))
    }
}

#[tokio::test]
async fn dropping_a_run_cancels_its_tools_and_the_next_run_patches_the_calls() {
    let started = Arc::new(Notify::new());
    let dropped = Arc::new(AtomicBool::new(false));
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                call("h1", "hang", json!({})),
                call("e1", "echo", json!({"text": "quick"})),
            ])
            .then_text("resumed"),
    );
    let agent = Agent::builder(model.clone())
        .tool(Hang {
            started: started.clone(),
            dropped: dropped.clone(),
        })
        .tool(echo_tool())
        .middleware(PatchToolCallsMiddleware::new())
        .build()
        .unwrap();
    let thread = ThreadId::new("cancelled").unwrap();

    let run = agent.run(RunInput::human("start").thread(thread.clone()));
    tokio::select! {
        _ = run => panic!("the run cannot finish while a tool hangs"),
        _ = started.notified() => {}
    }
    assert!(
        dropped.load(Ordering::SeqCst),
        "the hanging tool was dropped with the run"
    );

    // The reply with its calls was checkpointed; the results were not.
    let saved = agent.state(&thread).await.unwrap().unwrap();
    assert_eq!(shape(&saved.messages), ["human:start", "ai:calls[h1,e1]"]);

    let out = agent.run(RunInput::human("again").thread(thread)).await.unwrap();
    let req = model.last_request().unwrap();
    assert_eq!(
        shape(&req.messages),
        [
            "human:start",
            "ai:calls[h1,e1]",
            "tool:h1!",
            // e1 finished before the run was dropped: its journaled result is kept.
            "tool:e1",
            "human:again"
        ]
    );
    assert_eq!(req.messages[2].source(), Some("patch_tool_calls"));
    assert_eq!(out.final_text().as_deref(), Some("resumed"));
}

static LAST_WRITER: Slot<String> = Slot::public("last_writer");

#[tokio::test]
async fn slot_writes_from_tools_apply_in_call_order() {
    let writer = FnTool::new("write", "write", object_schema(), |args| async move {
        let who = args["text"].as_str().unwrap_or_default().to_owned();
        Ok(ToolOutput::text("ok").with_update(&LAST_WRITER, who))
    });
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                call("1", "write", json!({"text": "first"})),
                call("2", "write", json!({"text": "second"})),
            ])
            .then_text("done"),
    );
    let agent = Agent::builder(model).tool(writer).build().unwrap();
    let out = agent.run(RunInput::human("hi")).await.unwrap();
    assert_eq!(out.state.get(&LAST_WRITER).unwrap().as_deref(), Some("second"));
}

#[tokio::test]
async fn invalid_arguments_reach_the_model_as_errors() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call("t", "write_todos", json!({"todos": "not a list"}))])
            .then_text("ok"),
    );
    let agent = Agent::builder(model)
        .middleware(TodoListMiddleware::new())
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("hi")).await.unwrap();
    let result = tool_result(&out.state.messages, "t");
    assert!(result.is_error);
    assert!(
        Message::Tool(result.clone())
            .text()
            .starts_with("Error: invalid arguments:")
    );
}

/// A tool that reports the context it was called with.
#[derive(Debug)]
struct WhoAmI(Value);

#[async_trait]
impl trellis_middleware::tools::Tool for WhoAmI {
    fn name(&self) -> &str {
        "whoami"
    }
    fn description(&self) -> &str {
        "Report the call context."
    }
    fn parameters(&self) -> &Value {
        &self.0
    }
    async fn call(&self, _args: Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!(
            "thread={} user={} call={}",
            cx.thread_id(),
            cx.user().map_or("-", |u| u.user_id.as_str()),
            cx.call_id(),
        )))
    }
}

#[tokio::test]
async fn file_tools_run_in_the_loop_with_the_run_context() {
    let backend = Arc::new(trellis_middleware::backend::StateBackend::new());
    let files = trellis_middleware::tools::FileAccess::new(backend.clone());
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call(
                "w",
                "write_file",
                json!({"file_path": "/notes.md", "content": "hello\n"}),
            )])
            .then_tool_calls([
                call("r", "read_file", json!({"file_path": "/notes.md"})),
                call("m", "read_file", json!({"file_path": "/missing.md"})),
                call("who", "whoami", json!({})),
            ])
            .then_text("done"),
    );
    let mut builder = Agent::builder(model.clone()).tool(WhoAmI(json!({"type": "object"})));
    for tool in trellis_middleware::tools::file_tools(files) {
        builder = builder.tool_arc(tool);
    }
    let agent = builder.build().unwrap();
    let out = agent
        .run(
            RunInput::human("take notes")
                .thread(ThreadId::new("fs-thread").unwrap())
                .extension(trellis_middleware::tools::UserIdentity::new("ada")),
        )
        .await
        .unwrap();

    let text = |id| Message::Tool(tool_result(&out.state.messages, id).clone()).text();
    assert!(!tool_result(&out.state.messages, "w").is_error, "{}", text("w"));
    assert!(text("r").contains("hello"), "{}", text("r"));
    assert!(tool_result(&out.state.messages, "m").is_error);
    assert!(text("m").starts_with("Error: "), "{}", text("m"));
    assert_eq!(text("who"), "thread=fs-thread user=ada call=who");
    let first = model.requests().remove(0);
    let names: Vec<&str> = first.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"read_file") && names.contains(&"grep"),
        "{names:?}"
    );
}

/// `{"type": "object"}`, for test tools that take any arguments.
fn any_args() -> &'static Value {
    static SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| json!({"type": "object"}));
    &SCHEMA
}

#[tokio::test]
async fn run_until_cancels_with_a_typed_outcome_and_the_thread_stays_usable() {
    // The second model call waits until the test cancels it (as a streamed reply would).
    let in_call = Arc::new(Notify::new());
    let entered = in_call.clone();
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call("e1", "echo", json!({"text": "saved"}))])
            .then_async(move |_| async move {
                entered.notify_one();
                std::future::pending::<()>().await;
                Ok(ModelResponse::new(AiMessage::text("unreachable")))
            })
            .then_text("after the cancel"),
    );
    let agent = Agent::builder(model.clone())
        .tool(echo_tool())
        .middleware(PatchToolCallsMiddleware::new())
        .build()
        .unwrap();
    let thread = ThreadId::new("cancel-me").unwrap();
    let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = failed.clone();
    let sink = EventSink::from_fn(move |event| {
        if let RunEvent::RunFailed { error } = event {
            seen.lock().unwrap().push(error.clone());
        }
    });
    let err = agent
        .run_until(
            RunInput::human("start").thread(thread.clone()).events(sink),
            in_call.notified(),
        )
        .await
        .unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    assert!(matches!(&err, AgentError::Cancelled { thread_id } if *thread_id == thread));
    assert_eq!(failed.lock().unwrap().len(), 1, "one RunFailed event");

    // The finished step (the call and its result) is saved whole; the cancelled one is absent.
    let saved = agent.state(&thread).await.unwrap().unwrap();
    assert_eq!(shape(&saved.messages), ["human:start", "ai:calls[e1]", "tool:e1"]);
    assert!(agent.pending_interrupt(&thread).await.unwrap().is_none());

    // The next run continues from there.
    let out = agent
        .run_until(RunInput::human("again").thread(thread), std::future::pending())
        .await
        .unwrap();
    assert_eq!(out.final_text().as_deref(), Some("after the cancel"));
    assert_eq!(
        shape(&model.last_request().unwrap().messages),
        ["human:start", "ai:calls[e1]", "tool:e1", "human:again"]
    );
}
