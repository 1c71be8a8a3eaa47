//! Large slot values are stored once, by content, beside the checkpoint (`BackendCheckpointer`):
//! saves whose large values did not change write only the small checkpoint file, loads put the
//! values back, a changed value gets a new blob, deleting the thread removes its blobs, and a
//! missing or forged blob reference is a typed error. Run on `StateBackend`, `memory://` and, under
//! `cargo xtask test`, the S3 emulator; plus a real agent whose skills catalog crosses the threshold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use trellis_middleware::backend::{
    Backend, BackendError, BackendExt, ObjectStoreBackend, StateBackend, StoreOptions, VirtualPath, WriteMode,
};
use trellis_middleware::*;

use crate::common::{Spy, SpyOp};

/// (is a blob, bytes) of each write.
fn kinds(ops: &[SpyOp]) -> Vec<(bool, u64)> {
    ops.iter()
        .filter(|o| o.op == "write")
        .map(|o| (o.path.contains("/blobs/"), o.bytes))
        .collect()
}

static BIG: Slot<String> = Slot::private("_big");
static NOTES: Slot<Vec<String>> = Slot::public("notes");

fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn root() -> VirtualPath {
    VirtualPath::parse("/threads").unwrap()
}

async fn blobs(backend: &dyn Backend, thread: &ThreadId) -> Vec<VirtualPath> {
    let dir = VirtualPath::parse(&format!("/threads/{thread}/blobs")).unwrap();
    match backend.list_files(&dir, 100).await {
        Ok(listing) => listing.files.into_iter().map(|f| f.path).collect(),
        Err(BackendError::NotFound { .. }) => Vec::new(),
        Err(e) => panic!("{e}"),
    }
}

async fn checkpoint_file(backend: &dyn Backend, cp: &BackendCheckpointer, thread: &ThreadId) -> Value {
    serde_json::from_slice(&backend.read_bytes(&cp.path(thread).unwrap()).await.unwrap()).unwrap()
}

async fn scenario(store: Arc<dyn Backend>) {
    let recorder = Spy::new(store);
    let backend: Arc<dyn Backend> = recorder.clone();
    let cp = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let thread = ThreadId::new(unique("blobs")).unwrap();
    let big = "skill catalog ".repeat(10_000); // 140 KB
    let mut state = State::with_messages(vec![Message::human("first")]);
    state.set(&BIG, big.clone());
    state.set(&NOTES, vec!["small".into()]);

    let v1 = cp
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await
        .unwrap();
    let file = checkpoint_file(backend.as_ref(), &cp, &thread).await;
    assert_eq!(file["format"], 2);
    assert!(file["state"]["private_slots"].get("_big").is_none(), "moved out");
    assert_eq!(
        file["state"]["slots"]["notes"],
        json!(["small"]),
        "small slots stay"
    );
    assert!(serde_json::to_vec(&file).unwrap().len() < 4096);
    let stored = blobs(backend.as_ref(), &thread).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let writes = kinds(&recorder.take());
    assert!(
        matches!(writes[..], [(true, blob), (false, file)] if blob > 140_000 && file < 4096),
        "the blob, then the checkpoint: {writes:?}"
    );
    let blob_version = backend.stat(&stored[0]).await.unwrap().version;

    let loaded = cp.load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.checkpoint.format, CHECKPOINT_FORMAT);
    assert_eq!(loaded.checkpoint.state.get(&BIG).unwrap(), Some(&big));
    assert_eq!(loaded.checkpoint.state.messages, state.messages);

    // The next step: same large value. Nothing new is stored, not even by a checkpointer that
    // starts cold (another process).
    state.messages.push(Message::ai("second"));
    let cold = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let v2 = cold
        .save(Checkpoint::new(thread.clone(), 1, state.clone()), Some(&v1))
        .await
        .unwrap();
    assert_eq!(blobs(backend.as_ref(), &thread).await, stored);
    assert_eq!(backend.stat(&stored[0]).await.unwrap().version, blob_version);
    let writes = kinds(&recorder.take());
    assert!(
        matches!(writes[..], [(false, file)] if file < 4096),
        "only the small checkpoint file: {writes:?}"
    );

    // The large value changes: a second blob, and loads see the new value.
    let changed = "reloaded catalog ".repeat(10_000);
    state.set(&BIG, changed.clone());
    let v3 = cp
        .save(Checkpoint::new(thread.clone(), 2, state.clone()), Some(&v2))
        .await
        .unwrap();
    assert_eq!(blobs(backend.as_ref(), &thread).await.len(), 2);
    let loaded = cold.load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.version, v3);
    assert_eq!(loaded.checkpoint.state.get(&BIG).unwrap(), Some(&changed));

    // Deleting the thread removes its blobs too.
    cp.delete(&thread).await.unwrap();
    assert!(cp.load(&thread).await.unwrap().is_none());
    assert!(blobs(backend.as_ref(), &thread).await.is_empty());
}

#[tokio::test]
async fn state_backend() {
    scenario(Arc::new(StateBackend::new())).await;
}

#[tokio::test]
async fn object_store_memory() {
    scenario(Arc::new(
        ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_emulator() {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    let (Some(endpoint), Some(bucket)) = (var("TRELLIS_S3_ENDPOINT"), var("TRELLIS_TEST_BUCKET")) else {
        assert_ne!(
            std::env::var("TRELLIS_EMULATORS").as_deref(),
            Ok("required"),
            "TRELLIS_EMULATORS=required, but TRELLIS_S3_ENDPOINT or TRELLIS_TEST_BUCKET is not set"
        );
        println!("skipped: S3 checkpoint blobs (run cargo xtask test)");
        return;
    };
    let options = StoreOptions::s3_compatible(&endpoint, "test", "test");
    let url = format!("s3://{bucket}/{}", unique("checkpoint-blobs"));
    scenario(Arc::new(ObjectStoreBackend::from_url(&url, &options).unwrap())).await;
}

#[tokio::test]
async fn a_missing_or_forged_blob_is_a_typed_error() {
    let backend = Arc::new(StateBackend::new());
    let cp = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let thread = ThreadId::new("broken").unwrap();
    let mut state = State::with_messages(vec![Message::human("hi")]);
    state.set(&BIG, "x".repeat(100_000));
    cp.save(Checkpoint::new(thread.clone(), 0, state), None)
        .await
        .unwrap();
    let file = checkpoint_file(backend.as_ref(), &cp, &thread).await;

    // The blob is gone: a storage error naming it.
    for blob in blobs(backend.as_ref(), &thread).await {
        backend.delete(&blob).await.unwrap();
    }
    let err = cp.load(&thread).await.unwrap_err();
    let CheckpointError::Storage { source, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(matches!(source, BackendError::NotFound { path } if path.contains("/threads/broken/blobs/")));

    // A reference that is not a content hash (here: a path) is refused before any read.
    let mut forged = file.clone();
    forged["blobs"] = json!({"/private_slots/_big": "../../../secrets"});
    backend
        .write(
            &cp.path(&thread).unwrap(),
            serde_json::to_vec(&forged).unwrap().into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    let err = cp.load(&thread).await.unwrap_err();
    assert!(matches!(err, CheckpointError::Decode { .. }), "{err:?}");
    assert!(err.to_string().contains("bad blob reference"), "{err}");
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
    let store = Arc::new(StateBackend::new());
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
    let file = checkpoint_file(store.as_ref(), &cp, &thread).await;
    assert_eq!(file["format"], 2);
    // The catalog's skill list moved out; the middleware's per-step bookkeeping stayed inline.
    let refs: Vec<&String> = file["blobs"].as_object().unwrap().keys().collect();
    assert_eq!(
        refs,
        ["/private_slots/_skills/catalog/skills"],
        "{}",
        file["blobs"]
    );
    assert!(file["state"]["private_slots"]["_skills"].get("scanned").is_some());
    // What stays is the conversation (with a 600-line `ls` result) and the rendered section.
    let size = serde_json::to_vec(&file).unwrap().len();
    let stored = blobs(store.as_ref(), &thread).await;
    assert_eq!(stored.len(), 1);
    let blob_size = store.stat(&stored[0]).await.unwrap().size;
    assert!(
        size < 48 * 1024 && blob_size > 64 * 1024,
        "checkpoint file {size} bytes, catalog blob {blob_size} bytes"
    );

    // Resume: the catalog comes back from the blob; the section is byte-identical.
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
    assert_eq!(
        blobs(store.as_ref(), &thread).await.len(),
        1,
        "the catalog did not change"
    );
}
