//! [`TaskTool`]: the `task` tool itself.

use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::runtime::agent::Agent;
use crate::runtime::checkpoint::Checkpointer;
use crate::runtime::context::{RunContext, ThreadId};
use crate::runtime::events::{EventSink, RunEvent};
use crate::runtime::interrupt::{AgentFrame, NestedInterrupts};
use crate::runtime::random;
use crate::runtime::run::{RunInput, RunOutput};
use crate::runtime::tools::ToolContextExt;
use crate::tools::{Extensions, Tool, ToolContext, ToolError, ToolOutput, parse_args};

use super::{NAME, SUBAGENT_ORIGIN, SubAgent, SubagentOrigin, SubagentRun, TASK_TOOL_NAME};

/// The `task` tool's arguments (see [`task_schema`] for what the model is told about each).
#[derive(Debug, Clone, Deserialize)]
pub struct TaskArgs {
    /// The brief for the subagent.
    pub description: String,
    /// Which subagent does the task.
    pub subagent_type: String,
    /// The task to continue, if any.
    #[serde(default)]
    pub task_id: Option<String>,
}

/// The JSON schema of the `task` tool's arguments.
pub fn task_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "description": {
                "type": "string",
                "description": "The complete brief for the subagent: the goal, the facts, paths and constraints it \
                    needs, and what its answer must contain. It sees nothing else of this conversation."
            },
            "subagent_type": {
                "type": "string",
                "description": "Which subagent does the task: one of the types listed in this tool's description."
            },
            "task_id": {
                "type": "string",
                "description": "Only to follow up on an earlier task: the task_id its result started with. Leave \
                    it out to start a new task."
            }
        },
        "required": ["description", "subagent_type"]
    })
}

/// Starts or continues a subagent's thread and returns its final answer; see the module docs of
/// [`crate::subagents`].
#[derive(Debug, Clone)]
pub struct TaskTool {
    subagents: Arc<Vec<SubAgent>>,
    checkpointer: Arc<dyn Checkpointer>,
    description: String,
    parameters: Value,
    max_depth: u32,
}

impl TaskTool {
    /// The tool over `subagents`, saving declared subagents' threads to `checkpointer`.
    pub fn new(subagents: Arc<Vec<SubAgent>>, checkpointer: Arc<dyn Checkpointer>) -> Self {
        let description = describe(&subagents);
        Self {
            subagents,
            checkpointer,
            description,
            parameters: task_schema(),
            max_depth: 1,
        }
    }

    /// Let this tool start subagents from runs up to `depth - 1` subagents deep (see
    /// [`SubAgentMiddleware::max_depth`](super::SubAgentMiddleware::max_depth)).
    pub fn max_depth(mut self, depth: u32) -> Self {
        self.max_depth = depth.max(1);
        self
    }

    fn types(&self) -> String {
        let names: Vec<&str> = self.subagents.iter().map(|s| s.name()).collect();
        names.join(", ")
    }

    /// Check that `task_id` is a thread this parent started with this subagent type.
    async fn check_owner(
        &self,
        agent: &Agent,
        task_id: &ThreadId,
        origin: &SubagentOrigin,
    ) -> Result<(), String> {
        let unknown = || {
            format!("there is no task {task_id} in this conversation. Leave task_id out to start a new task.")
        };
        let Some(checkpointer) = agent.checkpointer() else {
            return Err(format!(
                "the {} subagent keeps no threads, so its tasks cannot be continued. Start a new task.",
                origin.subagent_type
            ));
        };
        let stored = checkpointer
            .load(task_id)
            .await
            .map_err(|e| format!("task {task_id} could not be loaded: {e}"))?
            .ok_or_else(unknown)?;
        let found = stored
            .checkpoint
            .state
            .get(&SUBAGENT_ORIGIN)
            .ok()
            .flatten()
            .cloned();
        match found {
            Some(o) if o.parent_thread == origin.parent_thread => {
                if o.subagent_type == origin.subagent_type {
                    Ok(())
                } else {
                    Err(format!(
                        "task {task_id} belongs to the {} subagent: call task with subagent_type {:?} to continue it.",
                        o.subagent_type, o.subagent_type
                    ))
                }
            }
            _ => Err(unknown()),
        }
    }
}

/// The tool description, listing the subagent types.
fn describe(subagents: &[SubAgent]) -> String {
    let mut out = String::from(
        "Delegate a task to a subagent. The subagent works on it in a context of its own, with its own \
         tools, and returns only its final answer; its intermediate steps never enter this conversation.

Use it for work that takes many steps whose details you will not need (searching through many files, \
investigating a question, producing a draft), and for independent tasks that can run at the same time: \
call task several times in one turn and they run in parallel. Do not use it for a step you can do with \
one or two tool calls yourself.

The subagent sees nothing of this conversation, so write `description` as a complete brief: the goal, \
the relevant facts, paths and constraints, and what its answer must contain. Its answer comes back to \
you, not to the user: check it and pass on what matters.

The result starts with a line `task_id: ...`. To follow up on a task (the subagent remembers its earlier \
work), call task again with that task_id and the same subagent_type.

Subagent types:",
    );
    for s in subagents {
        let _ = write!(out, "\n- {}: {}", s.name(), s.description().trim());
    }
    out
}

/// The child's answer for the parent: its structured output, else its last text, else a note.
fn answer(out: &RunOutput) -> String {
    if let Some(v) = &out.structured_output {
        return crate::tools::canonical::Sorted(v).to_string();
    }
    match out.final_text() {
        Some(text) if !text.trim().is_empty() => text.trim_end().to_owned(),
        _ => "(The subagent finished without writing an answer.)".to_owned(),
    }
}

/// A sink forwarding a child's events to the parent's sink, each wrapped in a
/// [`RunEvent::Subagent`] naming the call, the task and the subagent type.
fn forward_events(parent: &EventSink, call_id: &str, task_id: &ThreadId, subagent_type: &str) -> EventSink {
    if !parent.is_enabled() {
        return EventSink::none();
    }
    let parent = parent.clone();
    let call_id = call_id.to_owned();
    let task_id = task_id.to_string();
    let subagent_type = subagent_type.to_owned();
    EventSink::from_fn(move |event| {
        parent.emit(RunEvent::Subagent {
            call_id: call_id.clone(),
            task_id: task_id.clone(),
            subagent_type: subagent_type.clone(),
            inner: Box::new(event),
        });
    })
}

impl TaskTool {
    async fn run_task(
        &self,
        args: TaskArgs,
        run: &RunContext,
        extensions: &Extensions,
        call_id: &str,
    ) -> Result<ToolOutput, ToolError> {
        let depth = match extensions.get::<SubagentRun>() {
            Some(inside) if inside.depth >= self.max_depth => {
                return Err(ToolError::failed(format!(
                    "you are the {} subagent, and subagents cannot start subagents. Do the work yourself.",
                    inside.subagent_type
                )));
            }
            Some(inside) => inside.depth + 1,
            None => 1,
        };
        if args.description.trim().is_empty() {
            return Err(ToolError::InvalidArguments(
                "description must not be empty".into(),
            ));
        }
        let Some(sub) = self.subagents.iter().find(|s| s.name() == args.subagent_type) else {
            return Err(ToolError::failed(format!(
                "there is no subagent type {:?}. Available types: {}.",
                args.subagent_type,
                self.types()
            )));
        };
        let agent = sub.agent(run.model(), &self.checkpointer).map_err(|e| {
            ToolError::failed(format!("the {} subagent could not be started: {e}", sub.name()))
        })?;
        let origin = SubagentOrigin {
            parent_thread: run.thread_id().to_string(),
            subagent_type: sub.name().to_owned(),
        };
        let nested = extensions.get::<NestedInterrupts>();
        // A resumed step: continue the child this call left waiting, with its decisions.
        let waiting = nested.and_then(|n| n.take_resume(call_id));
        let given = args.task_id.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let (task_id, resumed) = match (&waiting, given) {
            (Some((thread, _)), _) => (thread.clone(), true),
            (None, given) => match given {
                Some(id) => {
                    let id = ThreadId::new(id).map_err(|_| {
                    ToolError::failed(format!(
                        "there is no task {id:?} in this conversation. Leave task_id out to start a new task."
                    ))
                })?;
                    self.check_owner(&agent, &id, &origin)
                        .await
                        .map_err(ToolError::failed)?;
                    (id, true)
                }
                None => (
                    ThreadId::new(random::unique_id("task"))
                        .map_err(|e| ToolError::failed(format!("could not name the task: {e}")))?,
                    false,
                ),
            },
        };

        let mut input = match waiting {
            Some((_, decisions)) => RunInput::resume(decisions).thread(task_id.clone()),
            None => RunInput::human(args.description)
                .thread(task_id.clone())
                .slot(&SUBAGENT_ORIGIN, origin),
        };
        input.extensions = extensions.clone();
        input.extensions.insert(SubagentRun {
            parent_thread: run.thread_id().clone(),
            task_id: task_id.clone(),
            subagent_type: sub.name().to_owned(),
            depth,
        });
        input.events = forward_events(run.events(), call_id, &task_id, sub.name());

        run.emit_middleware(NAME, "task_started", || {
            json!({ "call_id": call_id, "subagent_type": sub.name(), "task_id": task_id.as_str(), "resumed": resumed })
        });
        let result = agent.run(input).await;
        run.emit_middleware(NAME, "task_finished", || match &result {
            Ok(out) => json!({
                "call_id": call_id,
                "subagent_type": sub.name(),
                "task_id": task_id.as_str(),
                "model_calls": out.model_calls,
                "usage": out.usage,
                "interrupted": out.is_interrupted(),
            }),
            Err(e) => json!({
                "call_id": call_id,
                "subagent_type": sub.name(),
                "task_id": task_id.as_str(),
                "error": e.to_string(),
            }),
        });
        Ok(match result {
            Ok(RunOutput {
                interrupt: Some(interrupt),
                ..
            }) => match nested {
                Some(nested) => {
                    let frame = AgentFrame {
                        call_id: call_id.to_owned(),
                        thread_id: task_id.to_string(),
                        agent: sub.name().to_owned(),
                    };
                    nested.raise(call_id, frame, interrupt);
                    // Not seen by the model: the step stops and this call runs again on resume.
                    ToolOutput::text(format!("task_id: {task_id}\n\n(waiting for approval)"))
                }
                None => ToolOutput::error(format!(
                    "the {} subagent stopped to wait for approval, which cannot be given here.\ntask_id: {task_id}",
                    sub.name()
                )),
            },
            Ok(out) => ToolOutput::text(format!("task_id: {task_id}\n\n{}", answer(&out))),
            Err(e) => ToolOutput::error(format!(
                "the {} subagent stopped before finishing: {e}\ntask_id: {task_id} (call task again with this \
                 task_id to let it continue)",
                sub.name()
            )),
        })
    }
}

#[async_trait]
impl Tool for TaskTool {
    fn name(&self) -> &str {
        TASK_TOOL_NAME
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn call(&self, args: Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: TaskArgs = parse_args(args)?;
        let run = cx
            .run()
            .ok_or_else(|| ToolError::failed("the task tool runs only inside an agent run"))?;
        self.run_task(args, run, cx.extensions(), cx.call_id()).await
    }
}
