//! Subagents: the `task` tool, which hands a self-contained task to another agent working in a
//! context of its own.
//!
//! [`SubAgentMiddleware`] offers one tool, `task` (`description`, `subagent_type`, optional
//! `task_id`), whose description lists the available [`SubAgent`]s. A call:
//!
//! 1. refuses to run inside a subagent (subagents never get a `task` tool: declared ones have it and
//!    any middleware offering it filtered out, and a prebuilt agent that still has one is refused at
//!    call time), and refuses unknown subagent types;
//! 2. builds the child [`Agent`] (cheap, no I/O): a declared subagent gets its own prompt, tools,
//!    middleware (skills among them) and model — the parent's model when it names none; a prebuilt
//!    agent is used as is;
//! 3. starts a new child thread (`task-…`), or continues the one named by `task_id` — only a thread
//!    this parent thread started, with the same subagent type (recorded in the child's private
//!    [`SUBAGENT_ORIGIN`] slot);
//! 4. runs it with the task as the only new user message, the parent's run extensions (identity,
//!    roles, the approval policy it inherits) plus a [`SubagentRun`] marker, and the parent's event
//!    sink (child events are forwarded wrapped in [`RunEvent::Subagent`](crate::runtime::events::RunEvent::Subagent));
//! 5. returns `task_id: <id>` and the child's final answer (its structured output, when it has one)
//!    — nothing else of the child's state reaches the parent.
//!
//! When the child stops to wait for decisions on its tool calls, the call raises that interrupt to
//! the parent's step ([`NestedInterrupts`](crate::runtime::interrupt::NestedInterrupts)), so it reaches the top-level
//! caller; resuming the parent runs this call again, which resumes that same child thread.
//!
//! Several `task` calls of one step run concurrently (the loop runs a step's tool calls
//! concurrently). Child threads are saved to the middleware's checkpointer (in memory unless
//! [`SubAgentMiddleware::with_checkpointer`] names one; prebuilt agents use their own).

mod task_tool;

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use task_tool::{TaskArgs, TaskTool, task_schema};

use crate::runtime::agent::Agent;
use crate::runtime::checkpoint::{Checkpointer, InMemoryCheckpointer};
use crate::runtime::context::ThreadId;
use crate::runtime::error::AgentError;
use crate::runtime::interrupt::ToolGate;
use crate::runtime::middleware::Middleware;
use crate::runtime::model::{ChatModel, ResponseFormat};
use crate::runtime::state::Slot;
use crate::skills::SkillsMiddleware;
use crate::tools::Tool;

/// The middleware's name and the source of its events.
pub const NAME: &str = "subagents";
/// The tool's name.
pub const TASK_TOOL_NAME: &str = "task";
/// The general-purpose subagent's type name.
pub const GENERAL_PURPOSE: &str = "general-purpose";

/// How the general-purpose subagent is described to the main agent.
pub const GENERAL_PURPOSE_DESCRIPTION: &str = "\
An agent with the same tools as you. Use it for research, investigations that take many steps, and \
self-contained pieces of work whose intermediate steps you do not need to see.";

/// The default system prompt of a declared subagent.
pub const SUBAGENT_PROMPT: &str = "\
You are a subagent: another agent gave you one task and is waiting for your answer. Work on it with \
your tools until it is done, or until you are sure it cannot be done. Nobody can answer questions while \
you work: make reasonable assumptions and say which ones you made.

Your final message is the only thing the other agent receives - it does not see your tool calls or \
their results. Make that message complete and self-contained: the result, the facts it rests on (with \
file paths or sources), and anything you could not do. Keep it as short as that allows.";

/// Who started a subagent thread (kept in the child's private state).
pub static SUBAGENT_ORIGIN: Slot<SubagentOrigin> = Slot::private("_subagent_origin");

/// The parent of a subagent thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentOrigin {
    /// The parent thread.
    pub parent_thread: String,
    /// The subagent type the thread was started with.
    pub subagent_type: String,
}

/// A run extension present in every subagent run (find it with `RunContext::extension`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubagentRun {
    /// The parent thread.
    pub parent_thread: ThreadId,
    /// The child thread (the task id).
    pub task_id: ThreadId,
    /// The subagent type.
    pub subagent_type: String,
    /// How many subagents deep this run is: 1 for a subagent of the top-level agent.
    pub depth: u32,
}

/// What a declared subagent is made of.
#[derive(Debug, Clone)]
struct Spec {
    system_prompt: String,
    tools: Vec<Arc<dyn Tool>>,
    middleware: Vec<Arc<dyn Middleware>>,
    model: Option<Arc<dyn ChatModel>>,
    max_steps: Option<u32>,
    response_format: Option<ResponseFormat>,
    gate: Option<Arc<dyn ToolGate>>,
}

#[derive(Debug, Clone)]
enum Kind {
    Spec(Box<Spec>),
    Agent(Agent),
}

/// A subagent the `task` tool can start: declared (prompt, tools, middleware, model) or prebuilt.
#[derive(Debug, Clone)]
pub struct SubAgent {
    name: String,
    description: String,
    kind: Kind,
}

impl SubAgent {
    /// A declared subagent named `name` (the `subagent_type` the model passes), described to the
    /// main agent by `description`; prompt [`SUBAGENT_PROMPT`], no tools, the parent's model.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            kind: Kind::Spec(Box::new(Spec {
                system_prompt: SUBAGENT_PROMPT.to_owned(),
                tools: Vec::new(),
                middleware: Vec::new(),
                model: None,
                max_steps: None,
                response_format: None,
                gate: None,
            })),
        }
    }

    /// The general-purpose subagent ([`GENERAL_PURPOSE`]): give it the main agent's tools and
    /// middleware (without `task` and memory).
    pub fn general_purpose() -> Self {
        Self::new(GENERAL_PURPOSE, GENERAL_PURPOSE_DESCRIPTION)
    }

    /// A prebuilt agent as a subagent. Its checkpointer keeps its threads; without one, tasks
    /// cannot be continued. It must not offer a `task` tool (a call to it is refused).
    pub fn from_agent(name: impl Into<String>, description: impl Into<String>, agent: Agent) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            kind: Kind::Agent(agent),
        }
    }

    fn spec(&mut self) -> Option<&mut Spec> {
        match &mut self.kind {
            Kind::Spec(spec) => Some(spec),
            Kind::Agent(_) => {
                tracing::warn!(subagent = %self.name, "a prebuilt subagent ignores declared settings");
                None
            }
        }
    }

    /// Replace the system prompt (declared subagents).
    pub fn system_prompt(mut self, text: impl Into<String>) -> Self {
        if let Some(spec) = self.spec() {
            spec.system_prompt = text.into();
        }
        self
    }

    /// Add a tool (declared subagents). A tool named `task` is dropped when the child is built.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        if let Some(spec) = self.spec() {
            spec.tools.push(tool);
        }
        self
    }

    /// Add tools (declared subagents).
    pub fn tools(self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        tools.into_iter().fold(self, Self::tool)
    }

    /// Add a middleware, after the ones added before (declared subagents). A subagents middleware,
    /// or any middleware offering a `task` tool, is dropped when the child is built.
    pub fn middleware(mut self, middleware: Arc<dyn Middleware>) -> Self {
        if let Some(spec) = self.spec() {
            spec.middleware.push(middleware);
        }
        self
    }

    /// Add middlewares, in order (declared subagents).
    pub fn middlewares(self, middleware: impl IntoIterator<Item = Arc<dyn Middleware>>) -> Self {
        middleware.into_iter().fold(self, Self::middleware)
    }

    /// Give the subagent its own skills (declared subagents).
    pub fn skills(self, skills: SkillsMiddleware) -> Self {
        self.middleware(Arc::new(skills))
    }

    /// Run on `model` instead of the parent's (declared subagents).
    pub fn model(mut self, model: Arc<dyn ChatModel>) -> Self {
        if let Some(spec) = self.spec() {
            spec.model = Some(model);
        }
        self
    }

    /// Most model calls per task run (declared subagents).
    pub fn max_steps(mut self, max_steps: u32) -> Self {
        if let Some(spec) = self.spec() {
            spec.max_steps = Some(max_steps);
        }
        self
    }

    /// Ask for a structured final answer, returned to the parent as JSON (declared subagents).
    pub fn response_format(mut self, format: ResponseFormat) -> Self {
        if let Some(spec) = self.spec() {
            spec.response_format = Some(format);
        }
        self
    }

    /// Its own approval policy (declared subagents); without one it uses the policy of the agent
    /// that started it. `InterruptOn::new()` asks about nothing.
    pub fn interrupt_on(mut self, gate: impl ToolGate + 'static) -> Self {
        if let Some(spec) = self.spec() {
            spec.gate = Some(Arc::new(gate));
        }
        self
    }

    /// The subagent type name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the subagent is described to the main agent.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The child agent for one task: declared subagents are assembled on `parent_model` (unless they
    /// name a model) with `checkpointer`, without any `task` tool.
    pub(crate) fn agent(
        &self,
        parent_model: &Arc<dyn ChatModel>,
        checkpointer: &Arc<dyn Checkpointer>,
    ) -> Result<Agent, AgentError> {
        let spec = match &self.kind {
            Kind::Agent(agent) => return Ok(agent.clone()),
            Kind::Spec(spec) => spec,
        };
        let model = spec.model.clone().unwrap_or_else(|| parent_model.clone());
        let mut builder = Agent::builder(model)
            .name(self.name.clone())
            .system_prompt(spec.system_prompt.clone())
            .checkpointer(checkpointer.clone());
        for tool in spec.tools.iter().filter(|t| t.name() != TASK_TOOL_NAME) {
            builder = builder.tool_arc(tool.clone());
        }
        for m in &spec.middleware {
            let offers_task = m.name() == NAME || m.tools().iter().any(|t| t.name() == TASK_TOOL_NAME);
            if offers_task {
                tracing::debug!(subagent = %self.name, middleware = m.name(), "left out of a subagent: subagents do not delegate");
                continue;
            }
            builder = builder.middleware_arc(m.clone());
        }
        if let Some(n) = spec.max_steps {
            builder = builder.max_steps(n);
        }
        if let Some(f) = &spec.response_format {
            builder = builder.response_format(f.clone());
        }
        if let Some(gate) = &spec.gate {
            builder = builder.interrupt_on_arc(gate.clone());
        }
        builder.build()
    }
}

/// Offers the `task` tool; see the module docs.
#[derive(Debug, Clone)]
pub struct SubAgentMiddleware {
    subagents: Arc<Vec<SubAgent>>,
    checkpointer: Arc<dyn Checkpointer>,
    max_depth: u32,
}

impl SubAgentMiddleware {
    /// A `task` tool over `subagents`. Errors: none given, a name used twice, or a name that is
    /// empty, longer than 64 characters or not made of ASCII letters, digits, `-` and `_`.
    pub fn new(subagents: impl IntoIterator<Item = SubAgent>) -> Result<Self, AgentError> {
        let subagents: Vec<SubAgent> = subagents.into_iter().collect();
        if subagents.is_empty() {
            return Err(AgentError::Config(
                "the subagents middleware needs at least one subagent".into(),
            ));
        }
        for (i, s) in subagents.iter().enumerate() {
            let valid = !s.name.is_empty()
                && s.name.len() <= 64
                && s.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid {
                return Err(AgentError::Config(format!(
                    "invalid subagent name {:?}: use 1-64 ASCII letters, digits, '-' or '_'",
                    s.name
                )));
            }
            if subagents[..i].iter().any(|o| o.name == s.name) {
                return Err(AgentError::Config(format!(
                    "two subagents are named {:?}",
                    s.name
                )));
            }
        }
        Ok(Self {
            subagents: Arc::new(subagents),
            checkpointer: Arc::new(InMemoryCheckpointer::new()),
            max_depth: 1,
        })
    }

    /// Save declared subagents' threads here (e.g. the parent's checkpointer) instead of in memory.
    pub fn with_checkpointer(mut self, checkpointer: Arc<dyn Checkpointer>) -> Self {
        self.checkpointer = checkpointer;
        self
    }

    /// How deep subagents may nest, counting the one this tool starts: 1 (the default) refuses
    /// a `task` call made inside any subagent. A larger depth lets a prebuilt subagent that has its
    /// own subagents middleware (with the same or a larger depth) delegate in turn; declared
    /// subagents never get a `task` tool.
    pub fn max_depth(mut self, depth: u32) -> Self {
        self.max_depth = depth.max(1);
        self
    }

    /// The subagents, in the order listed to the model.
    pub fn subagents(&self) -> &[SubAgent] {
        &self.subagents
    }
}

#[async_trait]
impl Middleware for SubAgentMiddleware {
    fn name(&self) -> &str {
        NAME
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(
            TaskTool::new(self.subagents.clone(), self.checkpointer.clone()).max_depth(self.max_depth),
        )]
    }
}
