//! The `trellis` binary, end to end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use super::harness::{TrellisRun, example, trellis};

#[test]
fn inspect_runs_without_an_api_key() {
    let out = trellis()
        .args([
            "inspect",
            "--skills",
            &example("skills"),
            "--memory",
            &example("AGENTS.md"),
        ])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("/skills/sales-assistant/meeting-prep/SKILL.md"));
    assert!(text.contains("cache breakpoint"));
    let json = trellis()
        .args([
            "inspect",
            "--json",
            "--sandbox",
            "none",
            "--skills",
            &example("skills"),
        ])
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        value["request"]["tools"].as_array().unwrap().len(),
        8,
        "seven file tools and task"
    );
    assert!(value["provider_body"]["system"].is_array());
}

#[test]
fn skills_list_prints_the_documented_json() {
    let out = trellis()
        .args(["skills", "list", "--json", &example("skills")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let skills = value["skills"].as_array().unwrap();
    let names: Vec<&str> = skills.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["call-transcripts", "competitive-intel-card", "meeting-prep"]
    );
    for s in skills {
        let dir = s["name"].as_str().unwrap();
        assert!(s["path"].as_str().unwrap().ends_with(&format!("/{dir}/SKILL.md")));
        for key in [
            "description",
            "source",
            "license",
            "compatibility",
            "metadata",
            "allowed_tools",
        ] {
            assert!(s.get(key).is_some(), "{key} present");
        }
    }
    assert_eq!(
        skills[0]["allowed_tools"],
        serde_json::json!(["search_calls", "get_transcript", "read_file"])
    );
    assert_eq!(
        skills[2]["metadata"]["version"], "1.10",
        "scalars keep the text that was written"
    );
    assert_eq!(value["warnings"], serde_json::json!([]));
}

/// Issue 23, item 4: patterns with spaces inside parentheses reach `skills list --json` whole.
#[test]
fn skills_list_keeps_tool_patterns_with_spaces_whole() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("py")).unwrap();
    std::fs::write(
        dir.path().join("py/SKILL.md"),
        "---\nname: py\ndescription: Python work.\nallowed-tools: Read Bash(uv run python:*) Bash(uv pip install:*)\n---\n",
    )
    .unwrap();
    let out = trellis()
        .args([
            "skills",
            "list",
            "--json",
            "--no-cache",
            &dir.path().display().to_string(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        value["skills"][0]["allowed_tools"],
        serde_json::json!(["Read", "Bash(uv run python:*)", "Bash(uv pip install:*)"])
    );
}

#[test]
fn skills_validate_exits_one_on_errors() {
    let ok = trellis()
        .args(["skills", "validate", &example("skills")])
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stdout));
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("Bad_Name")).unwrap();
    std::fs::write(
        dir.path().join("Bad_Name/SKILL.md"),
        "---\nname: Bad_Name\ndescription: x\n---\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("broken")).unwrap();
    std::fs::write(dir.path().join("broken/SKILL.md"), "---\nname: [unclosed\n---\n").unwrap();
    let out = trellis()
        .args(["skills", "validate", "--json", &dir.path().display().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(value["errors"].as_u64().unwrap() >= 2, "{value}");
}

/// `trellis run` against a mock Anthropic endpoint: a real HTTP exchange, progress on stderr, the
/// answer on stdout, and a thread that a second invocation resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_talks_to_the_provider_and_resumes_threads() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    let answer = serde_json::json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Brief saved."}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 1200, "output_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1100}
    });
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer))
        .mount(&server)
        .await;
    let state = tempfile::tempdir().unwrap();
    let invoke = |task: &'static str| {
        let uri = server.uri();
        let state_dir = state.path().display().to_string();
        tokio::task::spawn_blocking(move || {
            trellis()
                .args([
                    "run",
                    "--model",
                    "anthropic:claude-sonnet-4-5",
                    "--skills",
                    &example("skills"),
                ])
                .args([
                    "--memory",
                    &example("AGENTS.md"),
                    "--state-dir",
                    &state_dir,
                    "--thread",
                    "acme-prep",
                    task,
                ])
                .env("ANTHROPIC_API_KEY", "test-key")
                .env("ANTHROPIC_BASE_URL", uri)
                .output()
                .unwrap()
        })
    };
    let first = invoke("Prep me for Acme").await.unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&first.stdout).trim(), "Brief saved.");
    let progress = String::from_utf8_lossy(&first.stderr);
    assert!(progress.contains("1100 cached"), "{progress}");
    let second = invoke("And the agenda?").await.unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    let body: serde_json::Value = serde_json::from_slice(&requests[1].body).unwrap();
    let texts: Vec<String> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].to_string())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("Prep me for Acme")),
        "the second run resumed the thread: {texts:?}"
    );
    assert!(texts.iter().any(|t| t.contains("Brief saved.")));

    let missing = trellis()
        .args(["run", "--model", "anthropic:claude-sonnet-4-5", "hi"])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("ANTHROPIC_API_KEY"));
}

/// Copy the example's skills into a fresh directory the test can inspect afterwards.
fn copy_example_skills(to: &std::path::Path) {
    for entry in walk(&PathBuf::from(example("skills"))) {
        let rel = entry.strip_prefix(example("skills")).unwrap();
        let target = to.join(rel);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &target).unwrap();
    }
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// One `trellis run` whose model first writes into the mounted skills, then stops. Returns the tool
/// result the model got back.
async fn run_writing_into_skills(skills: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let server = super::harness::anthropic_tool_then_text(
        serde_json::json!({"file_path": "/skills/library/meeting-prep/NOTES.md", "content": "obey me"}),
        "write_file",
        "done",
    )
    .await;
    let state = tempfile::tempdir().unwrap();
    TrellisRun::new()
        .approve_all()
        .skills(skills)
        .state_dir(state.path())
        .args(extra)
        .arg("Take notes")
        .anthropic(&server)
        .success()
        .await;
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2, "one tool round, then the answer");
    let body: serde_json::Value = serde_json::from_slice(&requests[1].body).unwrap();
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    last["content"][0].clone()
}

/// `trellis run` mounts skill sources read-only unless `--writable-skills`: a model told to rewrite a
/// skill gets a permission error and nothing reaches the disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_keeps_skill_sources_read_only_unless_asked() {
    let root = tempfile::tempdir().unwrap();
    let skills = root.path().join("library/skills");
    copy_example_skills(&skills);
    let written = skills.join("meeting-prep/NOTES.md");

    let refused = run_writing_into_skills(&skills, &[]).await;
    assert_eq!(refused["type"], "tool_result", "{refused}");
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(refused.to_string().contains("ermission"), "{refused}");
    assert!(!written.exists(), "a refused write reached the skill source");

    let allowed = run_writing_into_skills(&skills, &["--writable-skills"]).await;
    assert_ne!(allowed["is_error"], true, "{allowed}");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "obey me");
}
