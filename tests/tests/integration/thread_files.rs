//! Thread workspaces: a thread's files belong to it, on every checkpoint store.
//!
//! The agent is `deep_agent` with its default per-thread layout; the model is a driver that calls
//! the tool named in the human message (`call <json>`) and then answers with the tool's result, so
//! each run is one real tool call through the whole stack. On the in-memory checkpointer, on
//! `BackendCheckpointer` over local disk and over the S3 emulator: two threads of one agent cannot
//! reach each other's files through any of the seven file tools, a resumed thread finds its
//! files, and deleting a thread deletes them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use trellis_agent::builder::DeepAgentBuilder;
use trellis_agent::deep_agent;
use trellis_backend::{Backend, FilesystemBackend, ObjectStoreBackend, StoreOptions, VirtualPath};
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;
use trellis_tests::emulator::{s3_target, unique};

/// Calls the tool a `call {"tool": …, "args": …}` message names, then answers with its result.
pub(crate) fn driver() -> ScriptedModel {
    ScriptedModel::from_fn(|request| {
        let last = request.messages.last().expect("a request has messages");
        let message = match last {
            Message::Tool(result) => {
                let flag = if result.is_error { "ERROR " } else { "" };
                AiMessage::text(format!("{flag}{}", last.text()))
            }
            _ => {
                let text = last.text();
                let call: Value = serde_json::from_str(text.trim_start_matches("call ")).expect("a call");
                let name = call["tool"].as_str().expect("a tool name");
                AiMessage::tool_calls([ToolCall::new("c", name, call["args"].clone())])
            }
        };
        Ok(ModelResponse::new(message))
    })
}

pub(crate) struct Harness {
    pub(crate) agent: Agent,
}

impl Harness {
    pub(crate) fn new(checkpointer: Arc<dyn Checkpointer>) -> Self {
        Self::with(|b| b.checkpointer(checkpointer))
    }

    /// `deep_agent` on the driver model, configured by `configure`.
    pub(crate) fn with(configure: impl FnOnce(DeepAgentBuilder) -> DeepAgentBuilder) -> Self {
        let agent = configure(deep_agent(Arc::new(driver()))).build().expect("agent");
        Self { agent }
    }

    /// Call `tool` with `args` in `thread`; the tool's answer, `ERROR ` first when it failed.
    pub(crate) async fn call(&self, thread: &str, tool: &str, args: Value) -> String {
        self.call_as(None, thread, tool, args).await
    }

    /// [`Harness::call`] for `user`, when given.
    pub(crate) async fn call_as(&self, user: Option<&str>, thread: &str, tool: &str, args: Value) -> String {
        let mut input =
            RunInput::human(call_text(tool, args)).thread(ThreadId::new(thread).expect("thread id"));
        if let Some(user) = user {
            input = input.extension(tools::UserIdentity::new(user));
        }
        let out = self.agent.run(input).await.expect("run");
        out.final_text().unwrap_or_default()
    }
}

/// The human message that makes the driver call `tool` with `args`.
pub(crate) fn call_text(tool: &str, args: Value) -> String {
    format!("call {}", json!({"tool": tool, "args": args}))
}

/// Thread `b` cannot list, read, edit, delete, glob or grep what thread `a` wrote, nor overwrite
/// it by writing the same path; `a` still has its file, unchanged.
async fn threads_are_isolated(checkpointer: Arc<dyn Checkpointer>) {
    let h = Harness::new(checkpointer);
    let secret = "alpha-secret-7731";
    let wrote = h
        .call(
            "alpha",
            "write_file",
            json!({"file_path": "/notes/a.txt", "content": secret}),
        )
        .await;
    assert!(wrote.starts_with("Created /notes/a.txt"), "{wrote}");

    let cases = [
        ("ls", json!({"path": "/notes"})),
        ("read_file", json!({"file_path": "/notes/a.txt"})),
        (
            "edit_file",
            json!({"file_path": "/notes/a.txt", "old_string": secret, "new_string": "x"}),
        ),
        ("delete", json!({"file_path": "/notes/a.txt"})),
        ("glob", json!({"pattern": "**/*.txt"})),
        ("grep", json!({"pattern": secret})),
    ];
    for (tool, args) in cases {
        let answer = h.call("beta", tool, args).await;
        // grep repeats its pattern ("No matches for \"…\""); anything else would be alpha's content.
        let shown = answer.replace(&format!("{secret:?}"), "");
        assert!(
            !shown.contains(secret),
            "{tool} in beta showed alpha's content: {answer}"
        );
        assert!(
            !answer.contains("/notes/a.txt") || answer.starts_with("ERROR "),
            "{tool} in beta found alpha's file: {answer}"
        );
    }
    let own = h
        .call(
            "beta",
            "write_file",
            json!({"file_path": "/notes/a.txt", "content": "beta's own"}),
        )
        .await;
    assert!(
        own.starts_with("Created /notes/a.txt"),
        "beta writes its own file: {own}"
    );

    let back = h
        .call("alpha", "read_file", json!({"file_path": "/notes/a.txt"}))
        .await;
    assert!(back.contains(secret) && !back.contains("beta's own"), "{back}");
    let beta = h
        .call("beta", "read_file", json!({"file_path": "/notes/a.txt"}))
        .await;
    assert!(beta.contains("beta's own") && !beta.contains(secret), "{beta}");
}

/// A second agent on the same store (a new process would build exactly this) resumes the thread
/// and finds its file; deleting the thread deletes its files.
async fn files_survive_resume_and_die_with_the_thread(make: impl Fn() -> Arc<dyn Checkpointer>) {
    let first = Harness::new(make());
    first
        .call(
            "gamma",
            "write_file",
            json!({"file_path": "/out/report.md", "content": "# Q3\nup 4%\n"}),
        )
        .await;
    drop(first);

    let second = Harness::new(make());
    let read = second
        .call("gamma", "read_file", json!({"file_path": "/out/report.md"}))
        .await;
    assert!(
        read.contains("up 4%"),
        "the resumed thread finds its file: {read}"
    );

    let thread = ThreadId::new("gamma").expect("id");
    let files = second.agent.thread_files(&thread).expect("thread files");
    assert!(
        files
            .stat(&VirtualPath::parse("/out/report.md").expect("path"))
            .await
            .is_ok()
    );
    second
        .agent
        .checkpointer()
        .expect("checkpointer")
        .delete(&thread)
        .await
        .expect("delete");
    let third = Harness::new(make());
    let gone = third
        .call("gamma", "read_file", json!({"file_path": "/out/report.md"}))
        .await;
    assert!(gone.starts_with("ERROR ") && gone.contains("not found"), "{gone}");
}

#[tokio::test]
async fn in_memory_threads_are_isolated() {
    threads_are_isolated(Arc::new(InMemoryCheckpointer::new())).await;
}

#[tokio::test]
async fn in_memory_thread_files_die_with_the_thread() {
    let checkpointer: Arc<dyn Checkpointer> = Arc::new(InMemoryCheckpointer::new());
    files_survive_resume_and_die_with_the_thread(|| checkpointer.clone()).await;
}

fn on_disk(dir: &std::path::Path) -> Arc<dyn Checkpointer> {
    let store: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(dir).expect("dir"));
    Arc::new(
        BackendCheckpointer::new(store, VirtualPath::parse("/threads").expect("path")).expect("checkpointer"),
    )
}

#[tokio::test]
async fn local_disk_threads_are_isolated() {
    let dir = tempfile::tempdir().expect("tempdir");
    threads_are_isolated(on_disk(dir.path())).await;
}

#[tokio::test]
async fn local_disk_thread_files_survive_resume_and_die_with_the_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    files_survive_resume_and_die_with_the_thread(|| on_disk(dir.path())).await;
    assert!(
        !dir.path().join("threads/gamma/files/out/report.md").exists(),
        "deleting the thread removes its files from disk"
    );
}

fn on_s3(prefix: &str) -> Option<Arc<dyn Checkpointer>> {
    let target = s3_target("thread_files")?;
    let options = StoreOptions::s3_compatible(&target.endpoint, "test", "test");
    let url = format!("s3://{}/{prefix}", target.bucket);
    let store: Arc<dyn Backend> = Arc::new(ObjectStoreBackend::from_url(&url, &options).expect("store"));
    Some(Arc::new(
        BackendCheckpointer::new(store, VirtualPath::parse("/threads").expect("path")).expect("checkpointer"),
    ))
}

#[tokio::test]
async fn s3_threads_are_isolated() {
    let Some(checkpointer) = on_s3(&unique("thread-files-iso")) else {
        return;
    };
    threads_are_isolated(checkpointer).await;
}

#[tokio::test]
async fn s3_thread_files_survive_resume_and_die_with_the_thread() {
    let prefix = unique("thread-files-resume");
    if on_s3(&prefix).is_none() {
        return;
    }
    files_survive_resume_and_die_with_the_thread(|| on_s3(&prefix).expect("s3")).await;
}

/// This test's path in the test binary, for `--exact`.
const PROCESS_TEST: &str = "thread_files::a_thread_resumed_in_another_process_finds_its_files";
const ROLE: &str = "TRELLIS_THREAD_FILES_ROLE";
const STATE_DIR: &str = "TRELLIS_THREAD_FILES_DIR";
const FILES: usize = 20;

/// One role of the two-process test: `writer` writes `FILES` files in thread `delta`; `reader`
/// (a later process) resumes the thread and reads every one back.
fn process_role(role: &str) {
    let dir = std::env::var(STATE_DIR).expect("state dir");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let h = Harness::new(on_disk(std::path::Path::new(&dir)));
        for i in 0..FILES {
            let path = format!("/work/file-{i:02}.txt");
            let content = format!("content of file {i} in delta");
            if role == "writer" {
                let out = h
                    .call(
                        "delta",
                        "write_file",
                        json!({"file_path": path, "content": content}),
                    )
                    .await;
                assert!(out.starts_with("Created"), "{out}");
            } else {
                let out = h.call("delta", "read_file", json!({"file_path": path})).await;
                assert!(out.contains(&content), "{path}: {out}");
            }
        }
    });
}

#[test]
fn a_thread_resumed_in_another_process_finds_its_files() {
    if let Ok(role) = std::env::var(ROLE) {
        process_role(&role);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for role in ["writer", "reader"] {
        rerun_as(
            PROCESS_TEST,
            &[(ROLE, role), (STATE_DIR, &dir.path().display().to_string())],
        );
    }
}

/// Run the test `test` of this test binary in a process of its own with `env` set; fails unless
/// it passed.
pub(crate) fn rerun_as(test: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(&exe)
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .envs(env.iter().copied())
        .output()
        .expect("re-run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{env:?}: the process failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
