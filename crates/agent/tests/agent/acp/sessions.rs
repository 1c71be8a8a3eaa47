//! Sessions side by side: `session/list` over the state dir's threads (pages, cursor, cwd
//! filter), and "allow always" staying in the session it was given in.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{client, edit_file, node_modules, scripted, text, updates, write_file};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_list_pages_through_the_threads_of_the_state_dir() {
    let Some(modules) = node_modules("session_list_pages_through_the_threads_of_the_state_dir") else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let state_arg = state.path().display().to_string();
    let cwd = tempfile::tempdir().unwrap();
    let cwd_path = cwd.path().canonicalize().unwrap();

    // A first process leaves one session.
    let first = scripted(vec![text("hi")]).await;
    let before = client(
        &modules,
        "turns",
        &first,
        &cwd_path,
        &[("ACP_PROMPTS", "[\"the oldest one\"]"), ("ACP_STATE", &state_arg)],
    )
    .await;
    let oldest = before["sessionId"].as_str().unwrap().to_owned();
    // 52 more threads saved for this cwd (no checkpoint yet, so no title), and one saved without
    // a working directory (as `trellis run` without --workdir saves it), which is not listed.
    let runs = state.path().join("runs");
    let saved: Value =
        serde_json::from_slice(&std::fs::read(runs.join(format!("{oldest}.json"))).unwrap()).unwrap();
    let mut fakes = BTreeSet::new();
    for i in 0..52 {
        let id = format!("t-saved-{i:02}");
        std::fs::write(runs.join(format!("{id}.json")), saved.to_string()).unwrap();
        fakes.insert(id);
    }
    let mut no_cwd = saved.clone();
    no_cwd["workdir"] = Value::Null;
    std::fs::write(runs.join("t-no-workdir.json"), no_cwd.to_string()).unwrap();
    std::fs::write(runs.join("not a thread.json"), saved.to_string()).unwrap();

    // A second process: two new sessions, then every page of session/list.
    let second = scripted(vec![]).await;
    let report = client(
        &modules,
        "list",
        &second,
        &cwd_path,
        &[("ACP_SESSIONS", "2"), ("ACP_STATE", &state_arg)],
    )
    .await;
    assert_eq!(
        report["initialize"]["agentCapabilities"]["sessionCapabilities"]["list"],
        json!({}),
        "session/list is advertised"
    );
    let pages = report["pages"].as_array().unwrap();
    let sizes: Vec<usize> = pages
        .iter()
        .map(|p| p["sessions"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [50, 5], "pages of 50: {report}");
    assert!(pages[0]["nextCursor"].is_string());
    assert!(pages[1]["nextCursor"].is_null(), "the last page has no cursor");
    let listed: Vec<&Value> = pages
        .iter()
        .flat_map(|p| p["sessions"].as_array().unwrap())
        .collect();
    let ids: Vec<&str> = listed.iter().map(|s| s["sessionId"].as_str().unwrap()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), 55, "no session twice across pages");
    let made: Vec<&str> = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let mut expected: BTreeSet<&str> = fakes.iter().map(String::as_str).collect();
    expected.extend(made.iter().copied());
    expected.insert(&oldest);
    assert_eq!(unique, expected, "every thread with a cwd, nothing else");
    // Newest first, with the first message as the title and the cwd.
    assert_eq!(ids[..2], [made[1], made[0]]);
    assert_eq!(listed[0]["title"], "title of session 2");
    assert_eq!(listed[1]["title"], "title of session 1");
    let old = listed.iter().find(|s| s["sessionId"] == oldest.as_str()).unwrap();
    assert_eq!(old["title"], "the oldest one");
    assert!(listed.iter().all(|s| s["cwd"] == cwd_path.display().to_string()));
    assert!(
        listed
            .iter()
            .all(|s| s["updatedAt"].as_str().is_some_and(|t| t.ends_with('Z')))
    );
    // Another cwd has none; a cursor Trellis did not make is invalid params.
    assert_eq!(report["otherCwd"]["sessions"], json!([]));
    assert_eq!(report["badCursor"]["code"], -32602, "{}", report["badCursor"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_always_covers_one_session_one_tool_and_one_path() {
    let Some(modules) = node_modules("allow_always_covers_one_session_one_tool_and_one_path") else {
        return;
    };
    let server = scripted(vec![
        // Session A: allowed always.
        write_file("toolu_a1", "/workspace/a.txt", "1"),
        text("wrote it"),
        // Session B, the same tool and path: asked (and rejected).
        write_file("toolu_b1", "/workspace/a.txt", "2"),
        text("not written"),
        // Session A again, the same tool and path: not asked (it runs).
        write_file("toolu_a2", "/workspace/a.txt", "3"),
        text("wrote it again"),
        // Session A, another tool on the same path: asked (rejected).
        edit_file("toolu_a3", "/workspace/a.txt", "3", "4"),
        text("not edited"),
        // Session A, the same tool on another path: asked (rejected).
        write_file("toolu_a4", "/workspace/b.txt", "5"),
        text("not written"),
    ])
    .await;
    let cwd = tempfile::tempdir().unwrap();
    let report = client(
        &modules,
        "two",
        &server,
        cwd.path(),
        &[("ACP_ANSWERS", "allow_always,reject_once,reject_once,reject_once")],
    )
    .await;
    assert_eq!(report["stops"], json!(vec!["end_turn"; 5]), "{report}");
    let asked: Vec<(&str, &str)> = report["permissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["toolCall"]["toolCallId"].as_str().unwrap(),
                p["sessionId"].as_str().unwrap(),
            )
        })
        .collect();
    let (a, b) = (
        report["sessions"][0].as_str().unwrap(),
        report["sessions"][1].as_str().unwrap(),
    );
    assert_ne!(a, b);
    assert_eq!(
        asked,
        [("toolu_a1", a), ("toolu_b1", b), ("toolu_a3", a), ("toolu_a4", a)],
        "only toolu_a2 (session A, write_file, /workspace/a.txt) went unasked"
    );
    // toolu_a2 ran without a question (write_file then refuses the existing file); the rejected
    // calls never started.
    let started = |id: &str| {
        updates(&report, "tool_call_update")
            .iter()
            .any(|u| u["toolCallId"] == id && u["status"] == "in_progress")
    };
    assert!(started("toolu_a1") && started("toolu_a2"));
    assert!(!started("toolu_b1") && !started("toolu_a3") && !started("toolu_a4"));
    assert_eq!(std::fs::read_to_string(cwd.path().join("a.txt")).unwrap(), "1");
    assert!(!cwd.path().join("b.txt").exists());
}
