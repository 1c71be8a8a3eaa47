//! [`DeclaredSubagent`]: a subagent described by name and tool names (the agent file's
//! `[[subagents]]`), turned into a [`SubAgent`] when the agent is built.

use std::sync::Arc;

use trellis_middleware::core_stack::RetryConfig;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::subagents::SubAgent;
use trellis_middleware::{
    AgentError, ChatModel, Middleware, ModelRetryMiddleware, PatchToolCallsMiddleware,
    PromptCachingMiddleware, SkillsMiddleware, TokenUsageMiddleware, Tool,
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;
    use trellis_middleware::runtime::scripted_model::ScriptedModel;
    use trellis_middleware::{RunInput, ToolCall};

    use super::*;
    use crate::builder::deep_agent;

    fn researcher(tools: Option<Vec<String>>) -> DeclaredSubagent {
        DeclaredSubagent {
            name: "researcher".into(),
            description: "Finds facts.".into(),
            prompt: "You research.".into(),
            model: None,
            tools,
            skills: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_declared_subagent_gets_its_prompt_and_only_the_tools_it_names() {
        let model = Arc::new(
            ScriptedModel::new()
                .then_tool_calls([ToolCall::new(
                    "t1",
                    "task",
                    json!({"description": "Find Acme's renewal date.", "subagent_type": "researcher"}),
                )])
                .then_text("March.")
                .then_text("Acme renews in March."),
        );
        let agent = deep_agent(model.clone())
            .declared_subagent(researcher(Some(vec!["read_file".into(), "grep".into()])))
            .build()
            .unwrap();
        agent.run(RunInput::human("When does Acme renew?")).await.unwrap();
        let child = &model.requests()[1];
        assert_eq!(child.system[0].text, "You research.");
        let names: Vec<&str> = child.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["read_file", "grep"]);
    }

    #[test]
    fn a_tool_the_agent_lacks_is_a_configuration_error_naming_it() {
        let model = Arc::new(ScriptedModel::new());
        let err = deep_agent(model)
            .declared_subagent(researcher(Some(vec!["reed_file".into()])))
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"reed_file\"") && err.contains("researcher"),
            "{err}"
        );
    }
}
