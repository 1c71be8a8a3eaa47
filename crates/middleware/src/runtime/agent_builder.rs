//! [`AgentBuilder`]: the configuration of an [`Agent`], checked when it is built.

use std::collections::HashSet;
use std::sync::Arc;

use crate::runtime::agent::{Agent, Inner};
use crate::runtime::checkpoint::{Checkpointer, InMemoryCheckpointer};
use crate::runtime::error::AgentError;
use crate::runtime::interrupt::ToolGate;
use crate::runtime::message::SystemBlock;
use crate::runtime::middleware::Middleware;
use crate::runtime::model::{ChatModel, ResponseFormat};
use crate::runtime::tool_set::ToolSet;
use crate::runtime::truncation::DEFAULT_TRUNCATED_CALL_RETRIES;
use crate::tools::Tool;

/// Model calls one run may make by default.
pub const DEFAULT_MAX_STEPS: u32 = 100;

/// Builds an [`Agent`].
#[derive(Debug)]
pub struct AgentBuilder {
    model: Arc<dyn ChatModel>,
    name: Option<String>,
    system: Vec<SystemBlock>,
    tools: Vec<Arc<dyn Tool>>,
    middleware: Vec<Arc<dyn Middleware>>,
    checkpointer: Option<Arc<dyn Checkpointer>>,
    max_steps: u32,
    response_format: Option<ResponseFormat>,
    max_output_tokens: Option<u32>,
    gate: Option<Arc<dyn ToolGate>>,
    truncated_call_retries: u32,
}

impl AgentBuilder {
    /// An agent on `model`, with an in-memory checkpointer and no tools or middleware.
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        Self {
            model,
            name: None,
            system: Vec::new(),
            tools: Vec::new(),
            middleware: Vec::new(),
            checkpointer: Some(Arc::new(InMemoryCheckpointer::new())),
            max_steps: DEFAULT_MAX_STEPS,
            response_format: None,
            max_output_tokens: None,
            gate: None,
            truncated_call_retries: DEFAULT_TRUNCATED_CALL_RETRIES,
        }
    }

    /// Name the agent (shown in spans and to subagent callers).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Append a system prompt block of plain text.
    pub fn system_prompt(self, text: impl Into<String>) -> Self {
        self.system_block(SystemBlock::new(text))
    }

    /// Append a system prompt block.
    pub fn system_block(mut self, block: SystemBlock) -> Self {
        self.system.push(block);
        self
    }

    /// Offer a tool on every call.
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Offer a shared tool on every call.
    pub fn tool_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Add a middleware after (inside) the ones added before.
    pub fn middleware(mut self, middleware: impl Middleware + 'static) -> Self {
        self.middleware.push(Arc::new(middleware));
        self
    }

    /// Add a shared middleware after (inside) the ones added before.
    pub fn middleware_arc(mut self, middleware: Arc<dyn Middleware>) -> Self {
        self.middleware.push(middleware);
        self
    }

    /// Save threads here instead of in memory.
    pub fn checkpointer(mut self, checkpointer: Arc<dyn Checkpointer>) -> Self {
        self.checkpointer = Some(checkpointer);
        self
    }

    /// Keep nothing between runs: every run starts a fresh thread state.
    pub fn without_checkpointer(mut self) -> Self {
        self.checkpointer = None;
        self
    }

    /// Most model calls per run.
    pub fn max_steps(mut self, max_steps: u32) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Ask the model for structured output on every call.
    pub fn response_format(mut self, format: ResponseFormat) -> Self {
        self.response_format = Some(format);
        self
    }

    /// Cap output tokens on every call.
    pub fn max_output_tokens(mut self, max: u32) -> Self {
        self.max_output_tokens = Some(max);
        self
    }

    /// Stop before tool calls `gate` asks about, until a person decides (see
    /// [`crate::runtime::interrupt`] and [`crate::approvals::InterruptOn`]). Without one, the agent
    /// uses the gate of the agent that started it (a subagent inherits its parent's), if any.
    pub fn interrupt_on(self, gate: impl ToolGate + 'static) -> Self {
        self.interrupt_on_arc(Arc::new(gate))
    }

    /// [`interrupt_on`](Self::interrupt_on) with a shared gate.
    pub fn interrupt_on_arc(mut self, gate: Arc<dyn ToolGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// How many replies in a row may stop at the output token limit in the middle of a tool call
    /// before the run fails with [`AgentError::TruncatedToolCall`] (default
    /// [`DEFAULT_TRUNCATED_CALL_RETRIES`]; 0 fails on the first). Such calls are never run.
    pub fn truncated_call_retries(mut self, retries: u32) -> Self {
        self.truncated_call_retries = retries;
        self
    }

    /// Check the configuration and build. Errors: two tools (the agent's and middlewares' static ones)
    /// or two middlewares with the same name.
    pub fn build(self) -> Result<Agent, AgentError> {
        let mut names = HashSet::new();
        for m in &self.middleware {
            if !names.insert(m.name().to_owned()) {
                return Err(AgentError::Config(format!(
                    "two middlewares are named {:?}",
                    m.name()
                )));
            }
        }
        let mut tools = ToolSet::default();
        for tool in self
            .tools
            .iter()
            .cloned()
            .chain(self.middleware.iter().flat_map(|m| m.tools()))
        {
            tools.add(tool)?;
        }
        Ok(Agent {
            inner: Arc::new(Inner {
                model: self.model,
                name: self.name,
                system: self.system,
                base_tools: Arc::new(tools),
                middleware: self.middleware,
                checkpointer: self.checkpointer,
                max_steps: self.max_steps,
                response_format: self.response_format,
                max_output_tokens: self.max_output_tokens,
                gate: self.gate,
                truncated_call_retries: self.truncated_call_retries,
            }),
        })
    }
}
