//! [`DeepAgentBuilder`]: one call from a model to a working agent with the documented default stack.
//!
//! The default stack, outermost first (the first middleware's system block comes first):
//!
//! | # | middleware | adds | why here |
//! |---|---|---|---|
//! | 1 | filesystem | file tools, a short section on using them | stable text, first |
//! | 2 | skills (when sources are given) | the skills catalog, `search_skills`, tools bound to skills | stable text |
//! | 3 | patch tool calls | cancellation results for calls left unanswered | before any model call |
//! | 4 | the caller's middleware, in order | whatever they add | after the stable sections, before the breakpoint |
//! | 5 | token usage | cumulative usage in state | sees every response |
//! | 6 | prompt caching | a cache breakpoint after the last stable system block | everything before it is byte-stable |
//! | 7 | memory (when sources are given) | the memory section, with its own breakpoint | it changes most often, so it comes after the breakpoint |
//! | 8 | model retry | retries transient provider errors | innermost: a retry re-sends the same request |
//!
//! Subagents get the same stack without memory unless they declare their own.

use std::sync::Arc;

use trellis_backend::{Backend, StateBackend};
use trellis_fs_tools::{Limits, Permissions, ToolContext as FsContext};
use trellis_middleware::skills::SkillSource;
use trellis_middleware::{
    Agent, AgentError, AgentTool, ChatModel, Checkpointer, FilesystemMiddleware, MemoryMiddleware,
    Middleware, ModelRetryMiddleware, PatchToolCallsMiddleware, PromptCachingMiddleware, RetryConfig,
    SkillsMiddleware, TokenUsageMiddleware,
};

/// The system prompt used when the caller gives none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "\
You are an agent that gets work done with the tools you have. Work in steps: understand the request, \
gather what you need, act, and check the result before you answer. Prefer doing to describing. When \
you finish, say briefly what you did and where the results are.";

/// Builds an [`Agent`] with the default stack; see the module docs for the order and the reasons.
#[derive(Debug)]
pub struct DeepAgentBuilder {
    model: Arc<dyn ChatModel>,
    backend: Arc<dyn Backend>,
    system_prompt: String,
    skills: Vec<SkillSource>,
    skills_middleware: Option<SkillsMiddleware>,
    memory: Vec<String>,
    memory_budget_chars: Option<usize>,
    middleware: Vec<Arc<dyn Middleware>>,
    tools: Vec<Arc<dyn AgentTool>>,
    checkpointer: Option<Arc<dyn Checkpointer>>,
    permissions: Option<Permissions>,
    limits: Option<Limits>,
    retry: RetryConfig,
    max_steps: Option<u32>,
}

/// Start building an agent around `model`. Files live in a fresh [`StateBackend`] unless
/// [`DeepAgentBuilder::backend`] says otherwise.
pub fn deep_agent(model: Arc<dyn ChatModel>) -> DeepAgentBuilder {
    DeepAgentBuilder {
        model,
        backend: Arc::new(StateBackend::new()),
        system_prompt: DEFAULT_SYSTEM_PROMPT.to_owned(),
        skills: Vec::new(),
        skills_middleware: None,
        memory: Vec::new(),
        memory_budget_chars: None,
        middleware: Vec::new(),
        tools: Vec::new(),
        checkpointer: None,
        permissions: None,
        limits: None,
        retry: RetryConfig::default(),
        max_steps: None,
    }
}

impl DeepAgentBuilder {
    /// The backend the file tools, skills and memory read from (often a `CompositeBackend`).
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = backend;
        self
    }

    /// Replace the default system prompt.
    pub fn system_prompt(mut self, text: impl Into<String>) -> Self {
        self.system_prompt = text.into();
        self
    }

    /// Add a skills source (later sources override earlier ones by skill name).
    pub fn skills_source(mut self, source: SkillSource) -> Self {
        self.skills.push(source);
        self
    }

    /// Use a fully configured skills middleware (budget, bound tools, visibility) instead of the
    /// default one built from [`DeepAgentBuilder::skills_source`].
    pub fn skills_middleware(mut self, skills: SkillsMiddleware) -> Self {
        self.skills_middleware = Some(skills);
        self
    }

    /// Add a memory file (a path on the backend).
    pub fn memory_source(mut self, path: impl Into<String>) -> Self {
        self.memory.push(path.into());
        self
    }

    /// Most characters of memory shown.
    pub fn memory_budget_chars(mut self, chars: usize) -> Self {
        self.memory_budget_chars = Some(chars);
        self
    }

    /// Add a middleware (inserted after the stable sections, before the cache breakpoint).
    pub fn middleware(mut self, middleware: impl Middleware + 'static) -> Self {
        self.middleware.push(Arc::new(middleware));
        self
    }

    /// Add a tool.
    pub fn tool(mut self, tool: Arc<dyn AgentTool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Where threads are checkpointed (in memory by default).
    pub fn checkpointer(mut self, checkpointer: Arc<dyn Checkpointer>) -> Self {
        self.checkpointer = Some(checkpointer);
        self
    }

    /// Permission rules for the file tools.
    pub fn permissions(mut self, permissions: Permissions) -> Self {
        self.permissions = Some(permissions);
        self
    }

    /// Output and eviction limits for the file tools.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Retry policy for transient provider errors.
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// Most model calls in one run.
    pub fn max_steps(mut self, max_steps: u32) -> Self {
        self.max_steps = Some(max_steps);
        self
    }

    /// Assemble the agent.
    pub fn build(self) -> Result<Agent, AgentError> {
        let mut fs_context = FsContext::new(self.backend.clone());
        if let Some(p) = self.permissions {
            fs_context = fs_context.with_permissions(p);
        }
        if let Some(l) = self.limits {
            fs_context = fs_context.with_limits(l);
        }
        let mut builder = Agent::builder(self.model).system_prompt(self.system_prompt);
        builder = builder.middleware(FilesystemMiddleware::with_context(fs_context));
        let skills = match self.skills_middleware {
            Some(s) => Some(s),
            None if !self.skills.is_empty() => Some(SkillsMiddleware::new(self.skills)),
            None => None,
        };
        if let Some(skills) = skills {
            builder = builder.middleware(skills);
        }
        builder = builder.middleware(PatchToolCallsMiddleware::new());
        for m in self.middleware {
            builder = builder.middleware_arc(m);
        }
        builder = builder
            .middleware(TokenUsageMiddleware::new())
            .middleware(PromptCachingMiddleware::new());
        if !self.memory.is_empty() {
            let mut memory = MemoryMiddleware::new(self.backend.clone(), &self.memory)
                .map_err(|e| AgentError::Config(e.to_string()))?;
            if let Some(chars) = self.memory_budget_chars {
                memory = memory.with_budget_chars(chars);
            }
            builder = builder.middleware(memory);
        }
        builder = builder.middleware(ModelRetryMiddleware::new(self.retry));
        for tool in self.tools {
            builder = builder.tool_arc(tool);
        }
        if let Some(c) = self.checkpointer {
            builder = builder.checkpointer(c);
        }
        if let Some(n) = self.max_steps {
            builder = builder.max_steps(n);
        }
        builder.build()
    }
}
