//! Subagents: creation (general-purpose and declared), resume by task id, concurrency (proven with
//! a barrier), no nesting, and state isolation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::Barrier;
use trellis_middleware::backend::{Backend, StateBackend, VirtualPath, WriteMode};
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::message_list::Messages;
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::subagents::SubAgent;
use trellis_middleware::subagents::{GENERAL_PURPOSE, SUBAGENT_ORIGIN, SUBAGENT_PROMPT};
use trellis_middleware::*;

use crate::common::*;

fn task(id: &str, description: &str, subagent_type: &str) -> ToolCall {
    call(
        id,
        "task",
        json!({"description": description, "subagent_type": subagent_type}),
    )
}

fn result_text(messages: &Messages, call_id: &str) -> String {
    Message::Tool(tool_result(messages, call_id).clone()).text()
}

/// The task id at the start of a `task` result.
fn task_id_of(text: &str) -> String {
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("task_id: "))
        .unwrap_or_else(|| panic!("no task id in {text:?}"))
        .to_owned()
}

fn tool_names(req: &ModelRequest) -> Vec<&str> {
    req.tools.iter().map(|t| t.name.as_str()).collect()
}

#[tokio::test]
async fn the_general_purpose_subagent_runs_on_the_parents_model_without_task() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([task("t1", "Find the answer to everything.", GENERAL_PURPOSE)])
            // The child's turns.
            .then_tool_calls([call("e1", "echo", json!({"text": "thinking"}))])
            .then_text("The answer is 42.")
            // The parent's last turn.
            .then_text("It is 42."),
    );
    let gp = SubAgent::general_purpose().tool(Arc::new(echo_tool()));
    let agent = Agent::builder(model.clone())
        .system_prompt("You are the main agent.")
        .tool(echo_tool())
        .middleware(SubAgentMiddleware::new([gp]).unwrap())
        .build()
        .unwrap();
    let (sink, mut rx) = EventSink::channel();
    let out = agent
        .run(RunInput::human("What is the answer?").events(sink))
        .await
        .unwrap();
    assert_eq!(out.final_text().as_deref(), Some("It is 42."));

    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(tool_names(&requests[0]), ["echo", "task"]);
    let child = &requests[1];
    assert_eq!(child.system[0].text, SUBAGENT_PROMPT);
    assert_eq!(shape(&child.messages), ["human:Find the answer to everything."]);
    assert_eq!(tool_names(child), ["echo"], "no task tool in a subagent");

    // The parent sees one result: the task id and the final answer, nothing of the child's steps.
    let text = result_text(&out.state.messages, "t1");
    let id = task_id_of(&text);
    assert!(id.starts_with("task-"));
    assert_eq!(text, format!("task_id: {id}\n\nThe answer is 42."));
    assert_eq!(
        shape(&out.state.messages),
        [
            "human:What is the answer?",
            "ai:calls[t1]",
            "tool:t1",
            "ai:It is 42."
        ]
    );
    insta::assert_yaml_snapshot!("task_tool_spec", requests[0].tool("task").unwrap());

    let mut kinds = Vec::new();
    while let Ok(event) = rx.try_recv() {
        match event {
            RunEvent::Middleware {
                middleware,
                kind,
                data,
            } if middleware == "subagents" => {
                if kind == "task_finished" {
                    assert_eq!(data["model_calls"], 2);
                    assert_eq!(data["task_id"], id.as_str());
                    assert_eq!(data["interrupted"], false);
                }
                kinds.push(kind);
            }
            RunEvent::Subagent {
                call_id,
                task_id,
                subagent_type,
                ..
            } => {
                // The child's events arrive wrapped, naming the call and the task they belong to.
                assert_eq!((call_id.as_str(), task_id.as_str()), ("t1", id.as_str()));
                assert_eq!(subagent_type, "general-purpose");
                if kinds.last().map(String::as_str) != Some("subagent") {
                    kinds.push("subagent".to_owned());
                }
            }
            _ => {}
        }
    }
    assert_eq!(kinds, ["task_started", "subagent", "task_finished"]);
}

async fn one_skill() -> Arc<StateBackend> {
    let backend = Arc::new(StateBackend::new());
    backend
        .write(
            &VirtualPath::parse("/skills/web-research/SKILL.md").unwrap(),
            "---\nname: web-research\ndescription: Research a topic on the web and cite sources.\n---\n# Steps\n"
                .into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    backend
}

#[tokio::test]
async fn a_declared_subagent_has_its_own_prompt_tools_skills_and_model() {
    let parent_model = Arc::new(
        ScriptedModel::new()
            .with_id("parent")
            .then_tool_calls([task("t1", "Research solar panel prices.", "researcher")])
            .then_text("Summary for the user."),
    );
    let researcher_model = Arc::new(
        ScriptedModel::new()
            .with_id("researcher")
            .then_text("Prices fell 10% (source: /notes/solar.md)."),
    );
    let search = FnTool::new("search", "Search the web.", object_schema(), |_| async {
        Ok(ToolOutput::text("results"))
    });
    let source = SkillSource::new(one_skill().await, "/skills").unwrap();
    let researcher = SubAgent::new("researcher", "Finds facts on the web and cites them.")
        .system_prompt("You research topics and cite sources.")
        .tool(Arc::new(search))
        .skills(SkillsMiddleware::new(vec![source]))
        .model(researcher_model.clone());
    let agent = Agent::builder(parent_model.clone())
        .middleware(SubAgentMiddleware::new([SubAgent::general_purpose(), researcher]).unwrap())
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("How are solar prices?")).await.unwrap();
    assert_eq!(parent_model.calls(), 2, "the child never used the parent's model");
    let child = researcher_model.last_request().unwrap();
    assert_eq!(child.system[0].text, "You research topics and cite sources.");
    assert_eq!(child.system[1].source.as_deref(), Some("skills"));
    assert!(child.system[1].text.contains("web-research"));
    assert!(tool_names(&child).contains(&"search"));
    assert!(!tool_names(&child).contains(&"task"));
    assert!(
        result_text(&out.state.messages, "t1").ends_with("\n\nPrices fell 10% (source: /notes/solar.md).")
    );

    let description = parent_model.requests()[0]
        .tool("task")
        .unwrap()
        .description
        .clone();
    assert!(description.contains("- general-purpose: An agent with the same tools as you."));
    assert!(description.contains("- researcher: Finds facts on the web and cites them."));
}

#[tokio::test]
async fn unknown_types_and_bad_arguments_are_answered_as_errors() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                task("t1", "x", "nobody"),
                call("t2", "task", json!({"subagent_type": GENERAL_PURPOSE})),
                task("t3", "   ", GENERAL_PURPOSE),
            ])
            .then_text("ok"),
    );
    let agent = Agent::builder(model.clone())
        .middleware(SubAgentMiddleware::new([SubAgent::general_purpose()]).unwrap())
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("go")).await.unwrap();
    let t1 = tool_result(&out.state.messages, "t1");
    assert!(t1.is_error);
    assert!(
        result_text(&out.state.messages, "t1")
            .contains("no subagent type \"nobody\". Available types: general-purpose.")
    );
    assert!(tool_result(&out.state.messages, "t2").is_error);
    assert!(result_text(&out.state.messages, "t3").contains("description must not be empty"));
    assert_eq!(model.calls(), 2, "no child ran");

    assert!(SubAgentMiddleware::new(Vec::<SubAgent>::new()).is_err());
    assert!(SubAgentMiddleware::new([SubAgent::general_purpose(), SubAgent::general_purpose()]).is_err());
    assert!(SubAgentMiddleware::new([SubAgent::new("bad name", "x")]).is_err());
}

// ---------------------------------------------------------------- resume

/// A model step that continues the task whose id is in the last `task` result it received.
fn continue_last_task(
    call_id: &'static str,
    text: &'static str,
) -> impl FnOnce(ModelRequest) -> futures::future::Ready<Result<ModelResponse, ModelError>> {
    move |req| {
        let id = req
            .messages
            .iter()
            .rev()
            .filter_map(Message::as_tool)
            .find(|t| t.name == "task")
            .map(|t| task_id_of(&Message::Tool(t.clone()).text()))
            .unwrap();
        futures::future::ready(Ok(ModelResponse::new(AiMessage::tool_calls([call(
            call_id,
            "task",
            json!({"description": text, "subagent_type": GENERAL_PURPOSE, "task_id": id}),
        )]))))
    }
}

#[tokio::test]
async fn passing_the_task_id_continues_the_same_child_thread() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([task("t1", "Draft a haiku about rain.", GENERAL_PURPOSE)])
            .then_text("Rain on tin roofs / ...")
            .then_text("Here is a draft.")
            // Second run of the parent thread.
            .then_async(continue_last_task("t2", "Make it about snow instead."))
            .then_text("Snow on tin roofs / ...")
            .then_text("Here is the new draft."),
    );
    let checkpointer = Arc::new(InMemoryCheckpointer::new());
    let agent = Agent::builder(model.clone())
        .middleware(
            SubAgentMiddleware::new([SubAgent::general_purpose()])
                .unwrap()
                .with_checkpointer(checkpointer.clone()),
        )
        .build()
        .unwrap();
    let first = agent.run(RunInput::human("Write a haiku.")).await.unwrap();
    let id = task_id_of(&result_text(&first.state.messages, "t1"));
    let second = agent
        .run(RunInput::human("Snow, please.").thread(first.thread_id.clone()))
        .await
        .unwrap();
    let text = result_text(&second.state.messages, "t2");
    assert_eq!(task_id_of(&text), id, "the same task");
    assert!(text.ends_with("Snow on tin roofs / ..."));

    // The child's second request carries its first exchange.
    let child = &model.requests()[4];
    assert_eq!(
        shape(&child.messages),
        [
            "human:Draft a haiku about rain.",
            "ai:Rain on tin roofs / ...",
            "human:Make it about snow instead."
        ]
    );
    // The child thread is in the middleware's checkpointer, owned by the parent thread.
    let stored = checkpointer
        .load(&ThreadId::new(id.clone()).unwrap())
        .await
        .unwrap()
        .unwrap();
    let origin = stored
        .checkpoint
        .state
        .get(&SUBAGENT_ORIGIN)
        .unwrap()
        .unwrap()
        .clone();
    assert_eq!(origin.parent_thread, first.thread_id.as_str());
    assert_eq!(origin.subagent_type, GENERAL_PURPOSE);

    // Another conversation cannot continue it; an unknown id or the wrong type is refused.
    let other = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                call(
                    "x1",
                    "task",
                    json!({"description": "hi", "subagent_type": GENERAL_PURPOSE, "task_id": id}),
                ),
                call(
                    "x2",
                    "task",
                    json!({"description": "hi", "subagent_type": GENERAL_PURPOSE, "task_id": "task-nope"}),
                ),
                call(
                    "x3",
                    "task",
                    json!({"description": "hi", "subagent_type": GENERAL_PURPOSE, "task_id": "../etc"}),
                ),
            ])
            .then_text("ok"),
    );
    let intruder = Agent::builder(other.clone())
        .middleware(
            SubAgentMiddleware::new([SubAgent::general_purpose()])
                .unwrap()
                .with_checkpointer(checkpointer.clone()),
        )
        .build()
        .unwrap();
    let out = intruder.run(RunInput::human("peek")).await.unwrap();
    for id in ["x1", "x2", "x3"] {
        assert!(tool_result(&out.state.messages, id).is_error, "{id}");
        assert!(
            result_text(&out.state.messages, id).contains("there is no task"),
            "{id}"
        );
    }
    assert_eq!(other.calls(), 2, "no child ran");

    let typed = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call(
                "y1",
                "task",
                json!({"description": "hi", "subagent_type": "writer", "task_id": id}),
            )])
            .then_text("ok"),
    );
    let agent = Agent::builder(typed)
        .middleware(
            SubAgentMiddleware::new([SubAgent::general_purpose(), SubAgent::new("writer", "Writes.")])
                .unwrap()
                .with_checkpointer(checkpointer),
        )
        .build()
        .unwrap();
    let out = agent
        .run(RunInput::human("again").thread(first.thread_id))
        .await
        .unwrap();
    assert!(result_text(&out.state.messages, "y1").contains("belongs to the general-purpose subagent"));
}

// ---------------------------------------------------------------- concurrency

#[tokio::test]
async fn task_calls_in_one_step_run_concurrently() {
    // Each child's model call waits until both children are inside theirs: run one after the other,
    // the first would wait forever.
    let barrier = Arc::new(Barrier::new(2));
    let child_step = |barrier: Arc<Barrier>| {
        move |req: ModelRequest| async move {
            barrier.wait().await;
            Ok(ModelResponse::new(AiMessage::text(format!(
                "done: {}",
                req.messages[0].text()
            ))))
        }
    };
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                task("a", "Task A.", GENERAL_PURPOSE),
                task("b", "Task B.", GENERAL_PURPOSE),
            ])
            .then_async(child_step(barrier.clone()))
            .then_async(child_step(barrier.clone()))
            .then_text("Both done."),
    );
    let agent = Agent::builder(model.clone())
        .middleware(SubAgentMiddleware::new([SubAgent::general_purpose()]).unwrap())
        .build()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), agent.run(RunInput::human("Do A and B.")))
        .await
        .expect("the two tasks did not run concurrently")
        .unwrap();
    assert!(result_text(&out.state.messages, "a").ends_with("\n\ndone: Task A."));
    assert!(result_text(&out.state.messages, "b").ends_with("\n\ndone: Task B."));
    let ids = [
        task_id_of(&result_text(&out.state.messages, "a")),
        task_id_of(&result_text(&out.state.messages, "b")),
    ];
    assert_ne!(ids[0], ids[1], "each call has its own thread");
}

// ---------------------------------------------------------------- no nesting

#[tokio::test]
async fn subagents_never_get_a_task_tool() {
    // Declared: a task tool and a subagents middleware given to a subagent are left out.
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([task("t1", "Plan the trip.", "planner")])
            .then_text("Plan: ...")
            .then_text("Done."),
    );
    let nested = Arc::new(SubAgentMiddleware::new([SubAgent::general_purpose()]).unwrap());
    let planner = SubAgent::new("planner", "Plans.")
        .middleware(nested.clone())
        .tools(nested.tools())
        .tool(Arc::new(echo_tool()));
    let agent = Agent::builder(model.clone())
        .middleware(SubAgentMiddleware::new([planner]).unwrap())
        .build()
        .unwrap();
    agent.run(RunInput::human("Plan a trip.")).await.unwrap();
    assert_eq!(tool_names(&model.requests()[1]), ["echo"]);

    // Prebuilt: an agent that does have a task tool is refused when it calls it as a subagent.
    let inner_model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([task("n1", "Go deeper.", GENERAL_PURPOSE)])
            .then_text("I could not delegate, so I did it myself."),
    );
    let prebuilt = Agent::builder(inner_model.clone())
        .middleware(SubAgentMiddleware::new([SubAgent::general_purpose()]).unwrap())
        .build()
        .unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([task("t1", "Work.", "worker")])
            .then_text("Done."),
    );
    let agent = Agent::builder(model)
        .middleware(
            SubAgentMiddleware::new([SubAgent::from_agent("worker", "Works.", prebuilt.clone())]).unwrap(),
        )
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("Work.")).await.unwrap();
    assert!(result_text(&out.state.messages, "t1").ends_with("I could not delegate, so I did it myself."));
    let refused = inner_model.requests()[1].messages.last().unwrap().clone();
    let refused = refused.as_tool().unwrap();
    assert!(refused.is_error);
    assert!(
        Message::Tool(refused.clone())
            .text()
            .contains("you are the worker subagent, and subagents cannot start subagents")
    );
    assert_eq!(inner_model.calls(), 2, "no grandchild ran");
}

// ---------------------------------------------------------------- state isolation

static CHILD_SECRET: Slot<String> = Slot::private("_child_secret");
static CHILD_PUBLIC: Slot<String> = Slot::public("child_public");

/// Writes a private and a public slot in the child's state.
#[derive(Debug)]
struct ChildState;

#[async_trait]
impl Middleware for ChildState {
    fn name(&self) -> &str {
        "child_state"
    }
    async fn before_agent(&self, state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        state.set(&CHILD_SECRET, "api-key-123".into());
        state.set(&CHILD_PUBLIC, "child notes".into());
        Ok(())
    }
}

#[tokio::test]
async fn a_childs_state_never_reaches_the_parent() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([task("t1", "Look it up.", "worker")])
            .then_tool_calls([call("s1", "lookup", json!({}))])
            .then_text("The value is 7.")
            .then_text("It is 7."),
    );
    let lookup = FnTool::new("lookup", "Look up.", object_schema(), |_| async {
        Ok(ToolOutput::text(
            "intermediate raw data: value=7, token=secret-xyz",
        ))
    });
    let worker = SubAgent::new("worker", "Works.")
        .tool(Arc::new(lookup))
        .middleware(Arc::new(ChildState))
        .middleware(Arc::new(TodoListMiddleware::new()));
    let checkpointer = Arc::new(InMemoryCheckpointer::new());
    let agent = Agent::builder(model.clone())
        .middleware(
            SubAgentMiddleware::new([worker])
                .unwrap()
                .with_checkpointer(checkpointer.clone()),
        )
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("What is the value?")).await.unwrap();
    let text = result_text(&out.state.messages, "t1");
    let id = task_id_of(&text);
    assert_eq!(text, format!("task_id: {id}\n\nThe value is 7."));
    assert!(out.state.slots.is_empty(), "{:?}", out.state.slots);
    let everything = serde_json::to_string(&out.state).unwrap();
    assert!(!everything.contains("secret-xyz") && !everything.contains("api-key-123"));
    let parent = checkpointer.load(&out.thread_id).await.unwrap();
    assert!(
        parent.is_none(),
        "the parent thread lives in the parent's checkpointer"
    );

    // The child's state is intact in its own thread.
    let child = checkpointer
        .load(&ThreadId::new(id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        child
            .checkpoint
            .state
            .get(&CHILD_SECRET)
            .unwrap()
            .map(String::as_str),
        Some("api-key-123")
    );
    assert_eq!(child.checkpoint.state.messages.len(), 4);
}
