//! The loop and every hook, against the scripted model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use serde_json::{Value, json};
use tokio::sync::{Barrier, Notify};
use trellis_middleware::*;

#[tokio::test]
async fn hooks_run_in_the_documented_order() {
    let log = Log::default();
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call("c1", "echo", json!({"text": "x"}))])
            .then_text("done"),
    );
    let agent = Agent::builder(model.clone())
        .tool(echo_tool())
        .middleware(Recorder {
            name: "a",
            log: log.clone(),
        })
        .middleware(Recorder {
            name: "b",
            log: log.clone(),
        })
        .build()
        .unwrap();
    agent.run(RunInput::human("hi")).await.unwrap();

    let model_turn = [
        "a.before_model",
        "b.before_model",
        "a.wrap_model_call>",
        "b.wrap_model_call>",
        "b.wrap_model_call<",
        "a.wrap_model_call<",
        "b.after_model",
        "a.after_model",
    ];
    let mut expected = vec!["a.before_agent", "b.before_agent"];
    expected.extend(model_turn);
    expected.extend([
        "a.wrap_tool_call>echo",
        "b.wrap_tool_call>echo",
        "b.wrap_tool_call<",
        "a.wrap_tool_call<",
    ]);
    expected.extend(model_turn);
    expected.extend(["b.after_agent", "a.after_agent"]);
    assert_eq!(log.entries(), expected);
}

/// Sends the model back once with an injected message, then lets the run finish.
#[derive(Debug, Default)]
struct ReviseOnce {
    calls: AtomicUsize,
}

#[async_trait]
impl Middleware for ReviseOnce {
    fn name(&self) -> &str {
        "revise_once"
    }

    async fn after_agent(&self, _state: &mut State, _cx: &RunContext) -> Result<AfterAgent, AgentError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            Ok(AfterAgent::JumpToModel(vec![Message::injected(
                "Please cite a source.",
                "revise_once",
                Some("Reviewer".into()),
            )]))
        } else {
            Ok(AfterAgent::Finish)
        }
    }
}

#[tokio::test]
async fn after_agent_can_send_control_back_to_the_model() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_text("draft")
            .then_text("final, with a source"),
    );
    let reviser = Arc::new(ReviseOnce::default());
    let log = Log::default();
    let agent = Agent::builder(model.clone())
        .middleware_arc(reviser.clone())
        // Registered later, so its after_agent runs first; it must run on both finishes.
        .middleware(Recorder {
            name: "inner",
            log: log.clone(),
        })
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("write")).await.unwrap();

    assert_eq!(out.model_calls, 2);
    assert_eq!(out.final_text().as_deref(), Some("final, with a source"));
    assert_eq!(reviser.calls.load(Ordering::SeqCst), 2);
    let second = &model.requests()[1];
    let injected = second.messages.last().unwrap();
    assert_eq!(injected.source(), Some("revise_once"));
    assert_eq!(injected.meta().display_name.as_deref(), Some("Reviewer"));
    assert_eq!(
        shape(&out.state.messages),
        [
            "human:write",
            "ai:draft",
            "human:Please cite a source.",
            "ai:final, with a source"
        ]
    );
    assert_eq!(
        log.entries().iter().filter(|e| *e == "inner.after_agent").count(),
        2
    );
}

/// A tool whose calls meet at a barrier (so they must run concurrently) and then finish in an
/// order set by their arguments: `{"id": "a", "after": "b"}` finishes only after `b` finished.
#[derive(Debug)]
struct Rendezvous {
    barrier: Barrier,
    done: HashMap<&'static str, Notify>,
    finished: Log,
}

#[async_trait]
impl AgentTool for Rendezvous {
    fn name(&self) -> &str {
        "rendezvous"
    }
    fn description(&self) -> &str {
        "test"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
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

#[tokio::test]
async fn the_step_limit_is_a_typed_error_and_the_thread_keeps_its_steps() {
    let model = Arc::new(ScriptedModel::from_fn(|req| {
        let n = req.messages.len();
        Ok(ModelResponse::new(AiMessage::tool_calls([ToolCall::new(
            format!("c{n}"),
            "echo",
            json!({"text": "again"}),
        )])))
    }));
    let agent = Agent::builder(model.clone())
        .tool(echo_tool())
        .max_steps(3)
        .build()
        .unwrap();
    let thread = ThreadId::new("looping").unwrap();
    let err = agent
        .run(RunInput::human("loop").thread(thread.clone()))
        .await
        .unwrap_err();

    match &err {
        AgentError::StepLimit { limit, thread_id } => {
            assert_eq!(*limit, 3);
            assert_eq!(thread_id, &thread);
        }
        other => panic!("expected a step limit, got {other:?}"),
    }
    assert!(err.to_string().contains("3 model calls"), "{err}");
    assert_eq!(model.calls(), 3);
    let saved = agent.state(&thread).await.unwrap().unwrap();
    assert_eq!(saved.messages.len(), 1 + 3 * 2, "every step was checkpointed");
    // A per-run override.
    let err = agent
        .run(RunInput::human("more").thread(thread).max_steps(1))
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::StepLimit { limit: 1, .. }));
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
impl AgentTool for Hang {
    fn name(&self) -> &str {
        "hang"
    }
    fn description(&self) -> &str {
        "never returns"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
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
            "tool:e1!",
            "human:again"
        ]
    );
    assert_eq!(req.messages[2].source(), Some("patch_tool_calls"));
    assert_eq!(out.final_text().as_deref(), Some("resumed"));
}

static UNLOCKED: Slot<bool> = Slot::private("_unlocked");

/// Offers `secret` only after `unlock` ran.
#[derive(Debug)]
struct Gate;

#[async_trait]
impl Middleware for Gate {
    fn name(&self) -> &str {
        "gate"
    }
    fn tools(&self) -> Vec<Arc<dyn AgentTool>> {
        vec![Arc::new(FnTool::new(
            "unlock",
            "unlock",
            object_schema(),
            |_| async move { Ok(ToolOutput::text("unlocked").with_update(&UNLOCKED, true)) },
        ))]
    }
    async fn request_tools(
        &self,
        state: &State,
        _cx: &RunContext,
    ) -> Result<Vec<Arc<dyn AgentTool>>, AgentError> {
        if state.get(&UNLOCKED)?.copied().unwrap_or(false) {
            Ok(vec![Arc::new(FnTool::new(
                "secret",
                "secret",
                object_schema(),
                |_| async move { Ok(ToolOutput::text("42")) },
            ))])
        } else {
            Ok(Vec::new())
        }
    }
}

#[tokio::test]
async fn request_tools_are_offered_per_call_and_only_offered_tools_run() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call("s1", "secret", json!({}))])
            .then_tool_calls([call("u", "unlock", json!({}))])
            .then_tool_calls([call("s2", "secret", json!({}))])
            .then_text("the answer is 42"),
    );
    let agent = Agent::builder(model.clone()).middleware(Gate).build().unwrap();
    let out = agent.run(RunInput::human("hi")).await.unwrap();

    let names =
        |i: usize| -> Vec<String> { model.requests()[i].tools.iter().map(|t| t.name.clone()).collect() };
    assert_eq!(names(0), ["unlock"]);
    assert_eq!(names(2), ["unlock", "secret"]);
    assert!(tool_result(&out.state.messages, "s1").is_error);
    assert!(!tool_result(&out.state.messages, "s2").is_error);
    assert!(!out.state.slots.contains_key("_unlocked"), "private slot leaked");
}

/// Adds a system block and sends the call to another model.
#[derive(Debug)]
struct SwapModel(Arc<ScriptedModel>);

#[async_trait]
impl Middleware for SwapModel {
    fn name(&self) -> &str {
        "swap"
    }
    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        request.push_system(SystemBlock::new("extra").with_source("swap"));
        next.with_model(self.0.clone()).run(request, state, cx).await
    }
}

/// Records the id of the model its `Next` reaches.
#[derive(Debug)]
struct SeesModel(Log);

#[async_trait]
impl Middleware for SeesModel {
    fn name(&self) -> &str {
        "sees_model"
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        self.0.push(next.model().id());
        next.run(request, state, cx).await
    }
}

#[tokio::test]
async fn wrap_model_call_edits_the_request_and_can_swap_the_model() {
    let configured = Arc::new(ScriptedModel::new().with_id("configured"));
    let other = Arc::new(ScriptedModel::new().with_id("other").then_text("from other"));
    let seen = Log::default();
    let agent = Agent::builder(configured.clone())
        .system_prompt("base")
        .middleware(SwapModel(other.clone()))
        .middleware(SeesModel(seen.clone()))
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("hi")).await.unwrap();
    assert_eq!(out.final_text().as_deref(), Some("from other"));
    assert_eq!(configured.calls(), 0);
    assert_eq!(seen.entries(), ["other"]);
    let req = other.last_request().unwrap();
    let texts: Vec<&str> = req.system.iter().map(|b| b.text.as_str()).collect();
    assert_eq!(texts, ["base", "extra"]);
    // The edit was to the request only.
    assert_eq!(out.state.messages.len(), 2);
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
async fn events_report_models_tools_and_checkpoints() {
    let model = Arc::new(
        ScriptedModel::new()
            .then(
                ModelResponse::new(AiMessage::tool_calls([call("c1", "echo", json!({"text": "x"}))]))
                    .with_usage(Usage {
                        input_tokens: 10,
                        output_tokens: 2,
                        ..Usage::default()
                    }),
            )
            .then_text("done"),
    );
    let agent = Agent::builder(model).tool(echo_tool()).build().unwrap();
    let (sink, mut rx) = EventSink::channel();
    let out = agent.run(RunInput::human("hi").events(sink)).await.unwrap();
    let mut kinds = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let RunEvent::ModelFinished {
            usage, tool_calls: 1, ..
        } = &event
        {
            assert_eq!(usage.input_tokens, 10);
        }
        let json = serde_json::to_value(&event).unwrap();
        kinds.push(json["event"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        kinds,
        [
            "run_started",
            "checkpoint_saved",
            "model_started",
            "model_finished",
            "checkpoint_saved",
            "tool_started",
            "tool_finished",
            "checkpoint_saved",
            "model_started",
            "model_finished",
            "checkpoint_saved",
            "checkpoint_saved",
            "run_finished",
        ]
    );
    assert_eq!(out.usage.input_tokens, 10);
}

static SECRET: Slot<String> = Slot::private("_secret");
static VISIBLE: Slot<u32> = Slot::public("visible");

/// Loads a private and a public slot once per run.
#[derive(Debug)]
struct Loader;

#[async_trait]
impl Middleware for Loader {
    fn name(&self) -> &str {
        "loader"
    }
    async fn before_agent(&self, state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        state.set(&SECRET, "token".to_owned());
        state.update(&VISIBLE, |n| *n += 1)?;
        Ok(())
    }
}

#[tokio::test]
async fn private_slots_are_checkpointed_but_never_returned() {
    let checkpointer = Arc::new(InMemoryCheckpointer::new());
    let model = Arc::new(ScriptedModel::new().then_text("one").then_text("two"));
    let agent = Agent::builder(model)
        .checkpointer(checkpointer.clone())
        .middleware(Loader)
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("hi")).await.unwrap();
    assert_eq!(out.state.slots.keys().collect::<Vec<_>>(), ["visible"]);
    let stored = checkpointer.load(&out.thread_id).await.unwrap().unwrap();
    assert_eq!(
        stored.checkpoint.state.get(&SECRET).unwrap().map(String::as_str),
        Some("token")
    );
    assert!(
        !agent
            .state(&out.thread_id)
            .await
            .unwrap()
            .unwrap()
            .slots
            .contains_key("_secret")
    );

    // Slots persist across runs of a thread.
    let out2 = agent
        .run(RunInput::human("again").thread(out.thread_id))
        .await
        .unwrap();
    assert_eq!(out2.state.get(&VISIBLE).unwrap(), Some(2));
    assert_eq!(out2.new_messages().len(), 2);
}

/// Fails in before_agent.
#[derive(Debug)]
struct FailingLoader;

#[async_trait]
impl Middleware for FailingLoader {
    fn name(&self) -> &str {
        "failing_loader"
    }
    async fn before_agent(&self, _state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        Err(AgentError::middleware(
            self.name(),
            "cannot read /memory/AGENTS.md: permission denied",
        ))
    }
}

#[tokio::test]
async fn a_middleware_error_stops_the_run_and_leaves_the_thread_unchanged() {
    let model = Arc::new(ScriptedModel::new().then_text("never"));
    let agent = Agent::builder(model.clone())
        .middleware(FailingLoader)
        .build()
        .unwrap();
    let thread = ThreadId::new("t1").unwrap();
    let err = agent
        .run(RunInput::human("hi").thread(thread.clone()))
        .await
        .unwrap_err();
    assert!(matches!(&err, AgentError::Middleware { middleware, .. } if middleware == "failing_loader"));
    assert!(err.to_string().contains("permission denied"));
    assert_eq!(model.calls(), 0);
    assert!(agent.state(&thread).await.unwrap().is_none());
}

#[tokio::test]
async fn model_errors_surface_with_their_kind() {
    let model = Arc::new(ScriptedModel::new().then_error(ModelError::Auth {
        message: "bad key".into(),
    }));
    let agent = Agent::builder(model).build().unwrap();
    let err = agent.run(RunInput::human("hi")).await.unwrap_err();
    assert!(
        matches!(err, AgentError::Model(ModelError::Auth { .. })),
        "{err:?}"
    );
}

#[test]
fn conflicting_names_are_rejected_when_building() {
    let model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new());
    let err = Agent::builder(model.clone())
        .tool(echo_tool())
        .tool(echo_tool())
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("\"echo\""), "{err}");
    let err = Agent::builder(model.clone())
        .tool(FnTool::new(
            "write_todos",
            "mine",
            object_schema(),
            |_| async move { Ok(ToolOutput::text("")) },
        ))
        .middleware(TodoListMiddleware::new())
        .build()
        .unwrap_err();
    assert!(matches!(err, AgentError::Config(_)));
    let err = Agent::builder(model)
        .middleware(TokenUsageMiddleware::new())
        .middleware(TokenUsageMiddleware::new())
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("token_usage"));
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

/// A file-tool-crate tool that reports the context it was called with.
#[derive(Debug)]
struct WhoAmI(Value);

#[async_trait]
impl trellis_fs_tools::Tool for WhoAmI {
    fn name(&self) -> &str {
        "whoami"
    }
    fn description(&self) -> &str {
        "Report the call context."
    }
    fn parameters(&self) -> &Value {
        &self.0
    }
    async fn call(&self, _args: Value, ctx: &trellis_fs_tools::ToolContext) -> trellis_fs_tools::ToolOutput {
        trellis_fs_tools::ToolOutput::text(format!(
            "thread={} user={} call={}",
            ctx.thread_id.as_deref().unwrap_or("-"),
            ctx.user.as_ref().map_or("-", |u| u.user_id.as_str()),
            ctx.call_id.as_deref().unwrap_or("-"),
        ))
    }
}

#[tokio::test]
async fn file_tools_run_in_the_loop_with_the_run_context() {
    let backend = Arc::new(trellis_backend::StateBackend::new());
    let context = trellis_fs_tools::ToolContext::new(backend.clone());
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
    let mut builder = Agent::builder(model.clone()).tool(FsTool::new(
        Arc::new(WhoAmI(json!({"type": "object"}))),
        context.clone(),
    ));
    for tool in FsTool::all(context) {
        builder = builder.tool_arc(tool);
    }
    let agent = builder.build().unwrap();
    let out = agent
        .run(
            RunInput::human("take notes")
                .thread(ThreadId::new("fs-thread").unwrap())
                .extension(trellis_fs_tools::UserIdentity::new("ada")),
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

static MODEL_CALLS_SEEN: Slot<u32> = Slot::public("model_calls_seen");

#[derive(Debug)]
struct Tenant(&'static str);

/// Counts calls in before_model, redacts the reply in after_model and tags it with the run's tenant.
#[derive(Debug)]
struct Editor;

#[async_trait]
impl Middleware for Editor {
    fn name(&self) -> &str {
        "editor"
    }
    async fn before_model(&self, state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        state.update(&MODEL_CALLS_SEEN, |n| *n += 1)?;
        Ok(())
    }
    async fn after_model(
        &self,
        response: &mut ModelResponse,
        _state: &mut State,
        cx: &RunContext,
    ) -> Result<(), AgentError> {
        for block in &mut response.message.content {
            if let ContentBlock::Text { text } = block {
                *text = text.replace("sk-123", "[redacted]");
            }
        }
        let tenant = cx.extension::<Tenant>().map_or("none", |t| t.0);
        response.message.meta.extra.insert("tenant".into(), json!(tenant));
        Ok(())
    }
}

#[tokio::test]
async fn before_and_after_model_changes_are_kept_and_structured_output_is_returned() {
    let mut answer = ModelResponse::new(AiMessage::text(r#"{"key": "sk-123"}"#));
    answer.structured_output = Some(json!({"verdict": "ok"}));
    let model = Arc::new(ScriptedModel::new().then(answer));
    let format = ResponseFormat {
        name: "verdict".into(),
        schema: json!({"type": "object"}),
        strict: true,
    };
    let agent = Agent::builder(model.clone())
        .response_format(format.clone())
        .middleware(Editor)
        .build()
        .unwrap();
    let out = agent
        .run(RunInput::human("hi").extension(Tenant("acme")))
        .await
        .unwrap();

    assert_eq!(model.last_request().unwrap().response_format, Some(format));
    assert_eq!(out.structured_output, Some(json!({"verdict": "ok"})));
    let reply = out.state.messages.last().unwrap();
    assert_eq!(reply.text(), r#"{"key": "[redacted]"}"#);
    assert_eq!(reply.meta().extra["tenant"], "acme");
    assert_eq!(out.state.get(&MODEL_CALLS_SEEN).unwrap(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_send_and_can_be_spawned() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call("c", "echo", json!({"text": "x"}))])
            .then_text("spawned"),
    );
    let agent = Agent::builder(model)
        .tool(echo_tool())
        .middleware(TodoListMiddleware::new())
        .middleware(PatchToolCallsMiddleware::new())
        .middleware(ModelRetryMiddleware::default())
        .middleware(TokenUsageMiddleware::new())
        .middleware(PromptCachingMiddleware::new())
        .build()
        .unwrap();
    let handle = tokio::spawn({
        let agent = agent.clone();
        async move { agent.run(RunInput::human("go")).await }
    });
    let out = handle.await.unwrap().unwrap();
    assert_eq!(out.final_text().as_deref(), Some("spawned"));
}
