//! Downloads beyond a thread's own files (`GET /threads/{id}/files?path=`): the owner's
//! `/workspace` and the agent file's skill mounts, read-only, scoped to the thread's owner, and no
//! path leaving its mount (`..`, symlinks out of it, another user's workspace).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::harness::{AGENT_FILE, Served, always_done, http};

/// `GET {url}/threads/{tid}/files?path=PATH` with `key`: the status and the body as text.
async fn download(url: &str, key: &str, tid: &str, path: &str) -> (u16, String) {
    let encoded: String = url::form_urlencoded::byte_serialize(path.as_bytes()).collect();
    let response = http()
        .get(format!("{url}/threads/{tid}/files?path={encoded}"))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn thread_of(url: &str, key: &str) -> String {
    let thread: Value = http()
        .post(format!("{url}/threads"))
        .header("x-api-key", key)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    thread["thread_id"].as_str().unwrap().to_owned()
}

/// Alice downloads her `/workspace` files and the shared skills; Bob sees only his own workspace
/// and none of Alice's threads (404); `..`, a symlink out of a workspace (to Bob's, or to
/// `/etc/passwd`) and out of the skills folder are refused, never served; the thread's own files
/// (an upload) still download as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_and_skill_mounts_download_scoped_to_their_owner() {
    let model = always_done().await;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("state/users");
    std::fs::create_dir_all(users.join("alice/notes")).unwrap();
    std::fs::create_dir_all(users.join("bob")).unwrap();
    std::fs::write(users.join("alice/notes/plan.md"), "alice's plan").unwrap();
    std::fs::write(users.join("bob/secret.md"), "bob's secret").unwrap();
    std::os::unix::fs::symlink("../bob/secret.md", users.join("alice/to-bob.md")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", users.join("alice/passwd")).unwrap();
    let skills = dir.path().join("team");
    std::fs::create_dir_all(skills.join("demo")).unwrap();
    std::fs::write(
        skills.join("demo/SKILL.md"),
        "---\nname: demo\ndescription: d\n---\nbody",
    )
    .unwrap();
    std::os::unix::fs::symlink(users.join("bob/secret.md"), skills.join("demo/leak.md")).unwrap();
    let agent = format!("skills = [{:?}]\n{AGENT_FILE}", skills.display().to_string());
    let served = Served::with_agent_file(dir.path(), &model, Some("alice ka\nbob kb\n"), &agent);
    let u = &served.url;
    let alice = thread_of(u, "ka").await;
    let bob = thread_of(u, "kb").await;

    assert_eq!(
        download(u, "ka", &alice, "/workspace/notes/plan.md").await,
        (200, "alice's plan".into())
    );
    let (status, body) = download(u, "ka", &alice, "/skills/team/demo/SKILL.md").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("body"), "{body}");
    assert_eq!(
        download(u, "kb", &bob, "/workspace/secret.md").await,
        (200, "bob's secret".into())
    );
    // Bob's workspace is not Alice's: her file is not there, and her thread is not his.
    assert_eq!(download(u, "kb", &bob, "/workspace/notes/plan.md").await.0, 404);
    assert_eq!(download(u, "kb", &alice, "/workspace/notes/plan.md").await.0, 404);
    assert_eq!(download(u, "ka", &bob, "/workspace/secret.md").await.0, 404);
    for path in [
        "/workspace/../../users/bob/secret.md",
        "/workspace/%2e%2e/bob/secret.md",
        "/skills/team/../../workspace/notes/plan.md",
        "workspace/notes/plan.md",
        "/workspace/notes",
    ] {
        let (status, body) = download(u, "ka", &alice, path).await;
        assert_eq!(status, 422, "{path}: {body}");
    }
    for path in [
        "/workspace/to-bob.md",
        "/workspace/passwd",
        "/skills/team/demo/leak.md",
    ] {
        let (status, body) = download(u, "ka", &alice, path).await;
        assert!(matches!(status, 403 | 404 | 422), "{path}: {status} {body}");
        assert!(
            !body.contains("bob's secret") && !body.contains("root:"),
            "{path}: {body}"
        );
    }
    // The thread's own files as before.
    let upload = http()
        .post(format!("{u}/threads/{alice}/files?path=a.txt"))
        .header("x-api-key", "ka")
        .body("uploaded")
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status().as_u16(), 200);
    assert_eq!(
        download(u, "ka", &alice, "/uploads/a.txt").await,
        (200, "uploaded".into())
    );
    assert_eq!(download(u, "ka", &alice, "/workspace/a.txt").await.0, 404);
}
