//! A server whose tool list changes while the agent runs (tests/mcp_server/server.py `--dynamic`:
//! `add_tool` and `remove_tool` change the list and send `notifications/tools/list_changed`),
//! through the real agent loop. A tool the server adds after the skill was read is disclosed before
//! a later model call and runs for real; a removed one is withdrawn; the tools offered before the
//! change keep their names and order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use trellis_agent::mcp::McpServerConfig;
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::{ModelRequest, RunInput, ToolCall};

use crate::mcp::common::{self, agent_on, library, scripted, tool_results};
use crate::support::skip_unless_python;

const SKILL: &str = "/skills/call-transcripts/SKILL.md";
const ADDED: &str = "crm__invoice_lookup";

fn mcp_names(r: &ModelRequest) -> Vec<String> {
    r.tools
        .iter()
        .map(|t| t.name.clone())
        .filter(|n| n.starts_with("crm__"))
        .collect()
}

fn call(id: &str, tool: &str, args: serde_json::Value) -> ToolCall {
    ToolCall::new(id, tool, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_a_server_adds_or_removes_are_disclosed_or_withdrawn() {
    let python = skip_unless_python!();
    let backend = library("mcp:crm").await;
    let config = McpServerConfig::stdio(
        "crm",
        &python,
        [
            common::script(),
            "--name".into(),
            "crm".into(),
            "--dynamic".into(),
        ],
    )
    .unwrap();
    // The list_changed notification and the add_tool answer travel on one stream, but the
    // client handles notifications on a task of their own; one more round trip to the same
    // server (search_calls) before the new tool is used leaves that task time to run.
    let model = Arc::new(
        scripted()
            .then_tool_calls([call("c1", "read_file", json!({"file_path": SKILL}))])
            .then_tool_calls([call("c2", "crm__add_tool", json!({"tool": "invoice_lookup"}))])
            .then_tool_calls([call("c3", "crm__search_calls", json!({"account": "Acme"}))])
            .then_tool_calls([call("c4", ADDED, json!({"text": "INV-7"}))])
            .then_tool_calls([call("c5", "crm__remove_tool", json!({"tool": "invoice_lookup"}))])
            .then_tool_calls([call("c6", "crm__search_calls", json!({"account": "Acme"}))])
            .then_tool_calls([call("c7", ADDED, json!({"text": "INV-8"}))])
            .then_text("done"),
    );
    let agent = agent_on(model.clone(), &backend)
        .mcp_server(config)
        .build()
        .unwrap();
    let (sink, mut events) = EventSink::channel();
    let out = agent
        .run(RunInput::human("look up invoice INV-7").events(sink))
        .await
        .unwrap();
    let results = tool_results(&out);
    let requests = model.requests();
    assert_eq!(requests.len(), 8);

    let before = mcp_names(&requests[1]);
    assert!(before.contains(&"crm__add_tool".to_owned()), "{before:?}");
    assert!(!before.contains(&ADDED.to_owned()), "{before:?}");
    assert_eq!(results[1], ("[crm] added invoice_lookup".to_owned(), false));

    // Disclosed by the model call after the next round trip, appended after the earlier tools.
    let after = mcp_names(&requests[3]);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "earlier tools keep names and order"
    );
    assert_eq!(&after[before.len()..], [ADDED.to_owned()]);
    assert_eq!(results[3], ("[crm] invoice_lookup says INV-7".to_owned(), false));

    // Removed: withdrawn, and a forced call fails like an unknown tool.
    assert_eq!(results[4], ("[crm] removed invoice_lookup".to_owned(), false));
    assert_eq!(mcp_names(&requests[6]), before);
    assert!(
        results[6].1 && results[6].0.contains("no tool named \"crm__invoice_lookup\""),
        "{:?}",
        results[6]
    );

    let mut kinds = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let RunEvent::Middleware { middleware, kind, .. } = event {
            kinds.push(format!("{middleware}:{kind}"));
        }
    }
    assert_eq!(
        kinds.iter().filter(|k| *k == "skills:tools_appeared").count(),
        1,
        "{kinds:?}"
    );
    assert!(
        kinds.iter().filter(|k| *k == "mcp:tools_changed").count() >= 2,
        "{kinds:?}"
    );
}
