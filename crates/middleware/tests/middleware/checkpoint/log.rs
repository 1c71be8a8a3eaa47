//! `BackendCheckpointer`'s step log: a save writes what changed (new messages, changed slots, a
//! small head), large shared values go to the store once by content, threads saved by older
//! builds (committed fixtures of formats 1 and 2) are read and carried on, and damage is a typed
//! error naming the thread and step. The same store on every backend, racing workers, history,
//! forks and garbage collection are in the integration suite (`tests/integration/thread_store.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use trellis_middleware::backend::{
    Backend, BackendError, BackendExt, ObjectStoreBackend, StateBackend, StoreOptions, VirtualPath, WriteMode,
};
use trellis_middleware::core_stack::TODOS;
use trellis_middleware::runtime::checkpoint::{Checkpoint, CheckpointError};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::*;

use crate::common::{Spy, SpyOp};

/// A slot value with a large part that steps share.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Catalog {
    #[serde(serialize_with = "trellis_middleware::runtime::checkpoint::serialize_by_content")]
    skills: Arc<Vec<String>>,
    counter: u32,
}

static CATALOG: Slot<Catalog> = Slot::private("_catalog");
static NOTES: Slot<Vec<String>> = Slot::public("notes");
static CACHE: Slot<String> = Slot::private("_cache");

fn root() -> VirtualPath {
    VirtualPath::parse("/threads").unwrap()
}

/// (path kind, bytes) of each write: "head", "step", "blob" or the path.
fn writes(ops: &[SpyOp]) -> Vec<(String, u64)> {
    ops.iter()
        .filter(|o| o.op == "write")
        .map(|o| {
            let kind = if o.path.ends_with("/head.json") {
                "head".to_owned()
            } else if o.path.contains("/log/") {
                "step".to_owned()
            } else if o.path.contains("/blobs/") {
                "blob".to_owned()
            } else {
                o.path.clone()
            };
            (kind, o.bytes)
        })
        .collect()
}

async fn files_below(backend: &dyn Backend, dir: &str) -> Vec<String> {
    match backend
        .list_files(&VirtualPath::parse(dir).unwrap(), 10_000)
        .await
    {
        Ok(listing) => listing.files.into_iter().map(|f| f.path.to_string()).collect(),
        Err(BackendError::NotFound { .. }) => Vec::new(),
        Err(e) => panic!("{e}"),
    }
}

async fn what_changed_is_written(store: Arc<dyn Backend>) {
    let spy = Spy::new(store);
    let backend: Arc<dyn Backend> = spy.clone();
    let cp = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let thread = ThreadId::new(format!("delta-{}", std::process::id())).unwrap();
    let skills: Arc<Vec<String>> =
        Arc::new((0..5_000).map(|i| format!("skill-{i:05} does things")).collect());
    let mut state = State::with_messages(vec![Message::human("first")]);
    state.set(
        &CATALOG,
        Catalog {
            skills: skills.clone(),
            counter: 0,
        },
    );
    state.set(&NOTES, vec!["small".into()]);

    let mut version = cp
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await
        .unwrap();
    let first = writes(&spy.take());
    let kinds: Vec<&str> = first.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        ["blob", "step", "head"],
        "blob, then step, then head: {first:?}"
    );
    assert!(first[0].1 > 100_000, "{first:?}");
    assert!(first[1].1 < 2_048 && first[2].1 < 512, "{first:?}");

    // Ten more steps: each adds a message and bumps the counter; the catalog Arc stays.
    for i in 1..=10u32 {
        state.messages.push(Message::ai(format!("reply {i}")));
        state.update(&CATALOG, |c| c.counter = i).unwrap();
        version = cp
            .save(
                Checkpoint::new(thread.clone(), u64::from(i), state.clone()),
                Some(&version),
            )
            .await
            .unwrap();
        let step = writes(&spy.take());
        let kinds: Vec<&str> = step.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["step", "head"], "step {i}: {step:?}");
        assert!(step[0].1 < 1_024, "step {i} wrote {} bytes", step[0].1);
    }
    // A step that changes nothing but the messages does not rewrite any slot.
    state.messages.push(Message::human("only a message"));
    let v = cp
        .save(Checkpoint::new(thread.clone(), 11, state.clone()), Some(&version))
        .await
        .unwrap();
    let ops = spy.take();
    let step_path = ops
        .iter()
        .find(|o| o.op == "write" && o.path.contains("/log/"))
        .unwrap();
    let bytes = backend
        .read_bytes(&VirtualPath::parse(&step_path.path).unwrap())
        .await
        .unwrap();
    let body: serde_json::Value =
        serde_json::from_slice(bytes.split(|b| *b == b'\n').nth(1).unwrap()).unwrap();
    assert_eq!(body["set"], json!({}), "{body}");
    assert_eq!(body["keep"], 11);
    assert_eq!(body["append"].as_array().unwrap().len(), 1);

    // Another process loads it whole, and its next save writes no blob.
    let cold = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let loaded = cold.load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.version, v);
    assert_eq!(loaded.checkpoint.seq, 11);
    assert_eq!(loaded.checkpoint.state.messages, state.messages);
    let got = loaded.checkpoint.state.get(&CATALOG).unwrap().unwrap();
    assert_eq!((got.skills.len(), got.counter), (5_000, 10));
    assert_eq!(got.skills, skills);
    spy.take();
    let mut next = loaded.checkpoint.state.clone();
    next.update(&CATALOG, |c| c.counter = 99).unwrap();
    cold.save(Checkpoint::new(thread.clone(), 12, next), Some(&v))
        .await
        .unwrap();
    let kinds: Vec<String> = writes(&spy.take()).into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, ["step", "head"]);
    let history = cold.history(&thread).await.unwrap();
    assert_eq!(
        history.iter().map(|h| h.seq).collect::<Vec<_>>(),
        (0..=12).collect::<Vec<_>>()
    );
    assert_eq!(history[1].summary, "assistant: reply 1");
    assert_eq!(history[11].summary, "user: only a message");
    assert_eq!(history[12].summary, "slots: _catalog");

    cp.delete(&thread).await.unwrap();
    assert!(
        files_below(backend.as_ref(), &format!("/threads/{thread}"))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn state_backend_writes_what_changed() {
    what_changed_is_written(Arc::new(StateBackend::new())).await;
}

#[tokio::test]
async fn object_store_memory_writes_what_changed() {
    what_changed_is_written(Arc::new(
        ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap(),
    ))
    .await;
}

/// Put a committed fixture thread (an old build's `checkpoint.json` and blobs) under `/threads/{id}`.
async fn install_fixture(backend: &StateBackend, id: &str, files: &[(&str, &[u8])]) {
    for (name, bytes) in files {
        let path = VirtualPath::parse(&format!("/threads/{id}/{name}")).unwrap();
        backend
            .write(&path, bytes.to_vec().into(), WriteMode::CreateNew)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn old_format_threads_are_read_and_carried_on() {
    let backend = StateBackend::new();
    install_fixture(
        &backend,
        "legacy-v1",
        &[(
            "checkpoint.json",
            include_bytes!("fixtures/legacy-v1/checkpoint.json"),
        )],
    )
    .await;
    const BLOB: &str = "2b8500fb9984a643fba48bde55514d40f7103c19a97e7ba38d34b7781f13cb29";
    install_fixture(
        &backend,
        "legacy-v2",
        &[
            ("checkpoint.json", include_bytes!("fixtures/legacy-v2/checkpoint.json")),
            (
                &format!("blobs/{BLOB}.json"),
                include_bytes!("fixtures/legacy-v2/blobs/2b8500fb9984a643fba48bde55514d40f7103c19a97e7ba38d34b7781f13cb29.json"),
            ),
        ],
    )
    .await;
    let cp = BackendCheckpointer::new(Arc::new(backend.clone()), root()).unwrap();
    assert_eq!(
        cp.threads().await.unwrap(),
        [
            ThreadId::new("legacy-v1").unwrap(),
            ThreadId::new("legacy-v2").unwrap()
        ]
    );

    // Format 1: everything inline.
    let v1 = ThreadId::new("legacy-v1").unwrap();
    let stored = cp.load(&v1).await.unwrap().unwrap();
    assert_eq!(stored.checkpoint.seq, 3);
    let texts: Vec<String> = stored
        .checkpoint
        .state
        .messages
        .iter()
        .map(|m| m.text())
        .collect();
    assert_eq!(texts, ["list my notes", "", "notes.md", "You have one note."]);
    assert_eq!(
        stored.checkpoint.state.get(&TODOS).unwrap().unwrap()[0].content,
        "read notes"
    );
    assert_eq!(
        stored.checkpoint.state.get(&CACHE).unwrap().map(String::as_str),
        Some("kept")
    );
    let history = cp.history(&v1).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        (history[0].seq, history[0].summary.as_str()),
        (3, "assistant: You have one note.")
    );

    // Its next save starts the log; the old file goes, the state stays whole.
    let mut state = stored.checkpoint.state.clone();
    state.messages.push(Message::human("and now?"));
    let version = cp
        .save(Checkpoint::new(v1.clone(), 4, state), Some(&stored.version))
        .await
        .unwrap();
    let files = files_below(&backend, "/threads/legacy-v1").await;
    assert!(files.iter().any(|f| f.ends_with("/head.json")), "{files:?}");
    assert!(
        !files.iter().any(|f| f.ends_with("/checkpoint.json")),
        "{files:?}"
    );
    let fresh = BackendCheckpointer::new(Arc::new(backend.clone()), root()).unwrap();
    let again = fresh.load(&v1).await.unwrap().unwrap();
    assert_eq!(again.version, version);
    assert_eq!(again.checkpoint.seq, 4);
    assert_eq!(again.checkpoint.state.messages.len(), 5);
    assert_eq!(
        again.checkpoint.state.get(&CACHE).unwrap().map(String::as_str),
        Some("kept")
    );
    // A stale writer that still holds the old file's version loses.
    let stale = fresh
        .save(
            Checkpoint::new(v1.clone(), 4, again.checkpoint.state.clone()),
            Some(&stored.version),
        )
        .await;
    assert!(
        matches!(stale, Err(CheckpointError::Conflict { .. })),
        "{stale:?}"
    );

    // Format 2: a slot part moved out to a blob is put back.
    let v2 = ThreadId::new("legacy-v2").unwrap();
    let stored = cp.load(&v2).await.unwrap().unwrap();
    let big = stored.checkpoint.state.get_json("_big").unwrap().unwrap();
    assert_eq!(big["counter"], 7);
    assert_eq!(big["catalog"]["skills"].as_array().unwrap().len(), 50);
    assert_eq!(
        stored.checkpoint.state.get(&NOTES).unwrap(),
        Some(&vec!["small".to_owned()])
    );
    cp.save(
        Checkpoint::new(v2.clone(), 2, stored.checkpoint.state.clone()),
        Some(&stored.version),
    )
    .await
    .unwrap();
    let again = fresh.load(&v2).await.unwrap().unwrap();
    assert_eq!(again.checkpoint.state.get_json("_big").unwrap().unwrap(), big);
}

#[tokio::test]
async fn damage_is_a_typed_error_naming_the_thread_and_step() {
    let backend = Arc::new(StateBackend::new());
    let cp = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let thread = ThreadId::new("damaged").unwrap();
    let mut state = State::with_messages(vec![Message::human("hi")]);
    state.set(
        &CATALOG,
        Catalog {
            skills: Arc::new(vec!["one".into()]),
            counter: 0,
        },
    );
    let mut version = cp
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await
        .unwrap();
    for i in 1..3 {
        state.messages.push(Message::ai(format!("r{i}")));
        version = cp
            .save(Checkpoint::new(thread.clone(), i, state.clone()), Some(&version))
            .await
            .unwrap();
    }
    let log = files_below(backend.as_ref(), "/threads/damaged/log").await;
    assert_eq!(log.len(), 3, "{log:?}");
    let step1 = VirtualPath::parse(&log[1]).unwrap();
    let good = backend.read_bytes(&step1).await.unwrap();
    let fresh = || BackendCheckpointer::new(backend.clone(), root()).unwrap();

    // A garbled step.
    backend
        .write(
            &step1,
            b"{\"format\":3,\"thread_id\":\"damaged\"}}".to_vec().into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    let err = fresh().load(&thread).await.unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Corrupt { step: Some(1), thread_id, .. } if thread_id.as_str() == "damaged"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("damaged") && err.to_string().contains("step 1"),
        "{err}"
    );
    let err = fresh().history(&thread).await.unwrap_err();
    assert!(
        matches!(err, CheckpointError::Corrupt { step: Some(1), .. }),
        "{err:?}"
    );

    // A step cut short: its own error, and no going back to an earlier step (writes to a store
    // without links are whole or absent; only local disk's are passed over, see `power_loss.rs`).
    backend
        .write(
            &step1,
            b"{\"format\":3,\"thread_id\":\"damaged\"".to_vec().into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    let err = fresh().load(&thread).await.unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Unfinished { step: Some(1), thread_id, .. } if thread_id.as_str() == "damaged"),
        "{err:?}"
    );
    assert!(err.to_string().contains("step 1"), "{err}");

    // A step that claims another number.
    let wrong: Vec<u8> = String::from_utf8(good.to_vec())
        .unwrap()
        .replacen("\"seq\":1", "\"seq\":7", 1)
        .into_bytes();
    backend
        .write(&step1, wrong.into(), WriteMode::Overwrite)
        .await
        .unwrap();
    let err = fresh().load(&thread).await.unwrap_err();
    assert!(
        matches!(err, CheckpointError::Corrupt { step: Some(1), .. }),
        "{err:?}"
    );

    // A missing step.
    backend.delete(&step1).await.unwrap();
    let err = fresh().load(&thread).await.unwrap_err();
    assert!(
        matches!(err, CheckpointError::Corrupt { step: Some(1), .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("missing"), "{err}");
    backend.write(&step1, good, WriteMode::Overwrite).await.unwrap();
    assert_eq!(fresh().load(&thread).await.unwrap().unwrap().version, version);

    // A missing blob.
    for blob in files_below(backend.as_ref(), "/threads/damaged/blobs").await {
        backend.delete(&VirtualPath::parse(&blob).unwrap()).await.unwrap();
    }
    let err = fresh().load(&thread).await.unwrap_err();
    assert!(
        matches!(err, CheckpointError::Corrupt { step: Some(2), .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("blob"), "{err}");

    // A garbled head.
    backend
        .write(
            &cp.path(&thread).unwrap(),
            b"not json".to_vec().into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    let err = fresh().load(&thread).await.unwrap_err();
    assert!(
        matches!(err, CheckpointError::Corrupt { step: None, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("its head"), "{err}");
}

#[tokio::test]
async fn an_agent_with_a_large_skills_catalog_stores_it_once() {
    let backend = Arc::new(StateBackend::new());
    for i in 0..600 {
        let name = format!("skill-{i:04}");
        backend
            .write(
                &VirtualPath::parse(&format!("/skills/{name}/SKILL.md")).unwrap(),
                format!("---\nname: {name}\ndescription: Does task number {i} for the team, carefully.\n---\n# {name}\n")
                    .into(),
                WriteMode::Overwrite,
            )
            .await
            .unwrap();
    }
    let spy = Spy::new(Arc::new(StateBackend::new()));
    let store: Arc<dyn Backend> = spy.clone();
    let cp = Arc::new(BackendCheckpointer::new(store.clone(), root()).unwrap());
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([ToolCall::new("c1", "ls", json!({"path": "/skills"}))])
            .then_text("first")
            .then_text("second"),
    );
    let agent = Agent::builder(model.clone())
        .middleware(FilesystemMiddleware::new(backend.clone()))
        .middleware(SkillsMiddleware::new(vec![
            SkillSource::new(backend.clone(), "/skills").unwrap(),
        ]))
        .checkpointer(cp.clone())
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("hi")).await.unwrap();
    let thread = out.thread_id.clone();
    let first = writes(&spy.take());
    let blobs: Vec<u64> = first
        .iter()
        .filter(|(k, _)| k == "blob")
        .map(|(_, b)| *b)
        .collect();
    // The catalog and the rendered section, once each.
    assert_eq!(blobs.len(), 2, "{first:?}");
    assert!(blobs[0] > 64 * 1024 && blobs[1] > 4 * 1024, "{first:?}");
    // After the first step, no step carries the catalog.
    let steps: Vec<u64> = first
        .iter()
        .filter(|(k, _)| k == "step")
        .map(|(_, b)| *b)
        .collect();
    assert!(steps.len() >= 3, "{first:?}");
    assert!(steps.iter().all(|b| *b < 48 * 1024), "{steps:?}");

    // Resume: the catalog comes back from the blob; the section is byte-identical; no new blob.
    agent
        .run(RunInput::human("again").thread(thread.clone()))
        .await
        .unwrap();
    let section = |r: &ModelRequest| {
        r.system
            .iter()
            .find(|b| b.source.as_deref() == Some("skills"))
            .map(|b| b.text.clone())
    };
    let requests = model.requests();
    assert!(section(&requests[0]).is_some());
    assert_eq!(section(&requests[0]), section(&requests[2]));
    let again = writes(&spy.take());
    assert!(
        !again.iter().any(|(k, _)| k == "blob"),
        "the catalog did not change: {again:?}"
    );
}

/// `load` remembers the thread so its next save is a delta written without reading anything back;
/// `peek` (what `Agent::state` uses) reads the same checkpoint but remembers nothing, so reading
/// many threads does not grow the process by their states: the next save reads the head again.
#[tokio::test]
async fn peeking_returns_the_checkpoint_without_remembering_the_thread() {
    let spy = Spy::new(Arc::new(StateBackend::new()));
    let backend: Arc<dyn Backend> = spy.clone();
    let thread = ThreadId::new("peeked").unwrap();
    let mut state = State::with_messages(vec![Message::human("first")]);
    state.set(&NOTES, vec!["kept".into()]);
    let writer = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    writer
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await
        .unwrap();

    let reads_before_saving = |cp: BackendCheckpointer, how: &'static str| {
        let spy = spy.clone();
        let thread = thread.clone();
        async move {
            let stored = match how {
                "peek" => cp.peek(&thread).await,
                _ => cp.load(&thread).await,
            }
            .unwrap()
            .unwrap();
            assert_eq!(
                stored.checkpoint.state.get(&NOTES).unwrap(),
                Some(&vec!["kept".to_owned()])
            );
            let mut next = stored.checkpoint.state.clone();
            next.messages.push(Message::ai("more"));
            spy.take();
            let version = cp
                .save(
                    Checkpoint::new(thread.clone(), stored.checkpoint.seq + 1, next),
                    Some(&stored.version),
                )
                .await
                .unwrap();
            let reads = spy.take().iter().filter(|o| o.op == "read").count();
            (reads, version)
        }
    };
    // A fresh checkpointer each time, so only what `load` / `peek` remembered counts.
    let (after_load, _) =
        reads_before_saving(BackendCheckpointer::new(backend.clone(), root()).unwrap(), "load").await;
    assert_eq!(after_load, 0, "a loaded thread is saved without reading it back");
    let (after_peek, _) =
        reads_before_saving(BackendCheckpointer::new(backend.clone(), root()).unwrap(), "peek").await;
    assert!(
        after_peek > 0,
        "a peeked thread is read again before its next save"
    );
}
