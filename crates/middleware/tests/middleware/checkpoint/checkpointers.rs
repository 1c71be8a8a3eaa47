//! Threads and checkpoints: the checkpointer contract, resuming a thread in a second runtime, and two
//! concurrent writers, against memory, `StateBackend`, `ObjectStoreBackend` (`memory://`) and, when
//! available, the S3 emulator.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::Barrier;
use trellis_middleware::backend::{Backend, ObjectStoreBackend, StateBackend, StoreOptions, VirtualPath};
use trellis_middleware::core_stack::{TODOS, TOKEN_USAGE};
use trellis_middleware::runtime::checkpoint::{
    CHECKPOINT_FORMAT, CallOutcome, CallRecord, Checkpoint, CheckpointError, SlotWrite,
};
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::message_list::Messages;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;

use crate::common::*;

static PUBLIC: Slot<Vec<String>> = Slot::public("notes");
static PRIVATE: Slot<String> = Slot::private("_cache");

type MakeCheckpointer = Arc<dyn Fn() -> Arc<dyn Checkpointer> + Send + Sync>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn backend_checkpointer(backend: Arc<dyn Backend>) -> Arc<dyn Checkpointer> {
    Arc::new(BackendCheckpointer::new(backend, VirtualPath::parse("/threads").unwrap()).unwrap())
}

// ---------------------------------------------------------------------------------------------------
// The contract every checkpointer keeps.

async fn contract(cp: Arc<dyn Checkpointer>) {
    let thread = ThreadId::new(unique("contract")).unwrap();
    assert!(cp.load(&thread).await.unwrap().is_none());

    let mut state = State::with_messages(vec![Message::human("first")]);
    state.set(&PUBLIC, vec!["a".into()]);
    state.set(&PRIVATE, "secret".into());
    let v1 = cp
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await
        .unwrap();

    let again = cp
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await;
    assert!(
        matches!(again, Err(CheckpointError::Conflict { .. })),
        "create-only: {again:?}"
    );

    let loaded = cp.load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.version, v1);
    assert_eq!(loaded.checkpoint.seq, 0);
    assert_eq!(loaded.checkpoint.state.messages, state.messages);
    assert_eq!(
        loaded.checkpoint.state.get(&PUBLIC).unwrap(),
        Some(&vec!["a".to_owned()])
    );
    assert_eq!(
        loaded.checkpoint.state.get(&PRIVATE).unwrap().map(String::as_str),
        Some("secret")
    );

    state.messages.push(Message::ai("second"));
    let v2 = cp
        .save(Checkpoint::new(thread.clone(), 1, state.clone()), Some(&v1))
        .await
        .unwrap();
    assert_ne!(v1, v2);

    let stale = cp
        .save(Checkpoint::new(thread.clone(), 1, state.clone()), Some(&v1))
        .await;
    assert!(
        matches!(stale, Err(CheckpointError::Conflict { .. })),
        "stale version: {stale:?}"
    );

    let loaded = cp.load(&thread).await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.checkpoint.seq), (v2.clone(), 1));
    assert_eq!(loaded.checkpoint.state.messages.len(), 2);

    journal_contract(cp.as_ref(), &thread).await;

    cp.delete(&thread).await.unwrap();
    assert!(cp.load(&thread).await.unwrap().is_none());
    assert!(
        cp.recorded_calls(&thread, &["c:1".to_owned()])
            .await
            .unwrap()
            .is_empty(),
        "delete takes the journal with the thread"
    );
    let after_delete = cp
        .save(Checkpoint::new(thread.clone(), 2, state), Some(&v2))
        .await;
    assert!(
        matches!(after_delete, Err(CheckpointError::Conflict { .. })),
        "{after_delete:?}"
    );
    cp.delete(&thread).await.unwrap();
}

/// The tool-call journal: a record replaces the call's earlier one, only the calls asked for come
/// back, forgetting removes them, and a fork does not copy them. Leaves call `c:1` recorded (the
/// caller checks that `delete` removes it).
async fn journal_contract(cp: &dyn Checkpointer, thread: &ThreadId) {
    assert!(cp.keeps_call_journal());
    // Call ids may hold any character; records are stored by digest.
    let ids = ["c:1".to_owned(), "c/../2".to_owned(), "never".to_owned()];
    let started = |id: &str| CallRecord {
        call_id: id.to_owned(),
        reply: 1,
        fingerprint: CallRecord::fingerprint("send", &json!({"to": id})),
        outcome: CallOutcome::Started,
    };
    cp.record_call(thread, &started("c:1")).await.unwrap();
    cp.record_call(thread, &started("c/../2")).await.unwrap();
    let finished = CallRecord {
        call_id: "c:1".to_owned(),
        reply: 1,
        fingerprint: CallRecord::fingerprint("send", &json!({"to": "c:1"})),
        outcome: CallOutcome::Finished {
            message: trellis_middleware::runtime::message::ToolMessage::text("c:1", "send", "sent"),
            updates: vec![SlotWrite {
                name: "notes".to_owned(),
                private: false,
                value: json!(["n"]),
            }],
        },
    };
    cp.record_call(thread, &finished).await.unwrap();
    let mut got = cp.recorded_calls(thread, &ids).await.unwrap();
    got.sort_by(|a, b| a.call_id.cmp(&b.call_id));
    assert_eq!(got, [started("c/../2"), finished.clone()]);
    assert_eq!(
        cp.recorded_calls(thread, &ids[2..]).await.unwrap(),
        [],
        "only the calls asked for"
    );

    let fork = ThreadId::new(unique("journal-fork")).unwrap();
    let seq = cp.load(thread).await.unwrap().unwrap().checkpoint.seq;
    cp.fork(thread, seq, &fork).await.unwrap();
    assert!(
        cp.recorded_calls(&fork, &ids).await.unwrap().is_empty(),
        "a fork starts with no journal"
    );
    cp.delete(&fork).await.unwrap();

    cp.forget_calls(thread, &ids[1..]).await.unwrap();
    assert_eq!(cp.recorded_calls(thread, &ids).await.unwrap(), [finished]);
}

// ---------------------------------------------------------------------------------------------------
// Resume a thread in a second runtime, through a fresh checkpointer on the same storage.

fn first_agent(checkpointer: Arc<dyn Checkpointer>) -> (Agent, Arc<ScriptedModel>) {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                call(
                    "t1",
                    "write_todos",
                    json!({"todos": [{"content": "say hi", "status": "completed"}]}),
                ),
                call("e1", "echo", json!({"text": "hi"})),
            ])
            .then_text("first run done"),
    );
    let agent = Agent::builder(model.clone())
        .checkpointer(checkpointer)
        .tool(echo_tool())
        .middleware(TodoListMiddleware::new())
        .middleware(TokenUsageMiddleware::new())
        .build()
        .unwrap();
    (agent, model)
}

fn resume_in_a_second_runtime(make: MakeCheckpointer) {
    let thread = ThreadId::new(unique("resume")).unwrap();

    let (make1, thread1) = (make.clone(), thread.clone());
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let (agent, _) = first_agent(make1());
            let out = agent.run(RunInput::human("one").thread(thread1)).await.unwrap();
            assert_eq!(out.final_text().as_deref(), Some("first run done"));
        })
    })
    .join()
    .unwrap();

    let (make2, thread2) = (make, thread);
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let model = Arc::new(ScriptedModel::new().then_text("second run done"));
            let agent = Agent::builder(model.clone())
                .checkpointer(make2())
                .tool(echo_tool())
                .middleware(TodoListMiddleware::new())
                .middleware(TokenUsageMiddleware::new())
                .build()
                .unwrap();
            let out = agent.run(RunInput::human("two").thread(thread2)).await.unwrap();

            let seen = model.requests()[0].messages.clone();
            assert_eq!(
                shape(&seen),
                [
                    "human:one",
                    "ai:calls[t1,e1]",
                    "tool:t1",
                    "tool:e1",
                    "ai:first run done",
                    "human:two"
                ]
            );
            assert_eq!(out.state.get(&TODOS).unwrap().unwrap()[0].content, "say hi");
            assert_eq!(out.state.get(&TOKEN_USAGE).unwrap().unwrap().model_calls, 3);
            assert_eq!(out.first_new_message, 5);
            assert_eq!(out.final_text().as_deref(), Some("second run done"));
        })
    })
    .join()
    .unwrap();
}

// ---------------------------------------------------------------------------------------------------
// Two workers run one thread at once: exactly one conflict, no lost messages.

/// Holds every run at `before_agent` until both workers have loaded the thread.
#[derive(Debug)]
struct Rendezvous(Arc<Barrier>);

#[async_trait]
impl Middleware for Rendezvous {
    fn name(&self) -> &str {
        "rendezvous"
    }
    async fn before_agent(&self, _state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        self.0.wait().await;
        Ok(())
    }
}

fn worker(checkpointer: Arc<dyn Checkpointer>, reply: &str, barrier: Option<Arc<Barrier>>) -> Agent {
    let model = Arc::new(ScriptedModel::new().then_text(reply));
    let mut builder = Agent::builder(model).checkpointer(checkpointer);
    if let Some(barrier) = barrier {
        builder = builder.middleware(Rendezvous(barrier));
    }
    builder.build().unwrap()
}

async fn two_writers(cp_a: Arc<dyn Checkpointer>, cp_b: Arc<dyn Checkpointer>) {
    let thread = ThreadId::new(unique("writers")).unwrap();
    worker(cp_a.clone(), "hello", None)
        .run(RunInput::human("start").thread(thread.clone()))
        .await
        .unwrap();

    let barrier = Arc::new(Barrier::new(2));
    let a = worker(cp_a.clone(), "reply to A", Some(barrier.clone()));
    let b = worker(cp_b.clone(), "reply to B", Some(barrier));
    let (ra, rb) = tokio::join!(
        a.run(RunInput::human("from A").thread(thread.clone())),
        b.run(RunInput::human("from B").thread(thread.clone())),
    );
    let conflicts = [&ra, &rb]
        .iter()
        .filter(|r| matches!(r, Err(e) if e.is_conflict()))
        .count();
    let successes = [&ra, &rb].iter().filter(|r| r.is_ok()).count();
    assert_eq!((conflicts, successes), (1, 1), "A: {ra:?}\nB: {rb:?}");

    let (winner, loser, loser_cp) = if ra.is_ok() {
        ("A", "B", cp_b)
    } else {
        ("B", "A", cp_a)
    };
    let saved = cp_loaded(&*loser_cp, &thread).await;
    assert_eq!(
        shape(&saved),
        [
            "human:start".to_owned(),
            "ai:hello".to_owned(),
            format!("human:from {winner}"),
            format!("ai:reply to {winner}"),
        ],
        "the winner's run is complete"
    );

    // The loser reloads and retries; nothing is lost.
    let out = worker(loser_cp, &format!("reply to {loser}"), None)
        .run(RunInput::human(format!("from {loser}")).thread(thread))
        .await
        .unwrap();
    assert_eq!(
        shape(&out.state.messages),
        [
            "human:start".to_owned(),
            "ai:hello".to_owned(),
            format!("human:from {winner}"),
            format!("ai:reply to {winner}"),
            format!("human:from {loser}"),
            format!("ai:reply to {loser}"),
        ]
    );
}

async fn cp_loaded(cp: &dyn Checkpointer, thread: &ThreadId) -> Messages {
    cp.load(thread).await.unwrap().unwrap().checkpoint.state.messages
}

// ---------------------------------------------------------------------------------------------------
// In memory.

#[tokio::test]
async fn in_memory_contract() {
    contract(Arc::new(InMemoryCheckpointer::new())).await;
}

#[tokio::test]
async fn in_memory_two_writers() {
    let cp: Arc<dyn Checkpointer> = Arc::new(InMemoryCheckpointer::new());
    two_writers(cp.clone(), cp).await;
}

#[test]
fn in_memory_resume_in_a_second_runtime() {
    let cp: Arc<dyn Checkpointer> = Arc::new(InMemoryCheckpointer::new());
    resume_in_a_second_runtime(Arc::new(move || cp.clone()));
}

// ---------------------------------------------------------------------------------------------------
// StateBackend.

#[tokio::test]
async fn state_backend_contract() {
    contract(backend_checkpointer(Arc::new(StateBackend::new()))).await;
}

#[tokio::test]
async fn state_backend_two_writers() {
    let backend = StateBackend::new();
    two_writers(
        backend_checkpointer(Arc::new(backend.clone())),
        backend_checkpointer(Arc::new(backend)),
    )
    .await;
}

#[test]
fn state_backend_resume_in_a_second_runtime() {
    let backend = StateBackend::new();
    resume_in_a_second_runtime(Arc::new(move || backend_checkpointer(Arc::new(backend.clone()))));
}

#[tokio::test]
async fn state_backend_layout_is_a_head_and_a_log_per_thread() {
    let backend = StateBackend::new();
    let cp =
        BackendCheckpointer::new(Arc::new(backend.clone()), VirtualPath::parse("/threads").unwrap()).unwrap();
    let thread = ThreadId::new("layout").unwrap();
    let mut state = State::with_messages(vec![Message::human("x")]);
    let v = cp
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await
        .unwrap();
    state.messages.push(Message::ai("y"));
    state.set(&PUBLIC, vec!["n".into()]);
    cp.save(Checkpoint::new(thread.clone(), 1, state), Some(&v))
        .await
        .unwrap();
    let path = cp.path(&thread).unwrap();
    assert_eq!(path.as_str(), "/threads/layout/head.json");
    let read = |p: VirtualPath| {
        let backend = backend.clone();
        async move {
            trellis_middleware::backend::BackendExt::read_bytes(&backend, &p)
                .await
                .unwrap()
        }
    };
    let head: serde_json::Value = serde_json::from_slice(&read(path.clone()).await).unwrap();
    assert_eq!(head["format"], CHECKPOINT_FORMAT);
    assert_eq!(
        (head["thread_id"].as_str(), head["seq"].as_u64()),
        (Some("layout"), Some(1))
    );
    let step = head["step"].as_str().unwrap();
    let log = VirtualPath::parse(&format!("/threads/layout/log/{step}")).unwrap();
    let bytes = read(log).await;
    let mut lines = bytes.split(|b| *b == b'\n');
    let header: serde_json::Value = serde_json::from_slice(lines.next().unwrap()).unwrap();
    let body: serde_json::Value = serde_json::from_slice(lines.next().unwrap()).unwrap();
    assert_eq!(header["summary"], "assistant: y");
    assert_eq!(body["keep"], 1);
    assert_eq!(body["append"][0]["role"], "ai");
    assert_eq!(body["set"]["notes"]["value"], json!(["n"]));

    // A head from a newer format is refused, not misread.
    let mut newer = head.clone();
    newer["format"] = json!(99);
    trellis_middleware::backend::Backend::write(
        &backend,
        &path,
        serde_json::to_vec(&newer).unwrap().into(),
        trellis_middleware::backend::WriteMode::Overwrite,
    )
    .await
    .unwrap();
    let err = cp.load(&thread).await.unwrap_err();
    assert!(
        matches!(err, CheckpointError::UnsupportedFormat { format: 99, .. }),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------------
// ObjectStoreBackend over memory://.

fn memory_store() -> ObjectStoreBackend {
    ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap()
}

#[tokio::test]
async fn object_store_memory_contract() {
    contract(backend_checkpointer(Arc::new(memory_store()))).await;
}

#[tokio::test]
async fn object_store_memory_two_writers() {
    let store = memory_store();
    two_writers(
        backend_checkpointer(Arc::new(store.clone())),
        backend_checkpointer(Arc::new(store)),
    )
    .await;
}

#[test]
fn object_store_memory_resume_in_a_second_runtime() {
    let store = memory_store();
    resume_in_a_second_runtime(Arc::new(move || backend_checkpointer(Arc::new(store.clone()))));
}

// ---------------------------------------------------------------------------------------------------
// The S3 emulator.

/// The emulator's endpoint and bucket, or `None` (after saying so) when the suite should be skipped.
fn s3_target() -> Option<(String, String)> {
    s3_emulator("S3 checkpointer suite")
}

/// A new S3 client (as another process would have) on `prefix` of the test bucket.
fn s3_backend(endpoint: &str, bucket: &str, prefix: &str) -> Arc<dyn Backend> {
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    Arc::new(ObjectStoreBackend::from_url(&format!("s3://{bucket}/{prefix}"), &options).unwrap())
}

#[test]
fn s3_checkpointer_suite() {
    let Some((endpoint, bucket)) = s3_target() else {
        return;
    };
    let prefix = unique("trellis-middleware-checkpoints");
    let make: MakeCheckpointer = {
        let (endpoint, bucket, prefix) = (endpoint.clone(), bucket.clone(), prefix.clone());
        Arc::new(move || backend_checkpointer(s3_backend(&endpoint, &bucket, &prefix)))
    };

    runtime().block_on(contract(make()));
    resume_in_a_second_runtime(make.clone());
    runtime().block_on(two_writers(make(), make()));
}

#[tokio::test]
async fn in_memory_history_load_at_and_fork() {
    let cp = InMemoryCheckpointer::new().with_history(10);
    let thread = ThreadId::new(unique("mem-history")).unwrap();
    let mut state = State::with_messages(vec![Message::human("one")]);
    let mut v = cp
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await
        .unwrap();
    state.messages.push(Message::ai("two"));
    v = cp
        .save(Checkpoint::new(thread.clone(), 1, state.clone()), Some(&v))
        .await
        .unwrap();
    state.set(&PUBLIC, vec!["n".into()]);
    cp.save(Checkpoint::new(thread.clone(), 2, state.clone()), Some(&v))
        .await
        .unwrap();
    let history = cp.history(&thread).await.unwrap();
    let lines: Vec<(u64, &str)> = history.iter().map(|h| (h.seq, h.summary.as_str())).collect();
    assert_eq!(
        lines,
        [(0, "user: one"), (1, "assistant: two"), (2, "slots: notes")]
    );
    let at1 = cp.load_at(&thread, 1).await.unwrap().unwrap();
    assert_eq!(at1.state.messages.len(), 2);
    assert!(at1.state.get(&PUBLIC).unwrap().is_none());

    let files = cp.thread_files(&thread).unwrap();
    let note = VirtualPath::parse("/a.txt").unwrap();
    files
        .write(
            &note,
            b"kept".to_vec().into(),
            trellis_middleware::backend::WriteMode::Overwrite,
        )
        .await
        .unwrap();
    let fork = ThreadId::new(unique("mem-fork")).unwrap();
    cp.fork(&thread, 1, &fork).await.unwrap();
    let forked = cp.load(&fork).await.unwrap().unwrap();
    assert_eq!(
        (forked.checkpoint.seq, forked.checkpoint.state.messages.len()),
        (1, 2)
    );
    let copied =
        trellis_middleware::backend::BackendExt::read_bytes(cp.thread_files(&fork).unwrap().as_ref(), &note)
            .await
            .unwrap();
    assert_eq!(&copied[..], b"kept");
    assert!(matches!(
        cp.fork(&thread, 1, &fork).await,
        Err(CheckpointError::Conflict { .. })
    ));
    assert!(matches!(
        cp.fork(&thread, 7, &ThreadId::new(unique("none")).unwrap()).await,
        Err(CheckpointError::NoSuchCheckpoint { seq: 7, .. })
    ));

    // By default only the latest checkpoint is kept.
    let latest_only = InMemoryCheckpointer::new();
    let v = latest_only
        .save(Checkpoint::new(thread.clone(), 0, State::default()), None)
        .await
        .unwrap();
    latest_only
        .save(Checkpoint::new(thread.clone(), 1, state), Some(&v))
        .await
        .unwrap();
    let history = latest_only.history(&thread).await.unwrap();
    assert_eq!(history.iter().map(|h| h.seq).collect::<Vec<_>>(), [1]);
    assert!(latest_only.load_at(&thread, 0).await.unwrap().is_none());
}
