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

/// The model's first reply: read the skill that binds `crm`.
fn read_the_skill() -> ResponseTemplate {
    reply(
        json!([{"type": "tool_use", "id": "toolu_1", "name": "read_file",
                "input": {"file_path": "/skills/team/call-transcripts/SKILL.md"}}]),
        "tool_use",
    )
}

/// A mock Messages endpoint giving `steps` in order, one request each.
async fn one_reply_each(steps: impl IntoIterator<Item = ResponseTemplate>) -> MockServer {
    let server = MockServer::start().await;
    for (i, step) in steps.into_iter().enumerate() {
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(step)
            .up_to_n_times(1)
            .with_priority(i as u8 + 1)
            .mount(&server)
            .await;
    }
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_mcp_binds_the_server_to_a_skill() {
    let python = skip_unless_python!();
    let dir = tempfile::tempdir().unwrap();
    let skills = call_transcripts_skill(dir.path());
    let file = dir.path().join("started");

    let steps = [
        read_the_skill(),
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
    let server = one_reply_each(steps).await;

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

/// Lines of the test server's `--calls-file` naming `tool`.
fn calls_of(file: &std::path::Path, tool: &str) -> usize {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.trim() == tool)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_mcp_call_cut_by_a_kill_runs_again_and_a_finished_one_does_not() {
    let python = skip_unless_python!();
    let dir = tempfile::tempdir().unwrap();
    let skills = call_transcripts_skill(dir.path());
    let calls = dir.path().join("calls");
    let state = dir.path().join("state");

    let steps = [
        read_the_skill(),
        reply(
            json!([
                {"type": "tool_use", "id": "toolu_s", "name": "crm__search_calls",
                 "input": {"account": "Acme", "limit": 2}},
                {"type": "tool_use", "id": "toolu_l", "name": "crm__lookup_slowly",
                 "input": {"account": "Acme"}}
            ]),
            "tool_use",
        ),
        reply(json!([{"type": "text", "text": "done"}]), "end_turn"),
    ];
    let server = one_reply_each(steps).await;
    let spec = format!(
        "crm={python} {} --name crm --calls-file {}",
        script(),
        calls.display()
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_trellis"))
        .args([
            "run",
            "--model",
            "anthropic:claude-sonnet-4-5",
            "--thread",
            "t1",
            "--skills",
        ])
        .arg(&skills)
        .arg("--mcp")
        .arg(&spec)
        .arg("--state-dir")
        .arg(&state)
        .arg("look up Acme")
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once search_calls is journaled as finished and lookup_slowly is running.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let records = crate::cli::crash::journal_of(&state.join("threads/t1"));
        let searched = records
            .iter()
            .any(|r| r["call_id"] == "toolu_s" && r["outcome"]["status"] == "finished");
        if searched && calls_of(&calls, "lookup_slowly") == 1 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "trellis run ended before the kill"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "never got there: {records:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let uri = server.uri();
    let resume_state = state.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_trellis"))
            .args(["resume", "t1", "--state-dir"])
            .arg(resume_state)
            .env("ANTHROPIC_API_KEY", "test-key")
            .env("ANTHROPIC_BASE_URL", uri)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    assert_eq!(
        calls_of(&calls, "search_calls"),
        1,
        "the finished call is not run again"
    );
    assert_eq!(
        calls_of(&calls, "lookup_slowly"),
        2,
        "the read-only call cut short runs again"
    );
    let requests = server.received_requests().await.unwrap();
    let last = bodies(&requests).pop().unwrap();
    assert!(last.contains("[crm] Acme looked up"), "{last}");
    assert!(last.contains("[crm] call-1: Acme call 1"), "{last}");
}
