//! Two worker processes serve one thread through `BackendCheckpointer` on the S3 emulator.
//!
//! The test re-runs its own binary twice (`--exact <this test>`), with `TRELLIS_CHECKPOINT_WORKER`
//! naming the worker's role. Each worker runs one agent turn on the same thread. Both are held
//! after loading the thread (files in a shared directory, not sleeps) until both have loaded it, so
//! both save against the same version: one save wins, the other gets a typed conflict, waits for
//! the winner to finish, reloads, runs its turn again and saves. Nothing is lost: the final
//! checkpoint holds both turns, the winner's first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use trellis_backend::{Backend, ObjectStoreBackend, StoreOptions, VirtualPath};
use trellis_middleware::runtime::checkpoint::CheckpointError;
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::message_list::Messages;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;
use trellis_tests::emulator::{s3_target, unique};

/// This test's path in the test binary, for `--exact` (the binary is `tests/integration/main.rs`).
const TEST_NAME: &str = "checkpoint_processes::two_worker_processes_share_one_thread";
const ROLE: &str = "TRELLIS_CHECKPOINT_WORKER";
const DIR: &str = "TRELLIS_CHECKPOINT_WORKER_DIR";
const PREFIX: &str = "TRELLIS_CHECKPOINT_WORKER_PREFIX";
const THREAD: &str = "TRELLIS_CHECKPOINT_WORKER_THREAD";

/// Only a guard against a hang (a worker waiting for a file that never comes).
const HANG_GUARD: Duration = Duration::from_secs(120);

fn shape(messages: &Messages) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m {
            Message::Human(_) => format!("human:{}", m.text()),
            Message::Ai(ai) => format!("ai:{}", ai.text_content()),
            other => format!("{other:?}"),
        })
        .collect()
}

fn checkpointer(endpoint: &str, bucket: &str, prefix: &str) -> Arc<dyn Checkpointer> {
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    let backend: Arc<dyn Backend> =
        Arc::new(ObjectStoreBackend::from_url(&format!("s3://{bucket}/{prefix}"), &options).unwrap());
    Arc::new(BackendCheckpointer::new(backend, VirtualPath::parse("/threads").unwrap()).unwrap())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Wait until `path` exists.
async fn wait_for(path: &Path) {
    let started = Instant::now();
    while !path.exists() {
        assert!(
            started.elapsed() < HANG_GUARD,
            "gave up waiting for {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Write a file in one step (rename), so a reader never sees it half-written.
fn publish(path: &Path, value: &serde_json::Value) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(value).unwrap()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Holds the run at `before_agent` (the thread is loaded, nothing saved yet) until the other
/// worker has loaded it too; records what this worker loaded.
#[derive(Debug)]
struct Barrier {
    dir: PathBuf,
    role: String,
    other: String,
}

#[async_trait]
impl Middleware for Barrier {
    fn name(&self) -> &str {
        "barrier"
    }

    async fn before_agent(&self, state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        let loaded = json!({"messages": shape(&state.messages)});
        publish(&self.dir.join(format!("loaded-{}.json", self.role)), &loaded);
        wait_for(&self.dir.join(format!("loaded-{}.json", self.other))).await;
        Ok(())
    }
}

/// One worker process: run the turn; on a conflict, wait for the other worker, reload, run again.
fn worker(role: &str) {
    let var = |name: &str| std::env::var(name).unwrap();
    let (dir, prefix, thread) = (PathBuf::from(var(DIR)), var(PREFIX), var(THREAD));
    let target = s3_target("checkpoint worker").expect("the orchestrating test checked the emulator");
    let other = if role == "A" { "B" } else { "A" };
    let thread = ThreadId::new(thread).unwrap();
    runtime().block_on(async {
        let agent = |barrier: Option<Barrier>| {
            let model = Arc::new(ScriptedModel::new().then_text(format!("reply to {role}")));
            let mut builder =
                Agent::builder(model).checkpointer(checkpointer(&target.endpoint, &target.bucket, &prefix));
            if let Some(barrier) = barrier {
                builder = builder.middleware(barrier);
            }
            builder.build().unwrap()
        };
        let input = || RunInput::human(format!("from {role}")).thread(thread.clone());
        let barrier = Barrier {
            dir: dir.clone(),
            role: role.to_owned(),
            other: other.to_owned(),
        };
        let result = match agent(Some(barrier)).run(input()).await {
            Ok(_) => json!({"first": "saved", "final": "saved"}),
            Err(err) => {
                assert!(err.is_conflict(), "worker {role}: not a conflict: {err:?}");
                assert!(
                    matches!(&err, AgentError::Checkpoint(CheckpointError::Conflict { thread_id }) if *thread_id == thread),
                    "{err:?}"
                );
                // Retry once the winner's turn is complete: reload and run the turn again.
                wait_for(&dir.join(format!("done-{other}.json"))).await;
                let out = agent(None).run(input()).await.unwrap();
                json!({"first": "conflict", "error": err.to_string(), "final": "saved",
                       "messages": shape(&out.state.messages)})
            }
        };
        publish(&dir.join(format!("done-{role}.json")), &result);
    });
}

#[test]
fn two_worker_processes_share_one_thread() {
    if let Ok(role) = std::env::var(ROLE) {
        worker(&role);
        return;
    }
    let Some(target) = s3_target("checkpoint worker processes") else {
        return;
    };
    let prefix = unique("two-worker-processes");
    let thread = ThreadId::new(unique("thread")).unwrap();

    // The thread exists before the workers start: [start, hello].
    let cp = checkpointer(&target.endpoint, &target.bucket, &prefix);
    runtime().block_on(async {
        let model = Arc::new(ScriptedModel::new().then_text("hello"));
        Agent::builder(model)
            .checkpointer(cp.clone())
            .build()
            .unwrap()
            .run(RunInput::human("start").thread(thread.clone()))
            .await
            .unwrap();
    });

    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<(&str, std::process::Child)> = ["A", "B"]
        .into_iter()
        .map(|role| {
            let child = Command::new(&exe)
                .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
                .env(ROLE, role)
                .env(DIR, dir.path())
                .env(PREFIX, &prefix)
                .env(THREAD, thread.as_str())
                .stdout(Stdio::from(
                    std::fs::File::create(dir.path().join(format!("{role}.out"))).unwrap(),
                ))
                .stderr(Stdio::from(
                    std::fs::File::create(dir.path().join(format!("{role}.err"))).unwrap(),
                ))
                .spawn()
                .unwrap();
            (role, child)
        })
        .collect();
    let started = Instant::now();
    for (role, child) in &mut children {
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > HANG_GUARD {
                let _ = child.kill();
                panic!("worker {role} hung");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for (role, mut child) in children {
        let status = child.wait().unwrap();
        let log = |ext: &str| std::fs::read_to_string(dir.path().join(format!("{role}.{ext}"))).unwrap();
        assert!(
            status.success(),
            "worker {role} failed: {status}\n{}\n{}",
            log("out"),
            log("err")
        );
    }

    let read = |name: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.path().join(name)).unwrap()).unwrap()
    };
    // Both loaded the same checkpoint before either saved.
    for role in ["A", "B"] {
        assert_eq!(
            read(&format!("loaded-{role}.json"))["messages"],
            json!(["human:start", "ai:hello", format!("human:from {role}")]),
            "worker {role}"
        );
    }
    let (a, b) = (read("done-A.json"), read("done-B.json"));
    let (winner, loser, lost) = match (a["first"].as_str(), b["first"].as_str()) {
        (Some("saved"), Some("conflict")) => ("A", "B", b),
        (Some("conflict"), Some("saved")) => ("B", "A", a),
        _ => panic!("exactly one worker must win the first save:\nA: {a}\nB: {b}"),
    };
    assert!(
        lost["error"].as_str().unwrap().contains("conflict on thread"),
        "{lost}"
    );
    let expected = [
        "human:start".to_owned(),
        "ai:hello".to_owned(),
        format!("human:from {winner}"),
        format!("ai:reply to {winner}"),
        format!("human:from {loser}"),
        format!("ai:reply to {loser}"),
    ];
    assert_eq!(lost["messages"], json!(expected), "the loser's retried run");

    // The stored thread holds both turns, in order, nothing lost or doubled.
    let stored = runtime().block_on(cp.load(&thread)).unwrap().unwrap();
    assert_eq!(shape(&stored.checkpoint.state.messages), expected);
}
