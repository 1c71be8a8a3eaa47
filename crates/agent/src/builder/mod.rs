//! [`DeepAgentBuilder`]: one call from a model to a working agent with the documented default stack.
//!
//! The default stack, outermost first (the first middleware's system block comes first):
//!
//! | # | middleware | adds | why here |
//! |---|---|---|---|
//! | 1 | filesystem | file tools, a short section on using them | stable text, first |
//! | 2 | skills (when sources are given) | the skills catalog, `search_skills`, tools bound to skills | stable text |
//! | 3 | subagents (unless turned off) | the `task` tool, listing the subagent types | a stable tool definition |
//! | 4 | patch tool calls | cancellation results for calls left unanswered | before any model call |
//! | 5 | the caller's middleware, in order | whatever they add | after the stable sections, before the breakpoint |
//! | 6 | token usage | cumulative usage in state | sees every response |
//! | 7 | prompt caching | a cache breakpoint after the last stable system block | everything before it is byte-stable |
//! | 8 | attachments | the list of attached files (names and paths) | changes only when files are attached: after the breakpoint, before memory |
//! | 9 | memory (when sources are given) | the memory section (the agent's files, then the run's user's), with its own breakpoint | it changes most often, so it comes after the breakpoint |
//! | 10 | summarization (unless turned off) | offloads old tool results, condenses old messages | inside everything that adds text, so its estimate counts every section and tool; outside retry |
//! | 11 | model retry | retries transient provider errors | innermost: a retry re-sends the same (condensed) request |
//!
//! The general-purpose subagent (`task` with `subagent_type: "general-purpose"`) runs on the same
//! model with the same stack minus memory, attachments and subagents: filesystem, skills, patch tool
//! calls, the caller's middleware, token usage, prompt caching, summarization, model retry, and the
//! caller's tools. MCP servers ([`DeepAgentBuilder::mcp_server`]) are bound through the skills
//! middleware: a skill lists `mcp:<server>` in `metadata.include_tools` and the server's tools are
//! disclosed when the skill is read (see [`crate::mcp`]). Subagents added with [`DeepAgentBuilder::subagent`] bring their own prompt, tools,
//! middleware and model. Child threads are saved to the builder's checkpointer (in memory unless one
//! is given).

use std::sync::Arc;

use trellis_middleware::backend::sandbox::{Network, Sandbox};
use trellis_middleware::backend::{Backend, StateBackend, VirtualPath};
use trellis_middleware::core_stack::RetryConfig;
use trellis_middleware::runtime::interrupt::ToolGate;
use trellis_middleware::skills::prompt::render::SEARCH_TOOL;
use trellis_middleware::skills::{BoundTools, Persisted, PersonalSkills, SkillSource};
use trellis_middleware::subagents::SubAgent;
use trellis_middleware::subagents::TASK_TOOL_NAME;
use trellis_middleware::summarization::SummarizationConfig;
use trellis_middleware::tools::{
    CommandPolicy, ExecuteTool, FileAccess, FileLayout, Limits, Permissions, UserSpaces,
};
use trellis_middleware::users::UserHomes;
use trellis_middleware::{
    Agent, AgentError, AttachmentsMiddleware, ChatModel, Checkpointer, FilesystemMiddleware,
    MemoryMiddleware, Middleware, ModelRetryMiddleware, PatchToolCallsMiddleware, PromptCachingMiddleware,
    SkillsMiddleware, SubAgentMiddleware, SummarizationMiddleware, TokenUsageMiddleware, Tool,
};

use crate::mcp::{McpServerConfig, McpServers};

mod declared;
pub use declared::DeclaredSubagent;
use declared::resolve_declared;

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
    layout: FileLayout,
    system_prompt: String,
    skills: Vec<SkillSource>,
    skills_middleware: Option<SkillsMiddleware>,
    skills_persisted: Vec<Option<Persisted>>,
    memory: Vec<String>,
    memory_budget_chars: Option<usize>,
    user_memory: Vec<String>,
    user_memory_templates: Vec<(String, String)>,
    personal_skills: Option<String>,
    middleware: Vec<Arc<dyn Middleware>>,
    tools: Vec<Arc<dyn Tool>>,
    checkpointer: Option<Arc<dyn Checkpointer>>,
    permissions: Option<Permissions>,
    limits: Option<Limits>,
    retry: RetryConfig,
    max_steps: Option<u32>,
    summarization: Option<SummarizationConfig>,
    subagents: Vec<SubAgent>,
    declared: Vec<DeclaredSubagent>,
    general_purpose: bool,
    mcp: Vec<McpServerConfig>,
    mcp_servers: Option<Arc<McpServers>>,
    sandbox: Option<Arc<dyn Sandbox>>,
    commands: CommandPolicy,
    sandbox_network: Network,
    gate: Option<Arc<dyn ToolGate>>,
}

/// Start building an agent around `model`. Unless [`DeepAgentBuilder::backend`] says otherwise,
/// each thread has files of its own: they live beside the thread's checkpoints (in memory with the
/// default checkpointer), come back when the thread resumes, and no other thread sees them.
pub fn deep_agent(model: Arc<dyn ChatModel>) -> DeepAgentBuilder {
    DeepAgentBuilder {
        model,
        backend: Arc::new(StateBackend::new()),
        layout: FileLayout::per_thread([]),
        system_prompt: DEFAULT_SYSTEM_PROMPT.to_owned(),
        skills: Vec::new(),
        skills_middleware: None,
        skills_persisted: Vec::new(),
        memory: Vec::new(),
        memory_budget_chars: None,
        user_memory: Vec::new(),
        user_memory_templates: Vec::new(),
        personal_skills: None,
        middleware: Vec::new(),
        tools: Vec::new(),
        checkpointer: None,
        permissions: None,
        limits: None,
        retry: RetryConfig::default(),
        max_steps: None,
        summarization: Some(SummarizationConfig::default()),
        subagents: Vec::new(),
        declared: Vec::new(),
        general_purpose: true,
        mcp: Vec::new(),
        mcp_servers: None,
        sandbox: None,
        commands: CommandPolicy::allow_all(),
        sandbox_network: Network::None,
        gate: None,
    }
}

impl DeepAgentBuilder {
    /// The backend the file tools, skills and memory read from (often a `CompositeBackend`). Every
    /// thread works on these same files (the [`FileLayout::Shared`] layout) unless
    /// [`file_layout`](Self::file_layout) says otherwise.
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = backend;
        self.layout = FileLayout::Shared;
        self
    }

    /// Give each user a workspace of their own at `/workspace`: user `ada`'s is `<root>/ada` on
    /// `backend`, shared by all of ada's threads and invisible to every other user. Runs without a
    /// `UserIdentity` get no workspace; a user id that is not one safe path segment is refused, by
    /// name, on the first file-tool call. Applies to per-thread layouts (the default without
    /// [`backend`](Self::backend)); call after [`file_layout`](Self::file_layout).
    pub fn user_workspaces(mut self, backend: Arc<dyn Backend>, root: VirtualPath) -> Self {
        self.layout = self.layout.with_user_spaces(UserSpaces::new(backend, root));
        self
    }

    /// Whose files the paths are (call after [`backend`](Self::backend)): for example
    /// `FileLayout::per_thread([skills dir, memory dir])` gives each thread its own files at `/`
    /// while skills and memory come from the backend.
    pub fn file_layout(mut self, layout: FileLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Offer `execute`: shell commands in `sandbox` (e.g. a
    /// [`BubblewrapSandbox`](trellis_middleware::tools::sandbox::BubblewrapSandbox)) over the same
    /// files the file tools see, with the skill sources read-only. Without this, `execute` is
    /// offered only when the backend itself can run commands
    /// ([`Backend::sandbox`]).
    pub fn sandbox(mut self, sandbox: Arc<dyn Sandbox>) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// Which commands `execute` may run (default: any; [`CommandPolicy::deny_all`] removes the
    /// tool).
    pub fn commands(mut self, policy: CommandPolicy) -> Self {
        self.commands = policy;
        self
    }

    /// Network access for `execute` (default none).
    pub fn sandbox_network(mut self, network: Network) -> Self {
        self.sandbox_network = network;
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

    /// Seed the skills sources' first discovery with their persisted catalogs (`persisted[i]`
    /// for the `i`-th [`DeepAgentBuilder::skills_source`]; see
    /// `trellis_middleware::skills::persist`), so a new process reads only the `SKILL.md` files
    /// that changed. Every load still lists each source, so nothing changed goes unseen. Ignored
    /// with [`DeepAgentBuilder::skills_middleware`].
    pub fn skills_persisted(mut self, persisted: Vec<Option<Persisted>>) -> Self {
        self.skills_persisted = persisted;
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

    /// Memory files of each run's user, relative to their workspace (for example
    /// `["agents/AGENTS.md", "agents/USER.md", "agents/MEMORY.md"]`): read on every run of that
    /// user, cached per user, rendered after the agent's own memory, edited by the agent at
    /// `/workspace/<path>`. The workspace is the file layout's (a `UserFiles` run extension, or
    /// [`user_workspaces`](Self::user_workspaces)); runs without one have no user memory.
    pub fn user_memory<S: Into<String>>(mut self, paths: impl IntoIterator<Item = S>) -> Self {
        self.user_memory.extend(paths.into_iter().map(Into::into));
        self
    }

    /// A first-use template for the user memory file `path`: created with `text` when missing,
    /// never overwriting a file that exists.
    pub fn user_memory_template(mut self, path: impl Into<String>, text: impl Into<String>) -> Self {
        self.user_memory_templates.push((path.into(), text.into()));
        self
    }

    /// Each run's user's own skills in `dir` of their workspace (for example `agents/skills`),
    /// layered over the agent's skills sources for that user only; a personal skill with an
    /// organisation skill's name shadows it for that user. Ignored with
    /// [`skills_middleware`](Self::skills_middleware) (give it a `PersonalSkills` yourself).
    pub fn personal_skills(mut self, dir: impl Into<String>) -> Self {
        self.personal_skills = Some(dir.into());
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
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Add a tool that is already shared.
    pub fn tool_arc(mut self, tool: Arc<dyn Tool>) -> Self {
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

    /// Summarization settings (threshold, messages kept, tool-result limit, stage-2 ratio, where
    /// offloaded results go; on by default with [`SummarizationConfig::default`]).
    pub fn summarization(mut self, config: SummarizationConfig) -> Self {
        self.summarization = Some(config);
        self
    }

    /// No summarization: long runs fail when they outgrow the context window.
    pub fn without_summarization(mut self) -> Self {
        self.summarization = None;
        self
    }

    /// Stop before the tool calls `gate` asks about until a person decides (e.g. an
    /// [`InterruptOn`](trellis_middleware::approvals::InterruptOn)); subagents inherit it unless
    /// they declare their own. See docs/approvals.md.
    pub fn interrupt_on(mut self, gate: impl ToolGate + 'static) -> Self {
        self.gate = Some(Arc::new(gate));
        self
    }

    /// Offer a declared subagent through the `task` tool (besides the general-purpose one).
    pub fn subagent(mut self, subagent: SubAgent) -> Self {
        self.subagents.push(subagent);
        self
    }

    /// Offer a subagent declared by name (see [`DeclaredSubagent`]); it runs with patch tool calls,
    /// token usage, prompt caching and model retry, and its own skills when it has some.
    pub fn declared_subagent(mut self, subagent: DeclaredSubagent) -> Self {
        self.declared.push(subagent);
        self
    }

    /// Do not offer the general-purpose subagent (the `task` tool stays if other subagents are added).
    pub fn without_general_purpose_subagent(mut self) -> Self {
        self.general_purpose = false;
        self
    }

    /// Add an MCP server whose tools skills can bind with `mcp:<name>` in `metadata.include_tools`.
    /// It starts when a skill that binds it is first read and stops when the agent is dropped. Needs
    /// a skills source; cannot be combined with [`DeepAgentBuilder::skills_middleware`] (bind
    /// [`McpServers`] in its `BoundTools` yourself) or [`DeepAgentBuilder::mcp_servers`].
    pub fn mcp_server(mut self, config: McpServerConfig) -> Self {
        self.mcp.push(config);
        self
    }

    /// Use a prepared set of MCP servers; keep a clone of the `Arc` to call
    /// [`McpServers::shutdown`] when done. Same rules as [`DeepAgentBuilder::mcp_server`].
    pub fn mcp_servers(mut self, servers: Arc<McpServers>) -> Self {
        self.mcp_servers = Some(servers);
        self
    }

    /// The MCP servers to bind, if any (configuration errors become `AgentError::Config`).
    fn mcp(&mut self) -> Result<Option<Arc<McpServers>>, AgentError> {
        let servers = match (self.mcp_servers.take(), self.mcp.is_empty()) {
            (None, true) => return Ok(None),
            (Some(_), false) => {
                return Err(AgentError::Config(
                    "give MCP servers either one by one (mcp_server) or as a set (mcp_servers), not both"
                        .to_owned(),
                ));
            }
            (Some(servers), true) => servers,
            (None, false) => Arc::new(
                McpServers::new(std::mem::take(&mut self.mcp))
                    .map_err(|e| AgentError::Config(e.to_string()))?,
            ),
        };
        if self.skills_middleware.is_some() {
            return Err(AgentError::Config(
                "MCP servers are bound through the skills middleware: with a custom skills middleware, \
                 add `BoundTools::new().resolver(servers)` to it instead of passing the servers here"
                    .to_owned(),
            ));
        }
        if self.skills.is_empty() {
            return Err(AgentError::Config(
                "MCP servers are bound to skills (`metadata.include_tools: mcp:<server>`); add a skills \
                 source"
                    .to_owned(),
            ));
        }
        Ok(Some(servers))
    }

    /// Assemble the agent.
    pub fn build(mut self) -> Result<Agent, AgentError> {
        let mcp = self.mcp()?;
        let mut files = FileAccess::new(self.backend.clone()).with_layout(self.layout.clone());
        if let Some(p) = self.permissions {
            files = files.with_permissions(p);
        }
        if let Some(l) = self.limits {
            files = files.with_limits(l);
        }
        let mut execute = ExecuteTool::new(files.clone())
            .skill_sources(self.skills.iter().map(|s| s.path().clone()))
            .commands(self.commands.clone())
            .network(self.sandbox_network.clone());
        if let Some(sandbox) = &self.sandbox {
            execute = execute.with_sandbox(sandbox.clone());
        }
        let filesystem: Arc<dyn Middleware> =
            Arc::new(FilesystemMiddleware::with_files(files).with_execute(execute));
        if let Some(servers) = &mcp {
            // MCP names always contain `__` and built-in names never do; reserving them is a second
            // guarantee that an MCP tool never shadows one of the agent's own.
            let own = filesystem.tools().into_iter().chain(self.tools.iter().cloned());
            let mut names: Vec<String> = own.map(|t| t.name().to_owned()).collect();
            names.extend([TASK_TOOL_NAME.to_owned(), SEARCH_TOOL.to_owned()]);
            servers.reserve_names(names);
        }
        let homes = UserHomes::from_layout(&self.layout);
        let personal = self
            .personal_skills
            .as_deref()
            .map(|dir| PersonalSkills::new(dir).map(|p| p.with_homes(homes.clone())))
            .transpose()
            .map_err(|e| AgentError::Config(e.to_string()))?;
        let skills: Option<Arc<dyn Middleware>> = match self.skills_middleware {
            Some(s) => Some(Arc::new(s)),
            None if !self.skills.is_empty() || personal.is_some() => {
                let mut skills = SkillsMiddleware::new(self.skills).with_persisted(self.skills_persisted);
                if let Some(personal) = personal {
                    skills = skills.with_personal_skills(personal);
                }
                if let Some(servers) = mcp {
                    skills = skills.with_bound_tools(BoundTools::new().resolver(servers));
                }
                Some(Arc::new(skills))
            }
            None => None,
        };
        let summarization: Option<Arc<dyn Middleware>> = self.summarization.map(|config| {
            Arc::new(
                SummarizationMiddleware::new(self.backend.clone())
                    .with_layout(self.layout.clone())
                    .with_config(config),
            ) as Arc<dyn Middleware>
        });

        let mut subagents = Vec::new();
        if self.general_purpose {
            // The default stack minus memory, attachments and subagents, on the same model.
            let mut gp = SubAgent::general_purpose()
                .middleware(filesystem.clone())
                .middlewares(skills.clone())
                .middleware(Arc::new(PatchToolCallsMiddleware::new()))
                .middlewares(self.middleware.iter().cloned())
                .middleware(Arc::new(TokenUsageMiddleware::new()))
                .middleware(Arc::new(PromptCachingMiddleware::new()))
                .middlewares(summarization.clone())
                .middleware(Arc::new(ModelRetryMiddleware::new(self.retry)))
                .tools(self.tools.iter().cloned());
            if let Some(n) = self.max_steps {
                gp = gp.max_steps(n);
            }
            subagents.push(gp);
        }
        subagents.extend(self.subagents);
        for declared in self.declared {
            subagents.push(resolve_declared(declared, &filesystem, &self.tools, self.retry)?);
        }

        let mut builder = Agent::builder(self.model)
            .system_prompt(self.system_prompt)
            .middleware_arc(filesystem);
        if let Some(skills) = skills {
            builder = builder.middleware_arc(skills);
        }
        if !subagents.is_empty() {
            let mut delegation = SubAgentMiddleware::new(subagents)?;
            if let Some(c) = &self.checkpointer {
                delegation = delegation.with_checkpointer(c.clone());
            }
            builder = builder.middleware(delegation);
        }
        builder = builder.middleware(PatchToolCallsMiddleware::new());
        for m in self.middleware {
            builder = builder.middleware_arc(m);
        }
        builder = builder
            .middleware(TokenUsageMiddleware::new())
            .middleware(PromptCachingMiddleware::new())
            .middleware(AttachmentsMiddleware::new());
        if !self.memory.is_empty() || !self.user_memory.is_empty() {
            let config = |e: trellis_middleware::memory::MemoryError| AgentError::Config(e.to_string());
            let mut memory = MemoryMiddleware::new(self.backend.clone(), &self.memory).map_err(config)?;
            if !self.user_memory.is_empty() {
                memory = memory
                    .with_user_sources(&self.user_memory)
                    .map_err(config)?
                    .with_user_homes(homes);
                for (path, text) in &self.user_memory_templates {
                    memory = memory.with_user_template(path, text.clone()).map_err(config)?;
                }
            }
            if let Some(chars) = self.memory_budget_chars {
                memory = memory.with_budget_chars(chars);
            }
            builder = builder.middleware(memory);
        }
        if let Some(summarization) = summarization {
            builder = builder.middleware_arc(summarization);
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
        if let Some(gate) = self.gate {
            builder = builder.interrupt_on_arc(gate);
        }
        builder.build()
    }
}

#[cfg(test)]
mod tests;
