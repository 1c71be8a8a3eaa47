//! User workspaces and subagent file scopes, through `deep_agent` and the whole stack.
//!
//! A user's `/workspace` is shared by that user's threads and invisible to every other user; a run
//! without a user has none; a user id that is not one safe path segment is refused by name. A
//! subagent works in a thread space of its own and sees its parent's `/uploads` and `/outputs`, not
//! the parent's other files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use trellis_backend::{Backend, BackendExt, StateBackend, VirtualPath};

use crate::thread_files::{Harness, call_text};

fn with_workspaces(users: Arc<StateBackend>) -> Harness {
    Harness::with(|b| b.user_workspaces(users, VirtualPath::parse("/users").unwrap()))
}

#[tokio::test]
async fn a_users_workspace_is_shared_by_their_threads_and_invisible_to_others() {
    let users = Arc::new(StateBackend::new());
    let h = with_workspaces(users.clone());
    let plan = "ada-plan-5521";
    let wrote = h
        .call_as(
            Some("ada"),
            "t-ada-1",
            "write_file",
            json!({"file_path": "/workspace/plan.md", "content": plan}),
        )
        .await;
    assert!(wrote.starts_with("Created /workspace/plan.md"), "{wrote}");
    assert_eq!(
        users
            .read_to_string(&VirtualPath::parse("/users/ada/plan.md").unwrap())
            .await
            .unwrap(),
        plan,
        "stored under the user's own prefix"
    );

    let again = h
        .call_as(
            Some("ada"),
            "t-ada-2",
            "read_file",
            json!({"file_path": "/workspace/plan.md"}),
        )
        .await;
    assert!(
        again.contains(plan),
        "ada's other thread sees her workspace: {again}"
    );

    for (tool, args) in [
        ("read_file", json!({"file_path": "/workspace/plan.md"})),
        ("ls", json!({"path": "/workspace"})),
        ("glob", json!({"pattern": "**/*.md"})),
        ("grep", json!({"pattern": plan})),
    ] {
        let answer = h.call_as(Some("bob"), "t-bob", tool, args).await;
        let shown = answer.replace(&format!("{plan:?}"), "");
        assert!(
            !shown.contains(plan),
            "{tool} as bob showed ada's content: {answer}"
        );
        assert!(
            !answer.contains("plan.md") || answer.starts_with("ERROR "),
            "{tool} as bob found ada's file: {answer}"
        );
    }
    let bobs = h
        .call_as(
            Some("bob"),
            "t-bob",
            "write_file",
            json!({"file_path": "/workspace/plan.md", "content": "bob's"}),
        )
        .await;
    assert!(bobs.starts_with("Created"), "bob's workspace is his own: {bobs}");
    let still = h
        .call_as(
            Some("ada"),
            "t-ada-1",
            "read_file",
            json!({"file_path": "/workspace/plan.md"}),
        )
        .await;
    assert!(still.contains(plan) && !still.contains("bob's"), "{still}");

    // No user, no workspace: /workspace is only thread scratch there, and ada's file is not in it.
    let anonymous = h
        .call("t-anon", "read_file", json!({"file_path": "/workspace/plan.md"}))
        .await;
    assert!(
        anonymous.starts_with("ERROR ") && anonymous.contains("not found"),
        "{anonymous}"
    );
}

#[tokio::test]
async fn a_user_id_that_is_not_a_safe_segment_is_refused_by_name() {
    let users = Arc::new(StateBackend::new());
    let h = with_workspaces(users.clone());
    for bad in ["../ada", "a/b", ".hidden", ""] {
        let answer = h
            .call_as(
                Some(bad),
                "t-bad",
                "write_file",
                json!({"file_path": "/workspace/x.md", "content": "x"}),
            )
            .await;
        assert!(answer.starts_with("ERROR "), "{bad:?}: {answer}");
        assert!(
            answer.contains(&format!("{bad:?}")),
            "the error names the id {bad:?}: {answer}"
        );
    }
    let listing = users.list_files(&VirtualPath::root(), 100).await.unwrap();
    assert!(
        listing.files.is_empty(),
        "nothing was written anywhere: {:?}",
        listing.files
    );
}

#[tokio::test]
async fn a_subagent_sees_its_parents_uploads_and_outputs_but_not_its_scratch() {
    let h = Harness::with(|b| b);
    for (path, content) in [
        ("/uploads/brief.md", "brief-for-the-task"),
        ("/scratch/private.md", "parent-only-9931"),
    ] {
        let out = h
            .call(
                "parent",
                "write_file",
                json!({"file_path": path, "content": content}),
            )
            .await;
        assert!(out.starts_with("Created"), "{out}");
    }
    // The driver model runs the subagent too: the task's description is itself a `call` message.
    let task =
        |tool: &str, args| json!({"description": call_text(tool, args), "subagent_type": "general-purpose"});
    let brief = h
        .call(
            "parent",
            "task",
            task("read_file", json!({"file_path": "/uploads/brief.md"})),
        )
        .await;
    assert!(
        brief.contains("brief-for-the-task"),
        "the subagent reads the parent's uploads: {brief}"
    );
    let private = h
        .call(
            "parent",
            "task",
            task("read_file", json!({"file_path": "/scratch/private.md"})),
        )
        .await;
    assert!(
        !private.contains("parent-only-9931") && private.contains("not found"),
        "{private}"
    );
    let wrote = h
        .call(
            "parent",
            "task",
            task(
                "write_file",
                json!({"file_path": "/outputs/result.md", "content": "from-the-subagent"}),
            ),
        )
        .await;
    assert!(wrote.contains("Created /outputs/result.md"), "{wrote}");
    let result = h
        .call("parent", "read_file", json!({"file_path": "/outputs/result.md"}))
        .await;
    assert!(
        result.contains("from-the-subagent"),
        "the parent reads the subagent's output: {result}"
    );
    let scratch = h
        .call(
            "parent",
            "task",
            task(
                "write_file",
                json!({"file_path": "/notes.md", "content": "sub-scratch"}),
            ),
        )
        .await;
    assert!(scratch.contains("Created /notes.md"), "{scratch}");
    let parent_view = h
        .call("parent", "read_file", json!({"file_path": "/notes.md"}))
        .await;
    assert!(
        parent_view.contains("not found"),
        "the subagent's scratch is its own: {parent_view}"
    );
}

#[tokio::test]
async fn attachments_land_in_their_thread_and_its_subagents_see_them() {
    let h = Harness::with(|b| b);
    let thread = trellis_middleware::ThreadId::new("with-upload").unwrap();
    let store = trellis_middleware::attachments::AttachmentStore::for_thread(&h.agent, &thread)
        .expect("thread files");
    let input = store
        .attach(
            trellis_middleware::RunInput::human(call_text("ls", json!({"path": "/attachments"})))
                .thread(thread.clone()),
            [trellis_middleware::attachments::Upload::new(
                "q3.csv",
                "region,revenue\nnorth,120\n",
            )],
        )
        .await
        .unwrap();
    let listed = h.agent.run(input).await.unwrap().final_text().unwrap_or_default();
    assert!(
        listed.contains("/attachments/q3.csv"),
        "the thread sees its upload: {listed}"
    );
    let other = h
        .call(
            "another",
            "read_file",
            json!({"file_path": "/attachments/q3.csv"}),
        )
        .await;
    assert!(other.contains("not found"), "another thread does not: {other}");
    let task = json!({
        "description": call_text("read_file", json!({"file_path": "/attachments/q3.csv"})),
        "subagent_type": "general-purpose"
    });
    let seen = h.call("with-upload", "task", task).await;
    assert!(
        seen.contains("north,120"),
        "the thread's subagent reads it: {seen}"
    );
}
