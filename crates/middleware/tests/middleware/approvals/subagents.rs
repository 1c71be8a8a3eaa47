//! Approvals inside subagents: an interrupt in a subagent (one and two levels down) reaches the
//! top-level caller and resuming continues that same child; a subagent's own policy replaces the
//! inherited one; without a larger depth subagents still cannot delegate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use trellis_middleware::approvals::{Ask, InterruptOn};
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::interrupt::{Decision, Decisions};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::subagents::SubAgent;
use trellis_middleware::*;

use crate::approvals::{counting_tool, request_ids, resume, thread};
use crate::common::*;

fn task(id: &str, subagent_type: &str) -> ToolCall {
    call(
        id,
        "task",
        json!({"description": "do the thing", "subagent_type": subagent_type}),
    )
}

#[tokio::test]
async fn an_interrupt_in_a_subagent_reaches_the_caller_and_resumes_that_child() {
    let counter = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(
        ScriptedModel::new()
            // Parent: a task and a sibling call in one step.
            .then_tool_calls([task("t1", "worker"), call("c1", "count", json!({}))])
            // Child: an echo, which the inherited policy asks about.
            .then_tool_calls([call("e1", "echo", json!({"text": "deep"}))])
            // After resuming: the child's answer, then the parent's.
            .then_text("child done")
            .then_text("parent done"),
    );
    let worker = SubAgent::new("worker", "Does things.").tool(Arc::new(echo_tool()));
    let agent = Agent::builder(model.clone())
        .tool(counting_tool(counter.clone()))
        .tool(echo_tool())
        .middleware(SubAgentMiddleware::new([worker]).unwrap())
        .interrupt_on(InterruptOn::new().tool("echo", Ask::Always))
        .build()
        .unwrap();
    let out = agent
        .run(RunInput::human("delegate").thread(thread("sub")))
        .await
        .unwrap();
    assert_eq!(request_ids(&out), ["t1/e1"]);
    let request = &out.interrupt.as_ref().unwrap().requests[0];
    assert_eq!(request.call_id, "e1");
    assert_eq!(request.agents.len(), 1);
    assert_eq!(
        (
            request.agents[0].call_id.as_str(),
            request.agents[0].agent.as_str()
        ),
        ("t1", "worker")
    );
    let child = request.agents[0].thread_id.clone();
    assert_eq!(counter.load(Ordering::SeqCst), 1, "the sibling call ran once");
    assert_eq!(shape(&out.state.messages), ["human:delegate", "ai:calls[t1,c1]"]);

    let out = resume(&agent, "sub", Decisions::new().decide("t1/e1", Decision::Approve))
        .await
        .unwrap();
    assert_eq!(
        shape(&out.state.messages),
        [
            "human:delegate",
            "ai:calls[t1,c1]",
            "tool:t1",
            "tool:c1",
            "ai:parent done"
        ]
    );
    let texts = tool_texts(&out);
    assert_eq!(texts[0].0, format!("task_id: {child}\n\nchild done"));
    assert_eq!(texts[1], ("1".to_owned(), false));
    assert_eq!(
        counter.load(Ordering::SeqCst),
        1,
        "the sibling call did not run again"
    );
    // The child's approved echo ran in its own thread, which the resume continued.
    let child_request = &model.requests()[2];
    assert_eq!(
        shape(&child_request.messages),
        ["human:do the thing", "ai:calls[e1]", "tool:e1"]
    );
}

#[tokio::test]
async fn a_subagent_with_its_own_policy_does_not_inherit() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([task("t1", "trusted")])
            .then_tool_calls([call("e1", "echo", json!({"text": "x"}))])
            .then_text("child done")
            .then_text("parent done"),
    );
    let trusted = SubAgent::new("trusted", "Trusted.")
        .tool(Arc::new(echo_tool()))
        .interrupt_on(InterruptOn::new());
    let agent = Agent::builder(model)
        .middleware(SubAgentMiddleware::new([trusted]).unwrap())
        .interrupt_on(InterruptOn::new().tool("echo", Ask::Always))
        .build()
        .unwrap();
    let out = agent
        .run(RunInput::human("go").thread(thread("own")))
        .await
        .unwrap();
    assert!(!out.is_interrupted());
    assert_eq!(out.final_text().as_deref(), Some("parent done"));
}

#[tokio::test]
async fn an_interrupt_two_levels_down_is_resumed_through_both_children() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([task("t1", "manager")])
            .then_tool_calls([task("t2", "worker")])
            .then_tool_calls([call("e1", "echo", json!({"text": "bottom"}))])
            .then_text("worker done")
            .then_text("manager done")
            .then_text("top done"),
    );
    let worker = SubAgent::new("worker", "Works.").tool(Arc::new(echo_tool()));
    let manager = Agent::builder(model.clone())
        .name("manager")
        .middleware(SubAgentMiddleware::new([worker]).unwrap().max_depth(2))
        .build()
        .unwrap();
    let agent = Agent::builder(model.clone())
        .middleware(
            SubAgentMiddleware::new([SubAgent::from_agent("manager", "Manages.", manager)])
                .unwrap()
                .max_depth(2),
        )
        .interrupt_on(InterruptOn::new().tool("echo", Ask::Always))
        .build()
        .unwrap();
    let (sink, mut events) = EventSink::channel();
    let out = agent
        .run(RunInput::human("go").thread(thread("deep")).events(sink))
        .await
        .unwrap();
    assert_eq!(request_ids(&out), ["t1/t2/e1"]);
    let agents: Vec<(String, String)> = out.interrupt.as_ref().unwrap().requests[0]
        .agents
        .iter()
        .map(|f| (f.call_id.clone(), f.agent.clone()))
        .collect();
    assert_eq!(
        agents,
        [
            ("t1".to_owned(), "manager".to_owned()),
            ("t2".to_owned(), "worker".to_owned())
        ]
    );
    // The worker's interrupt reached the top through two Subagent wrappers.
    let mut deepest = Vec::new();
    while let Ok(event) = events.try_recv() {
        let (inner, path) = event.innermost();
        if matches!(inner, RunEvent::Interrupted { .. }) {
            deepest.push(
                path.iter()
                    .map(|(call, _, kind)| format!("{call}:{kind}"))
                    .collect::<Vec<_>>(),
            );
        }
    }
    assert!(
        deepest.contains(&vec!["t1:manager".to_owned(), "t2:worker".to_owned()]),
        "{deepest:?}"
    );

    let out = resume(
        &agent,
        "deep",
        Decisions::new().decide("t1/t2/e1", Decision::Approve),
    )
    .await
    .unwrap();
    assert!(!out.is_interrupted());
    assert_eq!(out.final_text().as_deref(), Some("top done"));
    assert!(tool_texts(&out)[0].0.ends_with("manager done"));
    assert_eq!(model.remaining(), 0);
}

#[tokio::test]
async fn without_depth_a_subagent_still_cannot_delegate() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([task("t1", "manager")])
            .then_tool_calls([task("t2", "worker")])
            .then_text("manager gave up")
            .then_text("top done"),
    );
    let worker = SubAgent::new("worker", "Works.");
    let manager = Agent::builder(model.clone())
        .middleware(SubAgentMiddleware::new([worker]).unwrap())
        .build()
        .unwrap();
    let agent = Agent::builder(model.clone())
        .middleware(SubAgentMiddleware::new([SubAgent::from_agent("manager", "Manages.", manager)]).unwrap())
        .build()
        .unwrap();
    agent.run(RunInput::human("go")).await.unwrap();
    let manager_request = &model.requests()[2];
    let refusal: Value = json!(Message::Tool(tool_result(&manager_request.messages, "t2").clone()).text());
    assert!(
        refusal
            .as_str()
            .unwrap()
            .contains("subagents cannot start subagents"),
        "{refusal}"
    );
}
