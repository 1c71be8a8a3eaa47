//! Per-user MCP sessions (`McpServerConfig::session_per_user`) through the real agent loop, against
//! the real test server (tests/mcp_server/server.py `--identity`: `whoami` answers with the user id
//! the client sent and the server's process id). Each user gets a session of their own, which
//! learns the user's id; a run without one gets no tools; the least recently used session is
//! stopped beyond the limit; shutdown stops them all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use trellis_agent::mcp::{McpServerConfig, McpServers};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::Viewer;
use trellis_middleware::{RunInput, ToolCall};

use crate::mcp_common::{
    self, agent_on, caps, gone, http_server_with, library, python, script, tool_results,
};

const SKILL: &str = "/skills/call-transcripts/SKILL.md";

/// One run that reads the skill and calls `<server>__whoami`, as `user` (`None`: no identity).
/// Returns the `whoami` result and whether any of the server's tools was offered.
async fn whoami(servers: &Arc<McpServers>, server: &str, user: Option<&str>) -> ((String, bool), bool) {
    let backend = library(&format!("mcp:{server}")).await;
    let model = Arc::new(
        ScriptedModel::new()
            .with_capabilities(caps())
            .then_tool_calls([ToolCall::new("c1", "read_file", json!({"file_path": SKILL}))])
            .then_tool_calls([ToolCall::new("c2", format!("{server}__whoami"), json!({}))])
            .then_text("done"),
    );
    let agent = agent_on(model.clone(), &backend)
        .mcp_servers(servers.clone())
        .build()
        .unwrap();
    let mut input = RunInput::human("who am I?");
    if let Some(user) = user {
        input = input.extension(Viewer::new(user, ["sales"]));
    }
    let out = agent.run(input).await.unwrap();
    let offered = model
        .requests()
        .iter()
        .any(|r| r.tools.iter().any(|t| t.name.starts_with(&format!("{server}__"))));
    (tool_results(&out)[1].clone(), offered)
}

/// The pid in a `whoami` answer.
fn pid(answer: &str) -> u32 {
    answer.rsplit_once("pid=").unwrap().1.trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_gets_a_session_of_their_own() {
    let Some(python) = python("each_user_gets_a_session_of_their_own") else {
        return;
    };
    let config = McpServerConfig::stdio(
        "crm",
        &python,
        [script(), "--name".into(), "crm".into(), "--identity".into()],
    )
    .unwrap()
    .session_per_user(2);
    let servers = Arc::new(McpServers::new([config]).unwrap());
    assert!(servers.server("crm").is_none(), "no shared session");

    let ((alice, failed), offered) = whoami(&servers, "crm", Some("alice")).await;
    assert!(offered && !failed, "{alice}");
    assert!(alice.starts_with("[crm] user=alice pid="), "{alice}");
    let ((bob, _), _) = whoami(&servers, "crm", Some("bob")).await;
    assert!(bob.starts_with("[crm] user=bob pid="), "{bob}");
    let (alice_pid, bob_pid) = (pid(&alice), pid(&bob));
    assert_ne!(alice_pid, bob_pid, "one process per user");
    assert_eq!(
        servers.user_session("crm", "alice").unwrap().pid(),
        Some(alice_pid)
    );

    // No identity: the server's tools are never offered, and a forced call is an unknown tool.
    let ((anonymous, failed), offered) = whoami(&servers, "crm", None).await;
    assert!(!offered, "no user id, no tools");
    assert!(
        failed && anonymous.contains("no tool named \"crm__whoami\""),
        "{anonymous}"
    );

    // Alice again: her session is reused, and bob's is now the least recently used.
    let ((again, _), _) = whoami(&servers, "crm", Some("alice")).await;
    assert_eq!(pid(&again), alice_pid);

    // A third user, limit 2: bob's session is stopped, alice's stays.
    let ((carol, _), _) = whoami(&servers, "crm", Some("carol")).await;
    assert!(carol.starts_with("[crm] user=carol pid="), "{carol}");
    assert!(gone(bob_pid).await, "the evicted session's process exits");
    assert!(servers.user_session("crm", "bob").is_none());
    assert!(mcp_common::alive(alice_pid));

    // Shutdown stops every session; nothing starts afterwards.
    servers.shutdown().await;
    assert!(gone(alice_pid).await && gone(pid(&carol)).await);
    let ((after, failed), offered) = whoami(&servers, "crm", Some("alice")).await;
    assert!(!offered && failed, "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sessions_carry_the_user_id_in_a_header() {
    let Some(python) = python("http_sessions_carry_the_user_id_in_a_header") else {
        return;
    };
    let server = http_server_with(&python, "docs", &["--identity"]).await;
    let config = McpServerConfig::http("docs", &server.url)
        .unwrap()
        .session_per_user(8);
    let servers = Arc::new(McpServers::new([config]).unwrap());
    for user in ["alice", "bob"] {
        let ((answer, failed), _) = whoami(&servers, "docs", Some(user)).await;
        assert!(!failed, "{answer}");
        assert!(
            answer.starts_with(&format!("[docs] user={user} pid=")),
            "{answer}"
        );
    }
    // A user id that cannot be a header value gets no session, rather than a broken one.
    let ((answer, failed), offered) = whoami(&servers, "docs", Some("eve\nx-admin: 1")).await;
    assert!(!offered && failed, "{answer}");
    servers.shutdown().await;
}
