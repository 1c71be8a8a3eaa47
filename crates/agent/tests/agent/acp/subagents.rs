//! A subagent's steps, shown under the `task` call that started it while it works.

use serde_json::json;

use super::{client, node_modules, reply, scripted, text, updates};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_steps_show_under_its_task_call() {
    let Some(modules) = node_modules("a_subagents_steps_show_under_its_task_call") else {
        return;
    };
    let server = scripted(vec![
        // The parent delegates.
        reply(
            json!([{"type": "tool_use", "id": "toolu_t", "name": "task",
                    "input": {"description": "List the workspace.", "subagent_type": "general-purpose"}}]),
            "tool_use",
        ),
        // The subagent lists the workspace, then answers.
        reply(
            json!([{"type": "tool_use", "id": "toolu_c1", "name": "ls", "input": {"path": "/workspace"}}]),
            "tool_use",
        ),
        text("x.txt is there"),
        // The parent answers.
        text("The workspace holds x.txt."),
    ])
    .await;
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("x.txt"), "x").unwrap();
    let report = client(&modules, "turns", &server, cwd.path(), &[]).await;
    assert_eq!(report["stops"], json!(["end_turn"]), "{report}");

    let task_updates: Vec<&serde_json::Value> = updates(&report, "tool_call_update")
        .into_iter()
        .filter(|u| u["toolCallId"] == "toolu_t")
        .collect();
    let progress: Vec<&str> = task_updates
        .iter()
        .filter_map(|u| u["content"][0]["content"]["text"].as_str())
        .collect();
    assert!(
        progress.iter().any(|t| t.contains("ls /workspace (running)")),
        "the step while it runs: {progress:?}"
    );
    let last = progress.last().expect("progress under the task call");
    assert!(last.starts_with("general-purpose subagent:"), "{last}");
    assert!(last.contains("- ls /workspace (done)"), "{last}");
    // The progress came before the task call completed, and the subagent's call is not a
    // top-level call of the session.
    let done = task_updates
        .iter()
        .position(|u| u["status"] == "completed")
        .expect("the task call completed");
    let first_progress = task_updates.iter().position(|u| u["content"].is_array()).unwrap();
    assert!(first_progress < done);
    assert!(
        !updates(&report, "tool_call")
            .iter()
            .any(|c| c["toolCallId"] == "toolu_c1")
    );
}
