//! `trellis run --mcp NAME=COMMAND` end to end: a mock Anthropic endpoint drives the agent to read a
//! skill that binds the server and to call one of its tools; the real MCP server answers, and no
//! server process outlives the command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::mcp::common::{alive, assert_bound_then_called, bodies, call_transcripts_skill, script, started};
use crate::support::skip_unless_python;

fn reply(content: Value, stop: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_mcp_binds_the_server_to_a_skill() {
    let python = skip_unless_python!();
    let dir = tempfile::tempdir().unwrap();
    let skills = call_transcripts_skill(dir.path());
    let file = dir.path().join("started");

    let server = MockServer::start().await;
    let steps = [
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
            json!([{"type": "text", "text": "Acme has two calls."}]),
            "end_turn",
        ),
    ];
    for (i, step) in steps.into_iter().enumerate() {
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(step)
            .up_to_n_times(1)
            .with_priority(i as u8 + 1)
            .mount(&server)
            .await;
    }

    let spec = format!(
        "crm={python} {} --name crm --started-file {}",
        script(),
        file.display()
    );
    let args = [
        "run".to_owned(),
        "--model".to_owned(),
        "anthropic:claude-sonnet-4-5".to_owned(),
        "--skills".to_owned(),
        skills.display().to_string(),
        "--mcp".to_owned(),
        spec,
        "--state-dir".to_owned(),
        dir.path().join("state").display().to_string(),
        "find the Acme calls".to_owned(),
    ];
    let uri = server.uri();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_trellis"))
            .args(args)
            .env("ANTHROPIC_API_KEY", "test-key")
            .env("ANTHROPIC_BASE_URL", uri)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Acme has two calls.");
    assert!(stderr.contains("[mcp] started"), "{stderr}");

    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 3);
    assert_bound_then_called(&bodies(&requests));
    let pids = started(&file);
    assert_eq!(pids.len(), 1);
    assert!(!alive(pids[0]), "the server stopped with the command");

    let bad = Command::new(env!("CARGO_BIN_EXE_trellis"))
        .args([
            "run",
            "--model",
            "anthropic:claude-sonnet-4-5",
            "--mcp",
            "crm",
            "hi",
        ])
        .env("ANTHROPIC_API_KEY", "test-key")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("expected NAME=COMMAND or NAME=URL"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}
