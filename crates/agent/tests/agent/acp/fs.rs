//! `trellis acp --editor-fs`: the session's files read and written through the editor's
//! `fs/read_text_file` / `fs/write_text_file`, served here by the TypeScript client from its own
//! "buffers" (an unsaved text that is not on disk; writes kept, not saved).

use serde_json::json;

use super::{client_with, edit_file, node_modules, reply, scripted, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editor_fs_reads_unsaved_buffers_and_writes_through_the_editor() {
    let Some(modules) = node_modules("editor_fs_reads_unsaved_buffers_and_writes_through_the_editor") else {
        return;
    };
    let cwd = tempfile::tempdir().unwrap();
    let cwd_path = cwd.path().canonicalize().unwrap();
    let file = cwd_path.join("a.txt");
    std::fs::write(&file, "disk text\n").unwrap();
    let buffers = json!({ file.display().to_string(): "unsaved buffer text\n" }).to_string();
    let read = || {
        reply(
            json!([{"type": "tool_use", "id": "toolu_r", "name": "read_file", "input": {"file_path": "/workspace/a.txt"}}]),
            "tool_use",
        )
    };

    // With --editor-fs: the buffer is read, and the edit goes to the editor.
    let server = scripted(vec![
        read(),
        edit_file("toolu_e", "/workspace/a.txt", "unsaved buffer", "edited buffer"),
        text("done"),
    ])
    .await;
    let env = [("ACP_FS", "1"), ("ACP_BUFFERS", buffers.as_str())];
    let report = client_with(
        &modules,
        "turns",
        &server,
        &cwd_path,
        &env,
        &["--ask", "none", "--editor-fs"],
    )
    .await;
    assert_eq!(report["stops"], json!(["end_turn"]), "{report}");
    let requests = server.received_requests().await.unwrap();
    let after_read = String::from_utf8_lossy(&requests[1].body);
    assert!(
        after_read.contains("unsaved buffer text"),
        "the model read the editor's buffer: {after_read}"
    );
    assert!(!after_read.contains("disk text"));
    let calls = report["fsCalls"].as_array().unwrap();
    let path = file.display().to_string();
    assert!(
        calls
            .iter()
            .any(|c| c["method"] == "read" && c["path"] == path.as_str()),
        "{calls:?}"
    );
    assert!(
        calls.iter().any(|c| c["method"] == "write"
            && c["path"] == path.as_str()
            && c["content"] == "edited buffer text\n"),
        "{calls:?}"
    );
    assert_eq!(report["written"][&path], "edited buffer text\n");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "disk text\n",
        "the editor, not Trellis, decides what reaches the disk"
    );

    // Without --editor-fs, the same client's fs methods are not used: the disk is read.
    let server = scripted(vec![read(), text("done")]).await;
    let report = client_with(&modules, "turns", &server, &cwd_path, &env, &["--ask", "none"]).await;
    assert_eq!(report["fsCalls"], json!([]));
    let requests = server.received_requests().await.unwrap();
    assert!(String::from_utf8_lossy(&requests[1].body).contains("disk text"));
}
