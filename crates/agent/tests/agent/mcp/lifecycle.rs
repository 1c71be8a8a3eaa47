//! MCP server lifecycle and failure mapping against a real MCP server (tests/mcp_server/server.py):
//! lazy start, shutdown and drop leave no process behind, and isError results, JSON-RPC errors,
//! timeouts, crashes and servers that never start all become tool results the model can act on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use trellis_agent::mcp::{McpServerConfig, McpServers};
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::tools::SideEffects;
use trellis_middleware::{RunInput, ToolCall};

use crate::mcp::common::{agent_on, alive, gone, library, script, scripted, started, stdio, tool_results};
use crate::support::skip_unless_python;

fn detached() -> RunContext {
    RunContext::detached(Arc::new(ScriptedModel::new()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_start_on_first_use_and_shutdown_leaves_no_process() {
    let python = skip_unless_python!();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("started");
    let servers = McpServers::new([stdio(&python, "crm", Some(&file))]).unwrap();
    let crm = servers.server("crm").unwrap().clone();
    assert!(started(&file).is_empty(), "nothing runs before first use");
    assert_eq!(crm.pid(), None);
    assert!(servers.tools_for("mcp:other", &detached()).await.is_empty());
    assert!(
        started(&file).is_empty(),
        "a label for another server starts nothing"
    );

    let tools = servers.tools_for("mcp:crm", &detached()).await;
    assert_eq!(tools.len(), 7);
    // The annotations set each tool's side-effect class; a tool without them is external.
    let class = |suffix: &str| {
        let tool = tools.iter().find(|t| t.name().ends_with(suffix)).unwrap();
        tool.side_effects()
    };
    assert_eq!(class("search_calls"), SideEffects::ReadOnly);
    assert_eq!(class("get_transcript"), SideEffects::Idempotent);
    assert_eq!(class("fail"), SideEffects::External);
    let pids = started(&file);
    assert_eq!(pids.len(), 1);
    assert_eq!(crm.pid(), Some(pids[0]));
    assert!(alive(pids[0]) && crm.is_running().await);
    servers.tools_for("mcp:crm", &detached()).await;
    assert_eq!(started(&file).len(), 1, "the running server is reused");

    servers.shutdown().await;
    assert!(!alive(pids[0]), "shutdown waits for the process to exit");
    assert!(!crm.is_running().await && crm.pid().is_none());
    assert!(
        servers.tools_for("mcp:crm", &detached()).await.is_empty(),
        "nothing starts after shutdown"
    );
    assert_eq!(started(&file).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_starts_its_server_only_when_a_skill_needs_it_and_dropping_it_stops_it() {
    let python = skip_unless_python!();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("started");
    let backend = library("mcp:crm").await;
    let model = Arc::new(
        scripted()
            .then_tool_calls([ToolCall::new(
                "c1",
                "read_file",
                json!({"file_path": "/skills/meeting-prep/SKILL.md"}),
            )])
            .then_text("brief ready")
            .then_tool_calls([ToolCall::new(
                "c2",
                "read_file",
                json!({"file_path": "/skills/call-transcripts/SKILL.md"}),
            )])
            .then_text("ready for calls"),
    );
    let agent = agent_on(model, &backend)
        .mcp_server(stdio(&python, "crm", Some(&file)))
        .build()
        .unwrap();
    assert!(started(&file).is_empty(), "building starts nothing");
    let thread = trellis_middleware::ThreadId::new("lazy").unwrap();
    agent
        .run(RunInput::human("prep the meeting").thread(thread.clone()))
        .await
        .unwrap();
    assert!(
        started(&file).is_empty(),
        "a run whose skills bind no server starts nothing"
    );
    agent
        .run(RunInput::human("now the calls").thread(thread))
        .await
        .unwrap();
    let pids = started(&file);
    assert_eq!(pids.len(), 1, "reading the skill started the server");
    assert!(alive(pids[0]));
    drop(agent);
    assert!(gone(pids[0]).await, "dropping the agent stops its server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_become_tool_results_the_model_can_act_on() {
    let python = skip_unless_python!();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("started");
    let backend = library("mcp:crm").await;
    let call = |id: &str, tool: &str, args: serde_json::Value| ToolCall::new(id, tool, args);
    let model = Arc::new(
        scripted()
            .then_tool_calls([call(
                "c0",
                "read_file",
                json!({"file_path": "/skills/call-transcripts/SKILL.md"}),
            )])
            .then_tool_calls([
                call("c1", "crm__fail", json!({"reason": "quota exceeded"})),
                call("c2", "crm__protocol_error", json!({})),
                call("c3", "crm__search_calls", json!(["not", "an", "object"])),
                call("c4", "crm__slow", json!({"seconds": 30})),
            ])
            .then_tool_calls([call(
                "c5",
                "crm__search_calls",
                json!({"account": "Acme", "limit": 1}),
            )])
            .then_tool_calls([call("c6", "crm__crash", json!({}))])
            .then_tool_calls([call(
                "c7",
                "crm__search_calls",
                json!({"account": "Acme", "limit": 1}),
            )])
            .then_text("done"),
    );
    let servers = Arc::new(
        McpServers::new([stdio(&python, "crm", Some(&file)).with_call_timeout(Duration::from_secs(5))])
            .unwrap(),
    );
    let agent = agent_on(model, &backend)
        .mcp_servers(servers.clone())
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("try everything")).await.unwrap();
    let r = tool_results(&out);
    assert_eq!(r.len(), 8, "{r:?}");

    assert_eq!(
        r[1],
        (
            "Error executing tool fail: the CRM refused: quota exceeded".to_owned(),
            true
        ),
        "an isError result, with the server's text"
    );
    assert!(
        r[2].1
            && r[2]
                .0
                .contains("rejected the call to \"protocol_error\": the CRM backend is misconfigured"),
        "JSON-RPC error: {:?}",
        r[2]
    );
    assert!(
        r[3].1 && r[3].0.contains("must be a JSON object, not an array"),
        "bad arguments: {:?}",
        r[3]
    );
    assert!(
        r[4].1 && r[4].0.contains("did not answer within 5 s and was cancelled"),
        "timeout: {:?}",
        r[4]
    );
    assert_eq!(
        r[5],
        ("[crm] call-1: Acme call 1".to_owned(), false),
        "the server still works after a timeout"
    );
    assert!(
        r[6].1
            && r[6]
                .0
                .contains("the MCP server process stopped (\"crm\") while running \"crash\"")
            && r[6].0.contains("started again on the next call"),
        "crash: {:?}",
        r[6]
    );
    assert_eq!(
        r[7],
        ("[crm] call-1: Acme call 1".to_owned(), false),
        "restarted after the crash"
    );
    let pids = started(&file);
    assert_eq!(pids.len(), 2, "one restart");
    assert!(!alive(pids[0]), "the crashed process is gone");
    servers.shutdown().await;
    assert!(!alive(pids[1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_never_start_cost_a_bounded_wait_and_leave_nothing_behind() {
    // Runs without Python: `sleep` never answers `initialize`, and a missing program cannot start.
    let hung = McpServerConfig::stdio("hung", "sleep", ["30"])
        .unwrap()
        .with_connect_timeout(Duration::from_millis(500))
        .with_max_restarts(1);
    let missing = McpServerConfig::stdio("missing", "/nonexistent/mcp-server", Vec::<String>::new()).unwrap();
    let servers = McpServers::new([hung, missing]).unwrap();
    let (sink, mut events) = trellis_middleware::runtime::events::EventSink::channel();
    let cx = detached().with_events(sink);

    assert!(servers.tools_for("mcp:hung", &cx).await.is_empty());
    let hung = servers.server("hung").unwrap();
    let pid = hung.pid().expect("the process was spawned");
    assert!(gone(pid).await, "the process that timed out is killed");
    assert!(servers.tools_for("mcp:hung", &cx).await.is_empty());
    assert!(servers.tools_for("mcp:hung", &cx).await.is_empty());
    assert_eq!(hung.starts(), 2, "one start and one restart, then it gives up");

    assert!(servers.tools_for("mcp:missing", &cx).await.is_empty());
    let mut unavailable = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let trellis_middleware::runtime::events::RunEvent::Middleware { kind, data, .. } = event
            && kind == "unavailable"
        {
            unavailable.push(data);
        }
    }
    assert_eq!(unavailable.len(), 4, "{unavailable:?}");
    assert!(
        unavailable[0]["error"]
            .as_str()
            .unwrap()
            .contains("did not finish starting")
    );
    assert!(
        unavailable[2]["error"]
            .as_str()
            .unwrap()
            .contains("not started again")
    );
    assert!(
        unavailable[3]["error"]
            .as_str()
            .unwrap()
            .contains("cannot run \"/nonexistent/mcp-server\""),
        "{}",
        unavailable[3]
    );
}

/// A stdio server gets a clean environment: the variables the official MCP SDKs pass on by
/// default (`HOME`, `LOGNAME`, `PATH`, `SHELL`, `TERM`, `USER`), the ones its configuration sets or
/// names, and nothing else of the agent's — no API key, no `TRELLIS_*`, no `CARGO_*`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_servers_get_a_clean_environment() {
    let python = skip_unless_python!();
    let backend = library("mcp:crm").await;
    let model = Arc::new(
        scripted()
            .then_tool_calls([ToolCall::new(
                "c0",
                "read_file",
                json!({"file_path": "/skills/call-transcripts/SKILL.md"}),
            )])
            .then_tool_calls([ToolCall::new("c1", "crm__env_names", json!({}))])
            .then_text("done"),
    );
    let args = [script(), "--name".into(), "crm".into(), "--env-tool".into()];
    let config = McpServerConfig::stdio("crm", &python, args)
        .unwrap()
        .env("GIVEN_BY_CONFIG", "1")
        .inherit_env("TRELLIS_MCP_PYTHON");
    let servers = Arc::new(McpServers::new([config]).unwrap());
    let agent = agent_on(model, &backend)
        .mcp_servers(servers.clone())
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("env")).await.unwrap();
    let r = tool_results(&out);
    let names: Vec<&str> = r[1].0.split(',').collect();
    assert!(
        names.contains(&"GIVEN_BY_CONFIG") && names.contains(&"PATH"),
        "{names:?}"
    );
    assert!(
        names.contains(&"TRELLIS_MCP_PYTHON"),
        "named in inherit_env: {names:?}"
    );
    let allowed = |n: &str| {
        trellis_agent::mcp::DEFAULT_INHERITED_ENV.contains(&n)
            || ["GIVEN_BY_CONFIG", "TRELLIS_MCP_PYTHON", "LC_CTYPE"].contains(&n)
    };
    assert!(
        names.iter().all(|n| allowed(n)),
        "unexpected variables: {names:?}"
    );
    servers.shutdown().await;
}
