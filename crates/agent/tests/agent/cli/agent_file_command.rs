//! The agent file through the `trellis` binary: `inspect` and `run` read `trellis.toml` (or
//! `--agent FILE`), flags override it, the typed model flags reach the provider's request, and a
//! setting the provider lacks is refused with a message that reaches the user.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::harness::{example, trellis};

const FILE: &str = "model = \"anthropic:claude-sonnet-4-5\"\nskills = [\"skills\"]\n\
[model_settings]\ntemperature = 0.2\nstop = [\"END\"]\n[sandbox]\nkind = \"none\"\n\
[[subagents]]\nname = \"researcher\"\ndescription = \"Finds facts in the account files.\"\nprompt = \"Research.\"\n\
tools = [\"read_file\", \"grep\"]\n";

/// A project directory with the example's skills and `FILE` as its trellis.toml.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills/meeting-prep");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::copy(example("skills/meeting-prep/SKILL.md"), skills.join("SKILL.md")).unwrap();
    std::fs::write(dir.path().join("trellis.toml"), FILE).unwrap();
    dir
}

fn inspect_json(dir: &Path, args: &[&str]) -> Value {
    let out = trellis()
        .current_dir(dir)
        .args(["inspect", "--json"])
        .args(args)
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn inspect_reads_trellis_toml_and_flags_override_it() {
    let dir = project();
    let report = inspect_json(dir.path(), &[]);
    assert_eq!(report["model"], "anthropic:claude-sonnet-4-5");
    assert_eq!(report["provider_body"]["temperature"], json!(0.2));
    assert_eq!(report["provider_body"]["stop_sequences"], json!(["END"]));
    let task = report["request"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "task")
        .unwrap();
    assert!(
        task["description"].as_str().unwrap().contains("researcher"),
        "{task}"
    );
    let text = report["request"]["system"].to_string();
    assert!(text.contains("meeting-prep"), "the file's skills, relative to it");
    assert_eq!(report["sandbox"]["offered"], false, "[sandbox] kind = none");

    let report = inspect_json(
        dir.path(),
        &[
            "--temperature",
            "1.5",
            "--model",
            "openai:gpt-4.1",
            "--stop",
            "STOP",
        ],
    );
    assert_eq!(report["model"], "openai:gpt-4.1");
    assert_eq!(report["provider_body"]["temperature"], json!(1.5));
    assert_eq!(report["provider_body"]["stop"], json!(["STOP"]));
}

#[test]
fn an_agent_file_given_with_agent_is_used_from_any_directory() {
    let dir = project();
    let elsewhere = tempfile::tempdir().unwrap();
    let file = dir.path().join("trellis.toml").display().to_string();
    let report = inspect_json(elsewhere.path(), &["--agent", &file]);
    assert_eq!(report["provider_body"]["temperature"], json!(0.2));
    let mounted = report["mounts"].to_string();
    assert!(
        mounted.contains(&dir.path().join("skills").display().to_string()),
        "{mounted}"
    );
}

#[test]
fn a_bad_agent_file_stops_every_command_with_the_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("trellis.toml"),
        "# agent\n\nmodle = \"openai:gpt-4.1\"\n",
    )
    .unwrap();
    for args in [&["inspect"][..], &["run", "hello"][..]] {
        let out = trellis()
            .current_dir(dir.path())
            .args(args)
            .env_remove("ANTHROPIC_API_KEY")
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("unknown key `modle` at line 3; did you mean `model`?"),
            "{args:?}: {err}"
        );
    }
    let out = trellis()
        .current_dir(dir.path())
        .args(["inspect", "--agent", "missing.toml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the agent file"));
}

fn answer() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Done."}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 2}
    }))
}

async fn run_in(dir: &Path, server: &MockServer, args: &[&str]) -> std::process::Output {
    let (dir, uri) = (dir.to_owned(), server.uri());
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        trellis()
            .current_dir(&dir)
            .arg("run")
            .args(&args)
            .env("ANTHROPIC_API_KEY", "test-key")
            .env("ANTHROPIC_BASE_URL", uri)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_takes_the_model_and_its_settings_from_the_file_and_the_flags() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(answer())
        .mount(&server)
        .await;
    let dir = project();
    let out = run_in(
        dir.path(),
        &server,
        &["--max-tokens", "512", "--top-p", "0.8", "Prep me"],
    )
    .await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Done.");
    let requests = server.received_requests().await.unwrap();
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["model"], "claude-sonnet-4-5", "the file's model, no --model");
    assert_eq!(body["temperature"], json!(0.2));
    assert_eq!(body["stop_sequences"], json!(["END"]));
    assert_eq!(body["max_tokens"], json!(512));
    assert_eq!(body["top_p"], json!(0.8));
}

/// Anthropic has no reasoning effort, the Chat Completions API no thinking budget: the flag is
/// refused, by name, before any request leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_the_provider_lacks_is_refused_by_name() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(answer())
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let out = run_in(
        dir.path(),
        &server,
        &[
            "--model",
            "anthropic:claude-sonnet-4-5",
            "--sandbox",
            "none",
            "--state-dir",
            &state,
            "--reasoning-effort",
            "high",
            "hi",
        ],
    )
    .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reasoning_effort"), "{err}");
    assert!(server.received_requests().await.unwrap().is_empty());
    let out = trellis()
        .args([
            "run",
            "--model",
            "anthropic:claude-sonnet-4-5",
            "--temperature",
            "9",
            "hi",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--temperature: temperature must be between 0 and 2"),
        "{err}"
    );
}

#[test]
fn schema_prints_the_agent_file_schema() {
    let out = trellis().args(["schema", "agent-file"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema, trellis_agent::cli::config::schema());
    assert!(schema["properties"]["model_settings"].is_object());
}
