//! `trellis run --user ID` and `trellis inspect --user ID`: each invocation is one process; each
//! user's memory (`agents/*.md`) and personal skills (`agents/skills/`) come from their workspace
//! under `<state-dir>/users/<ID>` (or `--workdir`), and no user sees another's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Output;

use super::harness::{TrellisRun, anthropic_tool_then_text, example, trellis};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Ada's and bob's workspaces in `state`.
fn seed(state: &Path) {
    let users = state.join("users");
    write(&users.join("ada/agents/USER.md"), "Ada: ada-pref-1187\n");
    write(&users.join("ada/agents/MEMORY.md"), "# Memory\n");
    write(
        &users.join("ada/agents/skills/ada-digest/SKILL.md"),
        "---\nname: ada-digest\ndescription: Ada's digest ada-skill-5521.\n---\n# Digest\n",
    );
    write(
        &users.join("ada/agents/skills/meeting-prep/SKILL.md"),
        "---\nname: meeting-prep\ndescription: Ada's own brief ada-brief-3390.\n---\n# Brief\n",
    );
    write(&users.join("bob/agents/USER.md"), "Bob: bob-pref-6604\n");
}

fn inspect_as(state: &Path, user: &str) -> Output {
    trellis()
        .args(["inspect", "--json", "--skills", &example("skills")])
        .args(["--memory", &example("AGENTS.md"), "--user", user, "--state-dir"])
        .arg(state)
        .output()
        .unwrap()
}

fn system_text(report: &serde_json::Value) -> String {
    report["request"]["system"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn inspect_shows_each_users_first_request_with_only_their_layer() {
    let state = tempfile::tempdir().unwrap();
    seed(state.path());
    let ada = inspect_as(state.path(), "ada");
    assert!(ada.status.success(), "{}", String::from_utf8_lossy(&ada.stderr));
    let report: serde_json::Value = serde_json::from_slice(&ada.stdout).unwrap();
    let warnings = report["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("personal skill \"meeting-prep\"")),
        "inspect lists the shadowing among the skill warnings: {warnings:?}"
    );
    let ada = system_text(&report);
    for mark in ["ada-pref-1187", "ada-skill-5521", "ada-brief-3390"] {
        assert!(ada.contains(mark), "ada misses {mark}");
    }
    assert!(ada.contains("/workspace/agents/USER.md") && !ada.contains("bob-pref-6604"));
    assert!(
        ada.contains("personal skill \"meeting-prep\"")
            && ada.contains("replaces the skill of the same name"),
        "the shadowing notice: {ada}"
    );
    let bob = inspect_as(state.path(), "bob");
    assert!(bob.status.success(), "{}", String::from_utf8_lossy(&bob.stderr));
    let bob: serde_json::Value = serde_json::from_slice(&bob.stdout).unwrap();
    assert_eq!(bob["warnings"], serde_json::json!([]), "no notice for bob");
    let bob = system_text(&bob);
    assert!(bob.contains("bob-pref-6604"));
    for mark in [
        "ada-pref-1187",
        "ada-skill-5521",
        "ada-brief-3390",
        "replaces the skill",
    ] {
        assert!(!bob.contains(mark), "bob sees {mark}");
    }
    let carol = inspect_as(state.path(), "carol");
    assert!(carol.status.success());
    assert!(
        state.path().join("users/carol").is_dir(),
        "a new user's workspace is created empty"
    );
}

#[test]
fn a_user_id_that_is_not_a_safe_segment_is_refused_by_name() {
    let state = tempfile::tempdir().unwrap();
    for bad in ["../ada", "a/b", ".hidden", ""] {
        let inspect = inspect_as(state.path(), bad);
        let run = TrellisRun::new()
            .args(["--user", bad])
            .state_dir(state.path())
            .arg("hi")
            .env("ANTHROPIC_API_KEY", "test-key")
            .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
            .command()
            .output()
            .unwrap();
        for (what, out) in [("inspect", inspect), ("run", run)] {
            assert!(!out.status.success(), "{what} --user {bad:?} succeeded");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains(&format!("invalid user id {bad:?}")),
                "{what}: {stderr}"
            );
        }
    }
    assert!(!state.path().join("users").exists(), "nothing was created");
    assert!(!state.path().parent().unwrap().join("ada").exists());
}

/// `trellis run --user ada` whose model edits ada's MEMORY.md: a later run of ada (another process,
/// a new thread) shows the edit; a run of bob does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_in_one_run_reaches_that_users_next_run_only() {
    let server = anthropic_tool_then_text(
        serde_json::json!({"file_path": "/workspace/agents/MEMORY.md", "old_string": "# Memory\n",
                           "new_string": "# Memory\n- ada-fact-9052\n"}),
        "edit_file",
        "noted",
    )
    .await;
    let state = tempfile::tempdir().unwrap();
    seed(state.path());
    let run_as = |user: &str| {
        let mut command = TrellisRun::new()
            .approve_all()
            .args(["--user", user])
            .state_dir(state.path())
            .arg("Remember this")
            .anthropic(&server)
            .command();
        tokio::task::spawn_blocking(move || command.output().unwrap())
    };
    for user in ["ada", "ada", "bob"] {
        let out = run_as(user).await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let stored = std::fs::read_to_string(state.path().join("users/ada/agents/MEMORY.md")).unwrap();
    assert_eq!(
        stored, "# Memory\n- ada-fact-9052\n",
        "the edit is in ada's own file"
    );
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 4, "ada: edit + answer; ada again; bob");
    let system = |i: usize| {
        let body: serde_json::Value = serde_json::from_slice(&requests[i].body).unwrap();
        body["system"].to_string()
    };
    assert!(system(0).contains("ada-pref-1187") && !system(0).contains("ada-fact-9052"));
    assert!(system(1).contains("ada-fact-9052"), "the editing run's next call");
    assert!(
        system(2).contains("ada-fact-9052"),
        "ada's next run, in another process"
    );
    assert!(system(3).contains("bob-pref-6604"));
    for mark in ["ada-pref-1187", "ada-skill-5521", "ada-fact-9052"] {
        assert!(!system(3).contains(mark), "bob sees ada's {mark}");
    }
}
