//! The core middlewares, one by one and as a stack (with insta snapshots of what the model sees).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use trellis_middleware::core_stack::{RetryConfig, TODOS, TOKEN_USAGE, TodoStatus};
use trellis_middleware::runtime::checkpoint::Checkpoint;
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::message::{AiMessage, CacheTtl};
use trellis_middleware::runtime::model::{ModelCapabilities, ModelError, Usage};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;

use crate::common::*;

fn caching_caps(max: u32) -> ModelCapabilities {
    ModelCapabilities {
        prompt_caching: true,
        max_cache_breakpoints: max,
        tools_mid_conversation: false,
        structured_output: true,
        images: true,
        context_window: Some(200_000),
    }
}

fn exact_retry() -> ModelRetryMiddleware {
    ModelRetryMiddleware::new(RetryConfig {
        max_retries: 3,
        initial_delay: Duration::from_secs(1),
        multiplier: 2.0,
        max_delay: Duration::from_secs(60),
        jitter: 0.0,
        respect_retry_after: true,
    })
}

fn overloaded() -> ModelError {
    ModelError::Overloaded {
        message: "busy".into(),
        retry_after: None,
        http: None,
    }
}

#[tokio::test(start_paused = true)]
async fn retry_backs_off_exponentially_and_honours_retry_after() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_error(overloaded())
            .then_error(ModelError::RateLimited {
                message: "slow down".into(),
                retry_after: Some(Duration::from_secs(5)),
                http: None,
            })
            .then_text("finally"),
    );
    let agent = Agent::builder(model.clone())
        .middleware(exact_retry())
        .build()
        .unwrap();
    let (sink, mut rx) = EventSink::channel();
    let start = tokio::time::Instant::now();
    let out = agent.run(RunInput::human("hi").events(sink)).await.unwrap();

    // 1 s backoff, then max(2 s backoff, 5 s retry-after).
    assert_eq!(start.elapsed(), Duration::from_secs(6));
    assert_eq!(model.calls(), 3);
    assert_eq!(out.final_text().as_deref(), Some("finally"));
    let mut delays = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let RunEvent::Middleware {
            middleware,
            kind,
            data,
        } = event
        {
            assert_eq!((middleware.as_str(), kind.as_str()), ("model_retry", "retry"));
            delays.push(data["delay_ms"].as_u64().unwrap());
        }
    }
    assert_eq!(delays, [1000, 5000]);
}

#[tokio::test(start_paused = true)]
async fn retry_surfaces_permanent_errors_at_once_and_gives_up_after_the_limit() {
    let model = Arc::new(ScriptedModel::new().then_error(ModelError::BadRequest {
        message: "no".into(),
        http: None,
    }));
    let agent = Agent::builder(model.clone())
        .middleware(exact_retry())
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let err = agent.run(RunInput::human("hi")).await.unwrap_err();
    assert!(matches!(err, AgentError::Model(ModelError::BadRequest { .. })));
    assert_eq!(model.calls(), 1);
    assert_eq!(start.elapsed(), Duration::ZERO);

    let model = Arc::new(
        ScriptedModel::new()
            .then_error(overloaded())
            .then_error(overloaded())
            .then_error(overloaded())
            .then_error(ModelError::Transport {
                message: "reset".into(),
                http: None,
            })
            .then_text("too late"),
    );
    let agent = Agent::builder(model.clone())
        .middleware(exact_retry())
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let err = agent.run(RunInput::human("hi")).await.unwrap_err();
    assert!(
        matches!(err, AgentError::Model(ModelError::Transport { .. })),
        "{err:?}"
    );
    assert_eq!(model.calls(), 4, "one attempt and three retries");
    assert_eq!(start.elapsed(), Duration::from_secs(1 + 2 + 4));
}

fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
    }
}

#[tokio::test]
async fn token_usage_accumulates_per_thread_across_runs() {
    let model = Arc::new(
        ScriptedModel::new()
            .with_id("m1")
            .then(
                ModelResponse::new(AiMessage::tool_calls([call("c", "echo", json!({"text": "x"}))]))
                    .with_usage(usage(100, 10, 0, 50)),
            )
            .then(ModelResponse::new(AiMessage::text("a")).with_usage(usage(20, 5, 50, 0)))
            .then(ModelResponse::new(AiMessage::text("b")).with_usage(usage(30, 7, 50, 0))),
    );
    let agent = Agent::builder(model)
        .tool(echo_tool())
        .middleware(TokenUsageMiddleware::new())
        .build()
        .unwrap();
    let first = agent.run(RunInput::human("one")).await.unwrap();
    let second = agent
        .run(RunInput::human("two").thread(first.thread_id))
        .await
        .unwrap();
    let totals = second.state.get(&TOKEN_USAGE).unwrap().unwrap();
    assert_eq!(totals.total, usage(150, 22, 100, 50));
    assert_eq!(totals.last, Some(usage(30, 7, 50, 0)));
    assert_eq!(totals.model_calls, 3);
    assert_eq!(totals.by_model["m1"], totals.total);
    assert_eq!(
        second.usage,
        usage(30, 7, 50, 0),
        "run usage covers this run only"
    );
}

/// Appends a block that changes every call, as memory does.
#[derive(Debug)]
struct Volatile;

#[async_trait]
impl Middleware for Volatile {
    fn name(&self) -> &str {
        "volatile"
    }
    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        let text = format!("changes: {}", state.messages.len());
        request.push_system(SystemBlock::new(text).with_cache_breakpoint(CacheTtl::FiveMinutes));
        next.run(request, state, cx).await
    }
}

fn breakpoints(req: &ModelRequest) -> (Vec<bool>, Vec<bool>) {
    (
        req.system.iter().map(|b| b.cache_breakpoint.is_some()).collect(),
        req.messages
            .iter()
            .map(|m| m.meta().cache_breakpoint.is_some())
            .collect(),
    )
}

#[tokio::test]
async fn prompt_caching_marks_the_stable_prefix_and_respects_the_limit() {
    for (caps, expected_system, expected_last_message) in [
        // Stable block marked, volatile block brings its own, conversation marked: 3 of 4.
        (caching_caps(4), vec![false, true, true], true),
        // Limit 2: the conversation breakpoint is not placed.
        (caching_caps(2), vec![false, true, true], false),
        // Limit 1: the volatile block's breakpoint is trimmed by the loop.
        (caching_caps(1), vec![false, true, false], false),
        // No caching: nothing is added by the middleware.
        (ModelCapabilities::default(), vec![false, false, true], false),
    ] {
        let model = Arc::new(ScriptedModel::new().with_capabilities(caps).then_text("ok"));
        let agent = Agent::builder(model.clone())
            .system_prompt("instructions")
            .system_prompt("skills catalog")
            .middleware(PromptCachingMiddleware::new())
            .middleware(Volatile)
            .build()
            .unwrap();
        agent.run(RunInput::human("hi")).await.unwrap();
        let (system, messages) = breakpoints(&model.last_request().unwrap());
        assert_eq!(system, expected_system, "{caps:?}");
        assert_eq!(messages, [expected_last_message], "{caps:?}");
    }
}

#[tokio::test]
async fn todos_are_written_to_a_public_slot() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call(
                "t1",
                "write_todos",
                json!({"todos": [
                    {"content": "read the spec", "status": "completed"},
                    {"content": "write the code", "status": "in_progress"},
                ]}),
            )])
            .then_tool_calls([
                call("t2", "write_todos", json!({"todos": []})),
                call("t3", "write_todos", json!({"todos": []})),
            ])
            .then_text("done"),
    );
    let agent = Agent::builder(model.clone())
        .middleware(TodoListMiddleware::new())
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("plan")).await.unwrap();
    let todos = out.state.get(&TODOS).unwrap().unwrap();
    assert_eq!(todos.len(), 2, "the double call in one turn changed nothing");
    assert_eq!(todos[1].status, TodoStatus::InProgress);
    assert_eq!(
        out.state.slots["todos"][0]["status"], "completed",
        "UIs read plain JSON"
    );
    assert!(tool_result(&out.state.messages, "t2").is_error);
    assert!(tool_result(&out.state.messages, "t3").is_error);
    let first = Message::Tool(tool_result(&out.state.messages, "t1").clone()).text();
    assert_eq!(
        first,
        "Todo list updated:\n1. [completed] read the spec\n2. [in_progress] write the code"
    );
    let req = model.last_request().unwrap();
    assert_eq!(req.system.last().unwrap().source.as_deref(), Some("todo_list"));
    assert_eq!(req.tools[0].name, "write_todos");
}

/// The documented default order of the core stack.
fn core_agent(model: Arc<ScriptedModel>) -> Agent {
    Agent::builder(model)
        .system_prompt("You are a careful research assistant.")
        .tool(echo_tool())
        .middleware(TodoListMiddleware::new())
        .middleware(PatchToolCallsMiddleware::new())
        .middleware(ModelRetryMiddleware::new(RetryConfig {
            initial_delay: Duration::from_millis(1),
            ..RetryConfig::default()
        }))
        .middleware(TokenUsageMiddleware::new())
        .middleware(PromptCachingMiddleware::new())
        .build()
        .unwrap()
}

#[tokio::test]
async fn core_stack_requests_snapshot() {
    let model = Arc::new(
        ScriptedModel::new()
            .with_id("snapshot-model")
            .with_capabilities(caching_caps(4))
            .then(
                ModelResponse::new(AiMessage::tool_calls([call(
                    "call_todos",
                    "write_todos",
                    json!({"todos": [{"content": "Echo the greeting", "status": "in_progress"}]}),
                )]))
                .with_usage(usage(20, 30, 0, 1500)),
            )
            .then_error(overloaded())
            .then(
                ModelResponse::new(AiMessage::tool_calls([call(
                    "call_echo",
                    "echo",
                    json!({"text": "hello"}),
                )]))
                .with_usage(usage(60, 25, 1500, 50)),
            )
            .then(
                ModelResponse::new(AiMessage::text("The echo said: hello"))
                    .with_usage(usage(15, 12, 1550, 40)),
            ),
    );
    let agent = core_agent(model.clone());
    let thread = ThreadId::new("snapshot-thread").unwrap();
    let out = agent
        .run(RunInput::human("Please echo hello.").thread(thread))
        .await
        .unwrap();
    assert_eq!(out.final_text().as_deref(), Some("The echo said: hello"));

    let requests = model.requests();
    assert_eq!(requests.len(), 4, "three turns plus one retried call");
    assert_eq!(requests[1], requests[2], "a retry resends the identical request");
    // Every request starts with byte-identical system text (the cached prefix).
    for r in &requests {
        assert_eq!(r.system, requests[0].system);
    }
    insta::assert_yaml_snapshot!("core_stack_requests", requests);
    insta::assert_yaml_snapshot!("core_stack_final_state", out.state);
    assert_eq!(out.usage, usage(95, 67, 3050, 1590));
}

#[tokio::test]
async fn core_stack_resumes_an_interrupted_thread_snapshot() {
    // A thread whose last reply's calls never got results.
    let checkpointer = Arc::new(InMemoryCheckpointer::new());
    let thread = ThreadId::new("interrupted").unwrap();
    let mut state = State::with_messages(vec![
        Message::human("List the files."),
        Message::Ai(AiMessage::tool_calls([call(
            "call_ls",
            "echo",
            json!({"text": "ls"}),
        )])),
    ]);
    state.set(&TODOS, vec![]);
    checkpointer
        .save(Checkpoint::new(thread.clone(), 0, state), None)
        .await
        .unwrap();

    let model = Arc::new(
        ScriptedModel::new()
            .with_capabilities(caching_caps(4))
            .then_text("Sorry, that was interrupted. Retrying is safe."),
    );
    let agent = Agent::builder(model.clone())
        .checkpointer(checkpointer)
        .middleware(PatchToolCallsMiddleware::new())
        .middleware(PromptCachingMiddleware::new())
        .build()
        .unwrap();
    agent
        .run(RunInput::human("Are you there?").thread(thread))
        .await
        .unwrap();
    insta::assert_yaml_snapshot!("resumed_interrupted_request", model.requests());
}
