//! Approvals through the agent loop: a step stops before its calls run, decisions (approve, edit,
//! reject, respond) are checked and applied, several calls get their own decisions, and a thread
//! saved by one agent is resumed by another. Interrupts inside subagents are in
//! `subagents`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use trellis_middleware::approvals::{Ask, InterruptOn};
use trellis_middleware::backend::{Backend, BackendExt, FilesystemBackend, StateBackend, VirtualPath};
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::interrupt::{Decision, DecisionError, DecisionKind, Decisions};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;

use crate::common::*;

/// `count`: counts its calls and answers with the number.
pub(crate) fn counting_tool(counter: Arc<AtomicUsize>) -> FnTool {
    FnTool::new("count", "Count.", object_schema(), move |_| {
        let counter = counter.clone();
        async move {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(ToolOutput::text(n.to_string()))
        }
    })
}

/// Echo and count, asking about every echo call.
fn agent(model: Arc<ScriptedModel>, counter: Arc<AtomicUsize>) -> Agent {
    Agent::builder(model)
        .tool(echo_tool())
        .tool(counting_tool(counter))
        .interrupt_on(InterruptOn::new().tool("echo", Ask::Always))
        .build()
        .unwrap()
}

pub(crate) fn thread(id: &str) -> ThreadId {
    ThreadId::new(id).unwrap()
}

pub(crate) fn request_ids(out: &RunOutput) -> Vec<String> {
    out.interrupt
        .as_ref()
        .expect("the run stopped for decisions")
        .requests
        .iter()
        .map(|r| r.id.clone())
        .collect()
}

/// Run until the echo call waits; the model was called once and no tool ran.
async fn stopped_at_echo(agent: &Agent, model: &ScriptedModel, id: &str) -> RunOutput {
    let out = agent
        .run(RunInput::human("say hi").thread(thread(id)))
        .await
        .unwrap();
    assert_eq!(request_ids(&out), ["e1"]);
    let interrupt = out.interrupt.clone().unwrap();
    assert_eq!(interrupt.thread_id, id);
    assert_eq!(interrupt.requests[0].tool, "echo");
    assert_eq!(interrupt.requests[0].args, json!({"text": "hi"}));
    assert_eq!(interrupt.requests[0].allowed, DecisionKind::ALL);
    assert!(interrupt.requests[0].agents.is_empty());
    assert_eq!(model.calls(), 1);
    assert_eq!(shape(&out.state.messages), ["human:say hi", "ai:calls[e1]"]);
    out
}

fn echo_then(text: &str) -> Arc<ScriptedModel> {
    Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call("e1", "echo", json!({"text": "hi"}))])
            .then_text(text),
    )
}

pub(crate) async fn resume(agent: &Agent, id: &str, decisions: Decisions) -> Result<RunOutput, AgentError> {
    agent.run(RunInput::resume(decisions).thread(thread(id))).await
}

#[tokio::test]
async fn approve_runs_the_call_as_written_and_the_run_goes_on() {
    let model = echo_then("done");
    let agent = agent(model.clone(), Arc::default());
    let (sink, mut events) = EventSink::channel();
    let out = agent
        .run(RunInput::human("say hi").thread(thread("a")).events(sink))
        .await
        .unwrap();
    assert!(out.is_interrupted());
    let mut interrupted = false;
    while let Ok(event) = events.try_recv() {
        assert!(!matches!(
            event,
            RunEvent::ToolStarted { .. } | RunEvent::RunFinished { .. }
        ));
        interrupted |=
            matches!(event, RunEvent::Interrupted { step: 0, ref requests } if requests.len() == 1);
    }
    assert!(interrupted, "an Interrupted event ends the run");

    let (sink, mut events) = EventSink::channel();
    let out = agent
        .run(
            RunInput::resume(Decisions::new().decide("e1", Decision::Approve))
                .thread(thread("a"))
                .events(sink),
        )
        .await
        .unwrap();
    assert!(!out.is_interrupted());
    assert_eq!(
        shape(&out.state.messages),
        ["human:say hi", "ai:calls[e1]", "tool:e1", "ai:done"]
    );
    assert_eq!(tool_texts(&out), [("hi".to_owned(), false)]);
    assert_eq!(model.calls(), 2);
    let mut decided = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let RunEvent::Decided {
            id, tool, decision, ..
        } = event
        {
            decided.push((id, tool, decision));
        }
    }
    assert_eq!(
        decided,
        [("e1".to_owned(), "echo".to_owned(), DecisionKind::Approve)]
    );
}

#[tokio::test]
async fn edit_runs_the_new_arguments_and_the_thread_shows_them() {
    let model = echo_then("done");
    let agent = agent(model.clone(), Arc::default());
    stopped_at_echo(&agent, &model, "e").await;
    let out = resume(
        &agent,
        "e",
        Decisions::new().decide("e1", Decision::edit(json!({"text": "edited"}))),
    )
    .await
    .unwrap();
    assert_eq!(tool_texts(&out), [("edited".to_owned(), false)]);
    let ai = out.state.messages.get(1).and_then(Message::as_ai).unwrap();
    assert_eq!(ai.calls().next().unwrap().args, json!({"text": "edited"}));
    // The model's next request carries the edited call, as it ran.
    let request = model.last_request().unwrap();
    let sent = request.messages.get(1).and_then(Message::as_ai).unwrap();
    assert_eq!(sent.calls().next().unwrap().args, json!({"text": "edited"}));
}

#[tokio::test]
async fn reject_and_respond_answer_without_running_the_tool() {
    let counter = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call("c1", "count", json!({}))])
            .then_text("ok")
            .then_tool_calls([call("c2", "count", json!({}))])
            .then_text("fine"),
    );
    let agent = Agent::builder(model.clone())
        .tool(counting_tool(counter.clone()))
        .interrupt_on(InterruptOn::new().tool("count", Ask::Always))
        .build()
        .unwrap();
    let out = agent
        .run(RunInput::human("count").thread(thread("r")))
        .await
        .unwrap();
    assert_eq!(request_ids(&out), ["c1"]);
    let out = resume(
        &agent,
        "r",
        Decisions::new().decide("c1", Decision::reject("not now")),
    )
    .await
    .unwrap();
    let (text, is_error) = tool_texts(&out).remove(0);
    assert!(is_error);
    assert!(
        text.contains("rejected") && text.ends_with("Their reason: not now"),
        "{text}"
    );

    let out = agent
        .run(RunInput::human("again").thread(thread("r")))
        .await
        .unwrap();
    assert_eq!(request_ids(&out), ["c2"]);
    let out = resume(&agent, "r", Decisions::new().decide("c2", Decision::respond("7")))
        .await
        .unwrap();
    assert_eq!(tool_texts(&out)[1], ("7".to_owned(), false));
    assert_eq!(out.final_text().as_deref(), Some("fine"));
    assert_eq!(counter.load(Ordering::SeqCst), 0, "neither call ran");
}

#[tokio::test]
async fn parallel_calls_get_their_own_decisions_and_keep_call_order() {
    let counter = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                call("e1", "echo", json!({"text": "one"})),
                call("c1", "count", json!({})),
                call("e2", "echo", json!({"text": "two"})),
            ])
            .then_text("done"),
    );
    let agent = agent(model.clone(), counter.clone());
    let out = agent
        .run(RunInput::human("go").thread(thread("p")))
        .await
        .unwrap();
    assert_eq!(request_ids(&out), ["e1", "e2"], "count is not asked about");
    assert_eq!(counter.load(Ordering::SeqCst), 0, "nothing of the step ran");

    let decisions = Decisions::new()
        .decide("e1", Decision::reject("no"))
        .decide("e2", Decision::edit(json!({"text": "TWO"})));
    let out = resume(&agent, "p", decisions).await.unwrap();
    assert_eq!(
        shape(&out.state.messages),
        [
            "human:go",
            "ai:calls[e1,c1,e2]",
            "tool:e1!",
            "tool:c1",
            "tool:e2",
            "ai:done"
        ]
    );
    let texts = tool_texts(&out);
    assert_eq!(texts[1], ("1".to_owned(), false));
    assert_eq!(texts[2], ("TWO".to_owned(), false));
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn wrong_decisions_are_refused_and_change_nothing() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                call("e1", "echo", json!({"text": "a"})),
                call("d1", "delete_all", json!({})),
            ])
            .then_text("done"),
    );
    let delete_all = FnTool::new("delete_all", "Delete.", object_schema(), |_| async {
        Ok(ToolOutput::text("deleted"))
    });
    let agent = Agent::builder(model.clone())
        .tool(echo_tool())
        .tool(delete_all)
        .interrupt_on(InterruptOn::new().tool("echo", Ask::Always).tool_allowing(
            "delete_all",
            Ask::Always,
            &[DecisionKind::Approve, DecisionKind::Reject],
        ))
        .build()
        .unwrap();
    let first = agent
        .run(RunInput::human("go").thread(thread("w")))
        .await
        .unwrap();
    assert_eq!(request_ids(&first), ["e1", "d1"]);

    let refusals = [
        (Decisions::new().decide("e1", Decision::Approve), "Missing"),
        (
            Decisions::new()
                .decide("e1", Decision::Approve)
                .decide("d1", Decision::Approve)
                .decide("x9", Decision::Approve),
            "Unknown",
        ),
        (
            Decisions::new()
                .decide("e1", Decision::Approve)
                .decide("d1", Decision::edit(json!({}))),
            "NotAllowed",
        ),
        (
            Decisions::new()
                .decide("e1", Decision::edit(json!("text")))
                .decide("d1", Decision::Approve),
            "InvalidEdit",
        ),
    ];
    for (decisions, expected) in refusals {
        let err = resume(&agent, "w", decisions).await.unwrap_err();
        let AgentError::Decision(err) = err else {
            panic!("not a decision error: {err}")
        };
        assert!(format!("{err:?}").starts_with(expected), "{err:?}");
    }
    // New input while waiting is refused; asking again without decisions repeats the interrupt.
    let err = agent
        .run(RunInput::human("hello?").thread(thread("w")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, AgentError::Decision(DecisionError::AwaitingDecisions { .. })),
        "{err}"
    );
    let again = agent.run(RunInput::new().thread(thread("w"))).await.unwrap();
    assert_eq!(again.interrupt, first.interrupt);
    assert_eq!(model.calls(), 1);

    let out = resume(
        &agent,
        "w",
        Decisions::new()
            .decide("e1", Decision::Approve)
            .decide("d1", Decision::reject("keep it")),
    )
    .await
    .unwrap();
    assert_eq!(out.final_text().as_deref(), Some("done"));
    // Nothing waits now: decisions are refused.
    let err = resume(&agent, "w", Decisions::new().decide("e1", Decision::Approve))
        .await
        .unwrap_err();
    assert!(
        matches!(err, AgentError::Decision(DecisionError::NothingPending { .. })),
        "{err}"
    );
}

#[tokio::test]
async fn an_interrupt_saved_by_one_agent_is_resumed_by_another() {
    let dir = tempfile::tempdir().unwrap();
    let checkpointer = || -> Arc<dyn Checkpointer> {
        let disk: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
        Arc::new(BackendCheckpointer::new(disk, VirtualPath::parse("/threads").unwrap()).unwrap())
    };
    let build = |model: Arc<ScriptedModel>| {
        Agent::builder(model)
            .tool(echo_tool())
            // It answers dangling calls on resume, but must leave the waiting ones alone.
            .middleware(PatchToolCallsMiddleware::new())
            .interrupt_on(InterruptOn::new().tool("echo", Ask::Always))
            .checkpointer(checkpointer())
            .build()
            .unwrap()
    };
    let first_model =
        Arc::new(ScriptedModel::new().then_tool_calls([call("e1", "echo", json!({"text": "hi"}))]));
    let out = build(first_model)
        .run(RunInput::human("say hi").thread(thread("durable")))
        .await
        .unwrap();
    assert_eq!(request_ids(&out), ["e1"]);

    // A fresh agent, store and model, as another worker would have.
    let second_model = Arc::new(ScriptedModel::new().then_text("said"));
    let out = resume(
        &build(second_model.clone()),
        "durable",
        Decisions::new().decide("e1", Decision::Approve),
    )
    .await
    .unwrap();
    assert_eq!(
        shape(&out.state.messages),
        ["human:say hi", "ai:calls[e1]", "tool:e1", "ai:said"]
    );
    assert_eq!(second_model.calls(), 1);
}

#[tokio::test]
async fn a_rejected_write_file_leaves_the_backend_untouched() {
    let backend = Arc::new(StateBackend::new());
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call(
                "w1",
                "write_file",
                json!({"file_path": "/notes/plan.md", "content": "rm everything"}),
            )])
            .then_text("ok, not written"),
    );
    let agent = Agent::builder(model)
        .middleware(FilesystemMiddleware::new(backend.clone()))
        .interrupt_on(InterruptOn::new().tool("write_file", Ask::paths(["/notes/**"]).unwrap()))
        .build()
        .unwrap();
    let out = agent
        .run(RunInput::human("plan").thread(thread("wf")))
        .await
        .unwrap();
    let request = &out.interrupt.as_ref().unwrap().requests[0];
    assert_eq!(
        request.description.as_deref(),
        Some("/notes/plan.md matches /notes/**")
    );
    let path = VirtualPath::parse("/notes/plan.md").unwrap();
    assert!(
        !backend.exists(&path).await.unwrap(),
        "nothing written while waiting"
    );
    let out = resume(
        &agent,
        "wf",
        Decisions::new().decide("w1", Decision::reject("no")),
    )
    .await
    .unwrap();
    assert!(
        !backend.exists(&path).await.unwrap(),
        "nothing written after the rejection"
    );
    assert!(tool_texts(&out)[0].1);
}

#[tokio::test]
async fn a_waiting_step_belongs_to_its_thread_and_no_other_can_answer_it() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call("e1", "echo", json!({"text": "hi"}))])
            .then_text("done"),
    );
    let agent = agent(model.clone(), Arc::default());
    stopped_at_echo(&agent, &model, "mine").await;
    // Another thread of the same agent sees nothing waiting and cannot answer mine.
    assert_eq!(agent.pending_interrupt(&thread("other")).await.unwrap(), None);
    let err = resume(&agent, "other", Decisions::new().decide("e1", Decision::Approve))
        .await
        .unwrap_err();
    assert!(
        matches!(err, AgentError::Decision(DecisionError::NothingPending { .. })),
        "{err}"
    );
    let waiting = agent.pending_interrupt(&thread("mine")).await.unwrap().unwrap();
    assert_eq!(waiting.thread_id, "mine");
    assert_eq!(model.calls(), 1, "nothing ran for the other thread");
    let out = resume(&agent, "mine", Decisions::new().decide("e1", Decision::Approve))
        .await
        .unwrap();
    assert_eq!(out.final_text().as_deref(), Some("done"));
}

mod subagents;
