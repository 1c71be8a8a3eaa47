//! Unit tests of the default stack [`deep_agent`](super::deep_agent) builds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use trellis_middleware::backend::{VirtualPath, WriteMode};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::subagents::SUBAGENT_PROMPT;
use trellis_middleware::{ModelRequest, RunInput, ToolCall};

use super::*;

fn sources(req: &ModelRequest) -> Vec<&str> {
    req.system
        .iter()
        .map(|b| b.source.as_deref().unwrap_or("prompt"))
        .collect()
}

fn tools(req: &ModelRequest) -> Vec<&str> {
    req.tools.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn mcp_servers_need_the_default_skills_middleware() {
    let crm = || McpServerConfig::stdio("crm", "python3", ["server.py"]).unwrap();
    let model = || Arc::new(ScriptedModel::new()) as Arc<dyn ChatModel>;
    let err = |b: DeepAgentBuilder| match b.build() {
        Err(AgentError::Config(message)) => message,
        other => panic!("expected a configuration error, got {other:?}"),
    };
    assert!(err(deep_agent(model()).mcp_server(crm())).contains("add a skills source"));
    let source = SkillSource::new(Arc::new(StateBackend::new()), "/skills").unwrap();
    let custom = deep_agent(model())
        .skills_middleware(SkillsMiddleware::new(vec![source.clone()]))
        .mcp_server(crm());
    assert!(err(custom).contains("BoundTools::new().resolver(servers)"));
    let both = deep_agent(model())
        .skills_source(source.clone())
        .mcp_server(crm())
        .mcp_servers(Arc::new(McpServers::new([]).unwrap()));
    assert!(err(both).contains("not both"));
    let twice = deep_agent(model())
        .skills_source(source.clone())
        .mcp_server(crm())
        .mcp_server(crm());
    assert!(err(twice).contains("two MCP servers are named \"crm\""));
    assert!(
        deep_agent(model())
            .skills_source(source)
            .mcp_server(crm())
            .build()
            .is_ok()
    );
}

#[tokio::test]
async fn the_general_purpose_subagent_gets_the_stack_without_memory_or_task() {
    let backend = Arc::new(StateBackend::new());
    backend
        .write(
            &VirtualPath::parse("/AGENTS.md").unwrap(),
            "Prefer metric units.".into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([ToolCall::new(
                "t1",
                "task",
                json!({"description": "List the files.", "subagent_type": "general-purpose"}),
            )])
            .then_text("There are no files.")
            .then_text("Nothing there."),
    );
    let agent = deep_agent(model.clone())
        .backend(backend)
        .memory_source("/AGENTS.md")
        .build()
        .unwrap();
    agent.run(RunInput::human("What files are there?")).await.unwrap();
    let requests = model.requests();
    let (parent, child) = (&requests[0], &requests[1]);
    assert_eq!(sources(parent), ["prompt", "filesystem", "memory"]);
    assert!(tools(parent).contains(&"task") && tools(parent).contains(&"read_file"));
    assert_eq!(child.system[0].text, SUBAGENT_PROMPT);
    assert_eq!(
        sources(child),
        ["prompt", "filesystem"],
        "no memory in the subagent"
    );
    assert!(tools(child).contains(&"read_file"));
    assert!(!tools(child).contains(&"task"), "no nesting");
}
