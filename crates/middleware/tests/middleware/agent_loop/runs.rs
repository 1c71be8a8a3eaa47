//! Whole runs, against the scripted model: the step limit, events, private and public slots across
//! runs, middleware and model errors, name conflicts at build time, and runs on spawned tasks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::model::{ModelError, Usage};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::runtime::stream::ModelDelta;
use trellis_middleware::*;

use crate::common::*;

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
    let mut deltas = Vec::new();
    let mut saved = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let RunEvent::ModelDelta { step, delta } = &event {
            deltas.push((*step, delta.clone()));
        }
        // Each checkpoint event carries the state that checkpoint saved (so a listener need not
        // read the latest checkpoint back, which may be a later step's by then), never serialized.
        if let RunEvent::CheckpointSaved { state, .. } = &event {
            saved.push(state.get().expect("the saved state").messages.len());
            assert!(serde_json::to_value(&event).unwrap().get("state").is_none());
        }
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
            "model_stream_started",
            // A model that does not stream sends its reply's blocks whole: the call, its
            // arguments, then the finish.
            "model_delta",
            "model_delta",
            "model_delta",
            "model_finished",
            "checkpoint_saved",
            "tool_started",
            "tool_finished",
            "checkpoint_saved",
            "model_started",
            "model_stream_started",
            "model_delta",
            "model_delta",
            "model_finished",
            "checkpoint_saved",
            "checkpoint_saved",
            "run_finished",
        ]
    );
    assert_eq!(saved, [1, 2, 3, 4, 4], "human, call, result, answer, final save");
    assert_eq!(out.usage.input_tokens, 10);
    assert_eq!(
        deltas[..2],
        [
            (
                0,
                ModelDelta::ToolCall {
                    index: 0,
                    id: "c1".into(),
                    name: "echo".into()
                }
            ),
            (
                0,
                ModelDelta::ToolArguments {
                    index: 0,
                    json: r#"{"text":"x"}"#.into()
                }
            ),
        ]
    );
    assert_eq!(
        deltas[3],
        (
            1,
            ModelDelta::Text {
                index: 0,
                text: "done".into()
            }
        )
    );
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
        http: None,
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

/// A run's last save changes nothing when the answer was already saved: the Backend checkpointer
/// stores no checkpoint for it, and the run sends no `CheckpointSaved` for it, so a listener's
/// count of checkpoints (the served API numbers them) matches the thread's history.
#[tokio::test]
async fn a_save_that_stores_nothing_sends_no_checkpoint_event() {
    use trellis_middleware::backend::{StateBackend, VirtualPath};
    use trellis_middleware::runtime::checkpoint::BackendCheckpointer;
    let backend = Arc::new(StateBackend::new());
    let checkpointer =
        Arc::new(BackendCheckpointer::new(backend, VirtualPath::parse("/threads").unwrap()).unwrap());
    let model = Arc::new(
        ScriptedModel::new()
            .then(ModelResponse::new(AiMessage::tool_calls([call(
                "c1",
                "echo",
                json!({"text": "x"}),
            )])))
            .then_text("done"),
    );
    let agent = Agent::builder(model)
        .tool(echo_tool())
        .checkpointer(checkpointer.clone())
        .build()
        .unwrap();
    let (sink, mut rx) = EventSink::channel();
    let out = agent.run(RunInput::human("hi").events(sink)).await.unwrap();
    let mut saved = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let RunEvent::CheckpointSaved { state, .. } = &event {
            saved.push(state.get().unwrap().messages.len());
        }
    }
    let history = checkpointer.history(&out.thread_id).await.unwrap();
    assert_eq!(
        saved,
        [1, 2, 3, 4],
        "human, call, result, answer; the final save stored nothing"
    );
    assert_eq!(history.len(), saved.len());
    assert_eq!(history.iter().map(|h| h.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
}
