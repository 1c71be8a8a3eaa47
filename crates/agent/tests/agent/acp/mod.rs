//! `trellis acp` driven by a real, independent client: the official ACP TypeScript SDK
//! (`@agentclientprotocol/sdk`, pinned and installed by `cargo xtask`) under Node, through
//! `client.mjs` beside this file, against a scripted mock Anthropic endpoint. Every line both ways
//! is checked against the protocol's JSON schema (the SDK package's `schema/v1/schema.json`).
//!
//! Needs `node` and `TRELLIS_ACP_NODE_MODULES` (set by `cargo xtask test`); without them the tests
//! skip, except under `TRELLIS_EMULATORS=required` or `CI=true`, where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod execute;
mod fs;
mod mcp;
mod sessions;
mod subagents;
mod wire;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use crate::cli::harness::{MODEL, messages, reply};

/// The model's replies, one per request in order; after the last, "done".
struct Script {
    replies: Vec<ResponseTemplate>,
    next: AtomicUsize,
}

impl Respond for Script {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        self.replies
            .get(i)
            .cloned()
            .unwrap_or_else(|| reply(json!([{"type": "text", "text": "done"}]), "end_turn"))
    }
}

async fn scripted(replies: Vec<ResponseTemplate>) -> MockServer {
    let server = MockServer::start().await;
    messages()
        .respond_with(Script {
            replies,
            next: AtomicUsize::new(0),
        })
        .mount(&server)
        .await;
    server
}

/// A streamed (SSE) text reply in these pieces.
fn streamed(pieces: &[&str]) -> ResponseTemplate {
    let mut body = String::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_s\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
         event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    );
    for piece in pieces {
        let delta = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}});
        body.push_str(&format!("event: content_block_delta\ndata: {delta}\n\n"));
    }
    body.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
         event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n\
         event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    ResponseTemplate::new(200)
        .set_body_string(body)
        .insert_header("content-type", "text/event-stream")
}

fn text(answer: &str) -> ResponseTemplate {
    reply(json!([{"type": "text", "text": answer}]), "end_turn")
}

fn edit_file(id: &str, path: &str, old: &str, new: &str) -> ResponseTemplate {
    reply(
        json!([{"type": "tool_use", "id": id, "name": "edit_file", "input": {"file_path": path, "old_string": old, "new_string": new}}]),
        "tool_use",
    )
}

fn write_file(id: &str, path: &str, content: &str) -> ResponseTemplate {
    reply(
        json!([{"type": "tool_use", "id": id, "name": "write_file", "input": {"file_path": path, "content": content}}]),
        "tool_use",
    )
}

/// `TRELLIS_ACP_NODE_MODULES`, or `None` when the test should skip (it fails instead under
/// `TRELLIS_EMULATORS=required` or `CI=true`).
fn node_modules(test: &str) -> Option<String> {
    let found = std::env::var("TRELLIS_ACP_NODE_MODULES")
        .ok()
        .filter(|v| !v.is_empty());
    if found.is_none() && std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: TRELLIS_ACP_NODE_MODULES is not set but CI=true (run `cargo xtask test`)");
    }
    let [modules] = crate::support::env_or_skip(test, ["TRELLIS_ACP_NODE_MODULES"])?;
    Some(modules)
}

/// Run `client.mjs SCENARIO` against `trellis acp` talking to `server`; its JSON report.
async fn client(
    modules: &str,
    scenario: &str,
    server: &MockServer,
    cwd: &Path,
    env: &[(&str, &str)],
) -> Value {
    client_with(modules, scenario, server, cwd, env, &[]).await
}

/// [`client`], with more arguments for `trellis acp`.
async fn client_with(
    modules: &str,
    scenario: &str,
    server: &MockServer,
    cwd: &Path,
    env: &[(&str, &str)],
    extra: &[&str],
) -> Value {
    let own_state = tempfile::tempdir().unwrap();
    // ACP_STATE: a state dir shared between runs (else one of this run's own).
    let state = env
        .iter()
        .find(|(k, _)| *k == "ACP_STATE")
        .map(|(_, v)| PathBuf::from(v))
        .unwrap_or_else(|| own_state.path().to_path_buf());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/agent/acp/client.mjs");
    // `--sandbox none` unless the test picks one.
    let sandbox = if extra.contains(&"--sandbox") {
        json!([])
    } else {
        json!(["--sandbox", "none"])
    };
    let mut args = json!(["--model", MODEL, "--state-dir", state]);
    args.as_array_mut()
        .unwrap()
        .extend(sandbox.as_array().unwrap().iter().cloned());
    for arg in extra {
        args.as_array_mut().unwrap().push(json!(arg));
    }
    let mut command = Command::new("node");
    command
        .arg(script)
        .arg(scenario)
        .env("TRELLIS_ACP_NODE_MODULES", modules)
        .env("TRELLIS_BIN", env!("CARGO_BIN_EXE_trellis"))
        .env("TRELLIS_ARGS", args.to_string())
        .env("ACP_CWD", cwd)
        .env(
            "TRELLIS_CONFIG_HOME",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no-user-config"),
        )
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", server.uri());
    for (k, v) in env {
        command.env(k, v);
    }
    let output = tokio::task::spawn_blocking(move || command.output().expect("node runs"))
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "client.mjs failed: {stderr}");
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("client.mjs printed no report ({e}): {stderr}"));
    assert!(report["error"].is_null(), "{}\n{stderr}", report["error"]);
    assert_eq!(report["exit"], 0, "trellis acp exit status; {stderr}");
    assert_eq!(
        report["invalid"],
        json!([]),
        "every message validates against the ACP schema"
    );
    // The agent answered an unknown session with -32002 (resource not found).
    assert_eq!(
        report["unknownSession"]["code"], -32002,
        "{}",
        report["unknownSession"]
    );
    report
}

fn updates<'a>(report: &'a Value, kind: &str) -> Vec<&'a Value> {
    report["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_streams_shows_diffs_and_asks_for_permission() {
    let Some(modules) = node_modules("a_session_streams_shows_diffs_and_asks_for_permission") else {
        return;
    };
    let server = scripted(vec![
        // Prompt 1: a streamed answer.
        streamed(&["Hello ", "from ", "Trellis."]),
        // Prompt 2: a new file, allowed once.
        write_file("toolu_1", "/workspace/a.txt", "one"),
        text("wrote it"),
        // Prompt 3: an edit of that file, allowed always.
        edit_file("toolu_2", "/workspace/a.txt", "one", "two"),
        text("edited it"),
        // Prompt 4: another edit of the same file: not asked.
        edit_file("toolu_3", "/workspace/a.txt", "two", "three"),
        text("and again"),
        // Prompt 5: another file: asked, and rejected.
        write_file("toolu_4", "/workspace/b.txt", "no"),
        text("not written"),
    ])
    .await;
    let cwd = tempfile::tempdir().unwrap();
    let cwd_path = cwd.path().canonicalize().unwrap();
    let report = client(
        &modules,
        "turns",
        &server,
        &cwd_path,
        &[
            ("ACP_TURNS", "5"),
            ("ACP_ANSWERS", "allow_once,allow_always,reject_once"),
        ],
    )
    .await;

    // initialize: version 1, and only the capabilities Trellis implements.
    let init = &report["initialize"];
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentInfo"]["name"], "trellis");
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        init["agentCapabilities"]["sessionCapabilities"]["list"],
        json!({})
    );
    assert!(
        init["agentCapabilities"]["sessionCapabilities"]
            .get("resume")
            .is_none()
    );
    assert_eq!(init["agentCapabilities"]["promptCapabilities"]["image"], false);
    assert_eq!(
        init["agentCapabilities"]["promptCapabilities"]["embeddedContext"],
        true
    );
    assert_eq!(init["authMethods"], json!([]));

    assert_eq!(report["stops"], json!(vec!["end_turn"; 5]), "{report}");

    // The answer streamed in its pieces, as one message.
    let chunks = updates(&report, "agent_message_chunk");
    let pieces: Vec<&str> = chunks
        .iter()
        .take(3)
        .map(|c| c["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(pieces, ["Hello ", "from ", "Trellis."]);
    assert!(chunks[0]["messageId"].is_string());
    assert!(
        chunks[..3]
            .iter()
            .all(|c| c["messageId"] == chunks[0]["messageId"])
    );

    // Each write was announced with kind edit, its location and a diff.
    let calls = updates(&report, "tool_call");
    let a = cwd_path.join("a.txt").display().to_string();
    let call = |id: &str| {
        *calls
            .iter()
            .find(|c| c["toolCallId"] == id)
            .unwrap_or_else(|| panic!("no tool_call {id}"))
    };
    let first = call("toolu_1");
    assert_eq!(first["kind"], "edit");
    assert_eq!(first["locations"][0]["path"], a);
    let diff = &first["content"][0];
    assert_eq!(
        (&diff["type"], &diff["path"], &diff["newText"]),
        (&json!("diff"), &json!(a), &json!("one"))
    );
    assert!(diff["oldText"].is_null(), "a new file has no old text: {diff}");
    let second = call("toolu_2");
    assert_eq!(second["kind"], "edit");
    assert_eq!(
        second["content"][0]["oldText"], "one",
        "the diff shows the text replaced"
    );
    assert_eq!(second["content"][0]["newText"], "two");

    // Asked about calls 1, 2 and 4: call 3 was allowed always (same tool, same path).
    let asked: Vec<&str> = report["permissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["toolCall"]["toolCallId"].as_str().unwrap())
        .collect();
    assert_eq!(asked, ["toolu_1", "toolu_2", "toolu_4"]);
    let options = &report["permissions"][0]["options"];
    let kinds: Vec<&str> = options
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    assert!(
        options[1]["name"].as_str().unwrap().contains("/workspace/a.txt"),
        "the always option names what it allows: {}",
        options[1]["name"]
    );
    assert_eq!(report["permissions"][0]["toolCall"]["content"][0]["type"], "diff");

    // What ran, ran; the rejected call did not, and was marked failed.
    assert_eq!(std::fs::read_to_string(cwd_path.join("a.txt")).unwrap(), "three");
    assert!(!cwd_path.join("b.txt").exists());
    let status = |id: &str, s: &str| {
        updates(&report, "tool_call_update")
            .iter()
            .any(|u| u["toolCallId"] == id && u["status"] == s)
    };
    assert!(status("toolu_1", "in_progress") && status("toolu_1", "completed"));
    assert!(status("toolu_3", "completed"));
    assert!(status("toolu_4", "failed"));
    assert!(!status("toolu_4", "in_progress"));

    // stdout carried protocol messages only: every line the client read was JSON-RPC 2.0.
    for line in report["wire"].as_array().unwrap() {
        assert_eq!(line["message"]["jsonrpc"], "2.0", "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_turn_and_answers_cancelled() {
    let Some(modules) = node_modules("cancel_stops_the_turn_and_answers_cancelled") else {
        return;
    };
    let server = scripted(vec![
        // Prompt 1: a model call that would take a minute; cancelled.
        text("too late").set_delay(Duration::from_secs(60)),
        // Prompt 2: a write, whose permission question is cancelled.
        write_file("toolu_9", "/workspace/c.txt", "never"),
        // Prompt 3: answered.
        text("back again"),
    ])
    .await;
    let cwd = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let report = client(
        &modules,
        "cancel",
        &server,
        cwd.path(),
        &[("ACP_ANSWERS", "cancel")],
    )
    .await;
    assert_eq!(
        report["stops"],
        json!(["cancelled", "cancelled", "end_turn"]),
        "{report}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the cancelled model call did not hold the turn: {:?}",
        started.elapsed()
    );
    assert!(
        !cwd.path().join("c.txt").exists(),
        "a call cancelled at its question never runs"
    );
    // The next prompt's model call sees the cancelled call rejected, then the new message.
    let requests = server.received_requests().await.unwrap();
    let last: Value = serde_json::from_slice(&requests.last().unwrap().body).unwrap();
    let body = last["messages"].to_string();
    assert!(body.contains("cancelled the turn"), "{body}");
    assert!(body.contains("again"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_are_slash_commands_and_a_slash_command_pins_its_skill() {
    let Some(modules) = node_modules("skills_are_slash_commands_and_a_slash_command_pins_its_skill") else {
        return;
    };
    let skills = tempfile::tempdir().unwrap();
    let dir = skills.path().join("meeting-prep");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: meeting-prep\ndescription: Prepare a customer meeting brief.\n---\n\nMARKER-7731: start with the account's open deals.\n",
    )
    .unwrap();
    let server = scripted(vec![text("brief ready")]).await;
    let cwd = tempfile::tempdir().unwrap();
    let prompts = json!(["/no-such-skill hello", "/meeting-prep Acme tomorrow"]).to_string();
    let skills_arg = skills.path().display().to_string();
    let report = client_with(
        &modules,
        "turns",
        &server,
        cwd.path(),
        &[("ACP_PROMPTS", &prompts)],
        &["--skills", &skills_arg],
    )
    .await;
    assert_eq!(report["stops"], json!(["end_turn", "end_turn"]), "{report}");

    // The skills came as slash commands, after the session/new response.
    let commands = updates(&report, "available_commands_update");
    assert_eq!(commands.len(), 1, "{report}");
    let names: Vec<&str> = commands[0]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["meeting-prep"]);
    let wire = report["wire"].as_array().unwrap();
    let at = |pred: &dyn Fn(&Value) -> bool| wire.iter().position(|w| pred(&w["message"])).unwrap();
    let response = at(&|m| m["result"]["sessionId"].is_string());
    let update = at(&|m| m["params"]["update"]["sessionUpdate"] == "available_commands_update");
    assert!(
        response < update,
        "available_commands_update came before the session/new response"
    );

    // An unknown /word is answered by Trellis without a model call; the skill's pins it.
    let said = updates(&report, "agent_message_chunk")[0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(said.contains("no-such-skill"), "{said}");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1, "one model call, for the pinned skill's prompt");
    let body = String::from_utf8_lossy(&requests[0].body);
    assert!(
        body.contains("MARKER-7731"),
        "the pinned skill's instructions reach the model: {body}"
    );
    assert!(body.contains("Acme tomorrow"));
    assert!(
        !body.contains("/meeting-prep Acme"),
        "the command word is not sent as text"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loaded_session_replays_its_history_and_goes_on() {
    let Some(modules) = node_modules("a_loaded_session_replays_its_history_and_goes_on") else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let state_arg = state.path().display().to_string();
    let cwd = tempfile::tempdir().unwrap();
    let first = scripted(vec![
        write_file("toolu_1", "/workspace/a.txt", "one"),
        text("written"),
    ])
    .await;
    let prompts = json!(["first question"]).to_string();
    let before = client(
        &modules,
        "turns",
        &first,
        cwd.path(),
        &[
            ("ACP_PROMPTS", &prompts),
            ("ACP_ANSWERS", "allow_once"),
            ("ACP_STATE", &state_arg),
        ],
    )
    .await;
    let id = before["sessionId"].as_str().unwrap().to_owned();

    // Another process, another client: load the session and go on.
    let second = scripted(vec![text("still here")]).await;
    let report = client(
        &modules,
        "load",
        &second,
        cwd.path(),
        &[("ACP_SESSION", &id), ("ACP_STATE", &state_arg)],
    )
    .await;
    assert_eq!(report["unknownLoad"]["code"], -32002, "{}", report["unknownLoad"]);
    assert_eq!(report["stops"], json!(["end_turn"]), "{report}");

    // The replay, before the load response: the question, the call with its final status, the answer.
    let replayed: Vec<&Value> = report["updates"].as_array().unwrap()
        [..report["replayed"].as_u64().unwrap() as usize]
        .iter()
        .collect();
    let kinds: Vec<&str> = replayed
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["user_message_chunk", "tool_call", "agent_message_chunk"],
        "{replayed:?}"
    );
    assert_eq!(replayed[0]["content"]["text"], "first question");
    assert_eq!(replayed[1]["toolCallId"], "toolu_1");
    assert_eq!(replayed[1]["status"], "completed");
    assert_eq!(replayed[1]["kind"], "edit");
    assert_eq!(replayed[2]["content"]["text"], "written");
    let wire = report["wire"].as_array().unwrap();
    let response = wire
        .iter()
        .position(|w| {
            w["direction"] == "agent"
                && w["message"]["result"].is_object()
                && w["message"]["id"].is_number()
                && w["message"]["result"].as_object().unwrap().is_empty()
        })
        .unwrap();
    let last_replayed = wire
        .iter()
        .position(|w| w["message"]["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .unwrap();
    assert!(
        last_replayed < response,
        "the replay comes before the session/load response"
    );

    // The thread went on: the model saw the earlier conversation.
    let requests = second.received_requests().await.unwrap();
    let body = String::from_utf8_lossy(&requests[0].body);
    assert!(
        body.contains("first question") && body.contains("after loading"),
        "{body}"
    );
}
