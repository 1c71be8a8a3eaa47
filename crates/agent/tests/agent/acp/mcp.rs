//! MCP servers the editor passes in `session/new`: bound as `--mcp` binds its servers, started when
//! a skill that binds them is read, called by the model, with only the environment the editor
//! gave; a server that cannot be bound is skipped without failing the session.

use serde_json::json;

use super::{client_with, node_modules, reply, scripted, text, updates};
use crate::mcp::common::{alive, assert_bound_then_called, bodies, call_transcripts_skill, script, started};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_the_editor_passes_is_bound_and_its_tools_called() {
    let Some(modules) = node_modules("an_mcp_server_the_editor_passes_is_bound_and_its_tools_called") else {
        return;
    };
    let python = crate::support::skip_unless_python!();
    let dir = tempfile::tempdir().unwrap();
    let skills = call_transcripts_skill(dir.path());
    let file = dir.path().join("started");
    let server = scripted(vec![
        reply(
            json!([{"type": "tool_use", "id": "toolu_1", "name": "read_file",
                    "input": {"file_path": "/skills/team/call-transcripts/SKILL.md"}}]),
            "tool_use",
        ),
        reply(
            json!([{"type": "tool_use", "id": "toolu_2", "name": "crm__search_calls",
                    "input": {"account": "Acme", "limit": 2}}]),
            "tool_use",
        ),
        reply(
            json!([{"type": "tool_use", "id": "toolu_3", "name": "crm__env_names", "input": {}}]),
            "tool_use",
        ),
        text("Acme has two calls."),
    ])
    .await;
    let mcp = json!([
        {"name": "crm", "command": python, "env": [{"name": "CRM_TOKEN", "value": "t-1"}],
         "args": [script(), "--name", "crm", "--env-tool", "--started-file", file]},
        // Skipped, each with a warning: an empty command, and SSE (not advertised).
        {"name": "broken one", "command": "", "args": [], "env": []},
        {"type": "sse", "name": "old", "url": "http://127.0.0.1:9/sse", "headers": []},
    ])
    .to_string();
    let cwd = tempfile::tempdir().unwrap();
    let skills_arg = skills.display().to_string();
    let report = client_with(
        &modules,
        "turns",
        &server,
        cwd.path(),
        &[("ACP_MCP", &mcp), ("SECRET_OF_TRELLIS", "must-not-leak")],
        &["--skills", &skills_arg],
    )
    .await;
    assert_eq!(
        report["initialize"]["agentCapabilities"]["mcpCapabilities"]["http"], true,
        "streamable HTTP servers are taken"
    );
    assert_eq!(report["stops"], json!(["end_turn"]), "{report}");

    // The server's tool was announced and completed, and its answer reached the model.
    let calls = updates(&report, "tool_call");
    assert!(
        calls
            .iter()
            .any(|c| c["toolCallId"] == "toolu_2"
                && c["title"].as_str().unwrap().starts_with("crm__search_calls")),
        "{calls:?}"
    );
    assert!(
        updates(&report, "tool_call_update")
            .iter()
            .any(|u| u["toolCallId"] == "toolu_2" && u["status"] == "completed")
    );
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 4);
    let bodies = bodies(&requests);
    assert_bound_then_called(&bodies);
    // The server got the environment the editor listed, and not Trellis's own.
    let env = &bodies[3];
    assert!(env.contains("CRM_TOKEN"), "{env}");
    assert!(
        !env.contains("SECRET_OF_TRELLIS") && !env.contains("ANTHROPIC_API_KEY"),
        "{env}"
    );

    // Started once, and stopped with `trellis acp`.
    let pids = started(&file);
    assert_eq!(pids.len(), 1);
    assert!(!alive(pids[0]), "the server stopped with the process");
}
