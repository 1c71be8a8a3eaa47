//! [`DeclaredSubagent`]: a subagent described by name and tool names (the agent file's
//! `[[subagents]]`), turned into a [`SubAgent`] when the agent is built.

use std::sync::Arc;

use trellis_middleware::{
    AgentError, ChatModel, Middleware, ModelRetryMiddleware, PatchToolCallsMiddleware,
    PromptCachingMiddleware, RetryConfig, SkillSource, SkillsMiddleware, SubAgent, TokenUsageMiddleware,
    Tool,
};

/// A subagent declared by name (the agent file's `[[subagents]]`), resolved when the agent is
/// built: its tools are picked by name from the main agent's own (file tools, `execute`, added
/// tools), so a name the agent does not have is a configuration error naming it.
#[derive(Debug, Clone)]
pub struct DeclaredSubagent {
    /// The `subagent_type` the model passes to `task`.
    pub name: String,
    /// What it is for, shown to the main agent.
    pub description: String,
    /// Its system prompt.
    pub prompt: String,
    /// Its model (default: the main agent's).
    pub model: Option<Arc<dyn ChatModel>>,
    /// The tools it may use, by name (`None`: every file tool and `execute`).
    pub tools: Option<Vec<String>>,
    /// Skills sources of its own (a catalog only it sees; none: no skills).
    pub skills: Vec<SkillSource>,
}

/// A [`DeclaredSubagent`] as a [`SubAgent`], its tools picked from `filesystem` and `tools`.
pub(super) fn resolve_declared(
    declared: DeclaredSubagent,
    filesystem: &Arc<dyn Middleware>,
    tools: &[Arc<dyn Tool>],
    retry: RetryConfig,
) -> Result<SubAgent, AgentError> {
    let own: Vec<Arc<dyn Tool>> = filesystem
        .tools()
        .into_iter()
        .chain(tools.iter().cloned())
        .collect();
    let picked = match &declared.tools {
        None => filesystem.tools(),
        Some(names) => names
            .iter()
            .map(|name| {
                own.iter().find(|t| t.name() == name).cloned().ok_or_else(|| {
                    let known: Vec<&str> = own.iter().map(|t| t.name()).collect();
                    AgentError::Config(format!(
                        "subagent {:?} lists tool {name:?}, which the agent does not have (it has: {})",
                        declared.name,
                        known.join(", ")
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    let mut sub = SubAgent::new(declared.name, declared.description)
        .system_prompt(declared.prompt)
        .tools(picked);
    if !declared.skills.is_empty() {
        sub = sub.skills(SkillsMiddleware::new(declared.skills));
    }
    sub = sub
        .middleware(Arc::new(PatchToolCallsMiddleware::new()))
        .middleware(Arc::new(TokenUsageMiddleware::new()))
        .middleware(Arc::new(PromptCachingMiddleware::new()))
        .middleware(Arc::new(ModelRetryMiddleware::new(retry)));
    if let Some(model) = declared.model {
        sub = sub.model(model);
    }
    Ok(sub)
}
