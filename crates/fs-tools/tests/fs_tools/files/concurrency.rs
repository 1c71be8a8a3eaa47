//! Ten agents editing one file at once: every edit either lands or is reported as a conflict, and
//! the final content holds exactly the edits that reported success. Runs on the in-thread state, on
//! local disk and, when the emulator is up, on S3.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::json;
use trellis_backend::testing::emulator;
use trellis_backend::{
    Backend, BackendExt, ByteRange, Capabilities, Entry, FilesystemBackend, ObjectStoreBackend, ReadOutput,
    Result, StateBackend, StoreOptions, VirtualPath, WriteMode, WriteOutcome,
};
use trellis_fs_tools::{EditFileTool, FileAccess, Tool, ToolContext};

const AGENTS: usize = 10;
const ROUNDS: usize = 5;

#[derive(Debug, Default)]
struct Tally {
    successes: usize,
    conflicts: usize,
    reapplied: usize,
}

/// Phase 1: each agent advances its own counter `ROUNDS` times; edits are independent, so each one
/// lands or is a conflict. Phase 2: every agent makes the same contested edit; exactly one wins.
async fn ten_agents(backend: Arc<dyn Backend>) -> Tally {
    let path = VirtualPath::parse("/shared/board.txt").unwrap();
    let initial: String = (0..AGENTS).map(|i| format!("[agent-{i}=0]\n")).collect();
    backend
        .write(&path, initial.into(), WriteMode::Overwrite)
        .await
        .unwrap();
    let ctx = FileAccess::new(backend.clone());
    let edit: Arc<dyn Tool> = Arc::new(EditFileTool::new(ctx.clone()));
    let barrier = Arc::new(tokio::sync::Barrier::new(AGENTS));

    let mut handles = Vec::new();
    for agent in 0..AGENTS {
        let (edit, barrier) = (edit.clone(), barrier.clone());
        handles.push(tokio::spawn(async move {
            let mut value = 0usize;
            let mut tally = Tally::default();
            barrier.wait().await;
            for _ in 0..ROUNDS {
                let args = json!({
                    "file_path": "/shared/board.txt",
                    "old_string": format!("[agent-{agent}={value}]"),
                    "new_string": format!("[agent-{agent}={}]", value + 1),
                });
                let out = edit.call(args, &ToolContext::detached("call_1")).await.unwrap();
                if !out.is_error {
                    value += 1;
                    tally.successes += 1;
                    tally.reapplied +=
                        usize::from(out.text_content().contains("changed by someone else meanwhile"));
                } else if out.text_content().starts_with("Error: conflict: ") {
                    tally.conflicts += 1;
                } else {
                    panic!(
                        "agent {agent}: neither success nor conflict: {}",
                        out.text_content()
                    );
                }
            }
            (value, tally)
        }));
    }
    let mut total = Tally::default();
    let mut expected = String::new();
    for (agent, handle) in handles.into_iter().enumerate() {
        let (value, tally) = handle.await.unwrap();
        assert_eq!(tally.successes + tally.conflicts, ROUNDS);
        expected.push_str(&format!("[agent-{agent}={value}]\n"));
        total.successes += tally.successes;
        total.conflicts += tally.conflicts;
        total.reapplied += tally.reapplied;
    }
    assert_eq!(backend.read_to_string(&path).await.unwrap(), expected);
    assert!(total.successes > 0);

    // Phase 2: one contested change.
    backend
        .write(&path, "[shared=0]\n".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(AGENTS));
    let mut handles = Vec::new();
    for agent in 0..AGENTS {
        let (edit, barrier) = (edit.clone(), barrier.clone());
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let args = json!({
                "file_path": "/shared/board.txt",
                "old_string": "[shared=0]",
                "new_string": format!("[shared=agent-{agent}]"),
            });
            edit.call(args, &ToolContext::detached("call_1")).await.unwrap()
        }));
    }
    let mut winners = Vec::new();
    for (agent, handle) in handles.into_iter().enumerate() {
        let out = handle.await.unwrap();
        if !out.is_error {
            winners.push(agent);
        } else {
            assert!(
                out.text_content().starts_with("Error: conflict: ")
                    || out
                        .text_content()
                        .starts_with("Error: old_string was not found in /shared/board.txt."),
                "agent {agent}: {}",
                out.text_content()
            );
        }
    }
    assert_eq!(winners.len(), 1, "exactly one contested edit lands: {winners:?}");
    assert_eq!(
        backend.read_to_string(&path).await.unwrap(),
        format!("[shared=agent-{}]\n", winners[0])
    );
    total
}

/// A backend that yields to the scheduler after every read and before every write, so that on one
/// thread the agents interleave between reading and writing, the window where conflicts happen.
#[derive(Debug)]
struct Yielding(StateBackend);

#[async_trait]
impl Backend for Yielding {
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.0.ls(dir).await
    }
    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        self.0.stat(path).await
    }
    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        let out = self.0.read(path, range).await;
        tokio::task::yield_now().await;
        out
    }
    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        tokio::task::yield_now().await;
        self.0.write(path, data, mode).await
    }
    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        self.0.delete(path).await
    }
}

#[tokio::test]
async fn interleaved_agents_on_state_backend() {
    let tally = ten_agents(Arc::new(Yielding(StateBackend::new()))).await;
    // With every agent reading before any writes, both outcomes occur: edits re-applied after a
    // conflict, and edits reported as conflicts.
    assert!(tally.reapplied > 0, "{tally:?}");
    assert!(tally.conflicts > 0, "{tally:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_agents_on_state_backend() {
    ten_agents(Arc::new(StateBackend::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_agents_on_local_disk() {
    let dir = tempfile::tempdir().unwrap();
    ten_agents(Arc::new(FilesystemBackend::new(dir.path()).unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_agents_on_s3_emulator() {
    let suite = "S3 emulator suite";
    let (Some(endpoint), Some(bucket)) = (
        emulator("TRELLIS_S3_ENDPOINT", suite),
        emulator("TRELLIS_TEST_BUCKET", suite),
    ) else {
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let prefix = format!("fs-tools-concurrency-{}-{nanos}", std::process::id());
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    let backend = ObjectStoreBackend::from_url(&format!("s3://{bucket}/{prefix}"), &options).unwrap();
    let tally = ten_agents(Arc::new(backend)).await;
    println!("S3: {tally:?}");
}
