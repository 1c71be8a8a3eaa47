//! The loop's hooks, against the scripted model: their order, `after_agent` sending control back,
//! tools offered per call, `wrap_model_call` editing the request and swapping the model, and
//! `before_model` / `after_model` changes. Tools in the loop: `agent_loop/tools.rs`; runs, slots,
//! events and errors: `agent_loop/runs.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde_json::json;
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::message::{AiMessage, ContentBlock};
use trellis_middleware::runtime::model::ResponseFormat;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;

use crate::common::*;

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

static UNLOCKED: Slot<bool> = Slot::private("_unlocked");

/// Offers `secret` only after `unlock` ran.
#[derive(Debug)]
struct Gate;

#[async_trait]
impl Middleware for Gate {
    fn name(&self) -> &str {
        "gate"
    }
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(FnTool::new(
            "unlock",
            "unlock",
            object_schema(),
            |_| async move { Ok(ToolOutput::text("unlocked").with_update(&UNLOCKED, true)) },
        ))]
    }
    async fn request_tools(&self, state: &State, _cx: &RunContext) -> Result<Vec<Arc<dyn Tool>>, AgentError> {
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
