//! `BackendCheckpointer` snapshots: every 32nd step of a thread is a base step whose messages are
//! references to chunks of 64 messages (written once by content), so loading a long thread reads
//! its head, at most 32 steps and its chunks, without listing the log, and the bytes written over
//! a thread stay linear in its length. Heads of older builds (no chain) still load, by listing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use trellis_middleware::backend::{Backend, BackendExt, StateBackend, VirtualPath, WriteMode};
use trellis_middleware::runtime::checkpoint::{Checkpoint, CheckpointError};
use trellis_middleware::*;

use crate::common::Spy;

/// Steps per snapshot and messages per chunk (the store's constants).
const SNAPSHOT_STEPS: usize = 32;
const CHUNK_MESSAGES: usize = 64;

static NOTES: Slot<Vec<String>> = Slot::public("notes");

fn root() -> VirtualPath {
    VirtualPath::parse("/threads").unwrap()
}

/// A thread of `steps` checkpoints, each adding an assistant reply and a tool-sized result and
/// every tenth changing a slot. Returns the final state.
async fn long_thread(cp: &BackendCheckpointer, thread: &ThreadId, steps: usize) -> State {
    let mut state = State::with_messages(vec![Message::human("start")]);
    let mut version = None;
    for i in 0..steps {
        if i > 0 {
            state
                .messages
                .push(Message::ai(format!("step {i}: a reply of ordinary length.")));
            state
                .messages
                .push(Message::human(format!("result {i}: {}", "x".repeat(200))));
        }
        if i % 10 == 0 {
            state.set(&NOTES, vec![format!("note {i}")]);
        }
        let v = cp
            .save(
                Checkpoint::new(thread.clone(), i as u64, state.clone()),
                version.as_ref(),
            )
            .await
            .unwrap();
        version = Some(v);
    }
    state
}

fn log_names(ops: &[crate::common::SpyOp], kind: &str) -> Vec<String> {
    ops.iter()
        .filter(|o| o.op == kind)
        .map(|o| o.path.clone())
        .collect()
}

#[tokio::test]
async fn a_long_thread_loads_from_its_last_snapshot_without_listing() {
    let spy = Spy::new(Arc::new(StateBackend::new()));
    let backend: Arc<dyn Backend> = spy.clone();
    let cp = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let thread = ThreadId::new("long").unwrap();
    let steps = 200;
    let state = long_thread(&cp, &thread, steps).await;
    // Bytes written by the saves of the first and of the second half of the thread.
    let ops = spy.take();
    let halves: Vec<u64> = {
        let mut halves = vec![0, 0];
        let mut saves = 0;
        for o in ops.iter().filter(|o| o.op == "write") {
            halves[usize::from(saves >= steps / 2)] += o.bytes;
            if o.path.ends_with("/head.json") {
                saves += 1;
            }
        }
        halves
    };

    // Base steps: the first and every 32nd after it.
    let log = backend
        .list_files(&VirtualPath::parse("/threads/long/log").unwrap(), 10_000)
        .await
        .unwrap();
    let mut bases: Vec<u64> = log
        .files
        .iter()
        .filter(|f| f.path.as_str().ends_with(".base.json"))
        .map(|f| f.path.file_name().unwrap()[..12].parse().unwrap())
        .collect();
    bases.sort();
    let expected: Vec<u64> = (0..steps as u64).step_by(SNAPSHOT_STEPS).collect();
    assert_eq!(bases, expected);
    spy.take();

    // A cold process: head, the steps since the last snapshot, its chunks; no listing.
    let cold = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let loaded = cold.load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.checkpoint.seq, steps as u64 - 1);
    assert_eq!(loaded.checkpoint.state.messages, state.messages);
    assert_eq!(
        *loaded.checkpoint.state.get(&NOTES).unwrap().unwrap(),
        ["note 190".to_owned()]
    );
    let ops = spy.take();
    assert!(log_names(&ops, "ls").is_empty(), "{ops:?}");
    let reads = log_names(&ops, "read");
    let step_reads = reads.iter().filter(|p| p.contains("/log/")).count();
    let chunk_reads = reads.iter().filter(|p| p.contains("/blobs/")).count();
    let last_base = *bases.last().unwrap() as usize;
    assert_eq!(step_reads, steps - last_base, "{reads:?}");
    let messages_at_base = 1 + 2 * last_base;
    assert_eq!(chunk_reads, messages_at_base / CHUNK_MESSAGES, "{reads:?}");
    assert_eq!(reads.len(), 1 + step_reads + chunk_reads, "{reads:?}");

    // Linear bytes: every message is written in its step and once in a chunk, plus the inline
    // tails of the snapshots, so the second half of the thread costs about what the first did
    // (whole-state snapshots would cost three times as much).
    assert!(
        halves[1] * 10 < halves[0] * 13,
        "bytes written per half of the thread: {halves:?}"
    );

    // The cold process carries the thread on from its snapshot: its next steps are deltas, and
    // the next snapshot reuses the chunks already stored.
    let mut next = loaded.checkpoint.state.clone();
    let mut version = loaded.version;
    for i in steps..last_base + SNAPSHOT_STEPS + 1 {
        next.messages.push(Message::ai(format!("more {i}")));
        version = cold
            .save(
                Checkpoint::new(thread.clone(), i as u64, next.clone()),
                Some(&version),
            )
            .await
            .unwrap();
    }
    let ops = spy.take();
    let blob_writes = log_names(&ops, "write")
        .into_iter()
        .filter(|p| p.contains("/blobs/"))
        .count();
    let chunks_before = messages_at_base / CHUNK_MESSAGES;
    assert_eq!(
        blob_writes,
        next.messages.len() / CHUNK_MESSAGES - chunks_before,
        "only new chunks are written: {ops:?}"
    );
    let again = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let reloaded = again.load(&thread).await.unwrap().unwrap();
    assert_eq!(reloaded.checkpoint.state.messages, next.messages);
    assert_eq!(reloaded.version, version);

    // History and load_at still reach every step, snapshots or not.
    let history = again.history(&thread).await.unwrap();
    assert_eq!(history.len(), last_base + SNAPSHOT_STEPS + 1);
    let at = again.load_at(&thread, 100).await.unwrap().unwrap();
    assert_eq!(at.state.messages.len(), 1 + 2 * 100);
    assert_eq!(
        at.state.messages.get(200).unwrap().text(),
        format!("result 100: {}", "x".repeat(200))
    );

    // Garbage collection keeps the chunks committed steps name.
    let report = again
        .collect_garbage(&thread, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(report.blobs, 0);
    let fresh = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    assert_eq!(
        fresh
            .load(&thread)
            .await
            .unwrap()
            .unwrap()
            .checkpoint
            .state
            .messages,
        next.messages
    );
}

#[tokio::test]
async fn a_head_without_a_chain_loads_by_listing_and_a_damaged_chain_is_an_error() {
    let spy = Spy::new(Arc::new(StateBackend::new()));
    let backend: Arc<dyn Backend> = spy.clone();
    let cp = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let thread = ThreadId::new("old-head").unwrap();
    let state = long_thread(&cp, &thread, 40).await;
    let head_path = VirtualPath::parse("/threads/old-head/head.json").unwrap();
    let head: serde_json::Value =
        serde_json::from_slice(&backend.read_bytes(&head_path).await.unwrap()).unwrap();
    // The steps since the last snapshot (32), before the head (39).
    let nonces = head["since_base"]["nonces"].as_array().unwrap().clone();
    assert_eq!(nonces.len(), 39 - SNAPSHOT_STEPS);

    // As an older build wrote it: no chain.
    let mut old = head.clone();
    old.as_object_mut().unwrap().remove("since_base");
    backend
        .write(
            &head_path,
            serde_json::to_vec(&old).unwrap().into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    spy.take();
    let cold = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let loaded = cold.load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.checkpoint.state.messages, state.messages);
    assert_eq!(log_names(&spy.take(), "ls"), ["/threads/old-head/log"]);

    // A chain that does not lead to the head's step, one step short, or not nonces at all.
    for bad in [
        serde_json::json!({"nonces": ["aaaaaaaaaaaaaaaa"]}),
        serde_json::json!({"nonces": nonces[1..]}),
        serde_json::json!({"nonces": ["not a nonce"]}),
    ] {
        let mut damaged = head.clone();
        damaged["since_base"] = bad.clone();
        backend
            .write(
                &head_path,
                serde_json::to_vec(&damaged).unwrap().into(),
                WriteMode::Overwrite,
            )
            .await
            .unwrap();
        let cold = BackendCheckpointer::new(backend.clone(), root()).unwrap();
        match cold.load(&thread).await {
            Err(CheckpointError::Corrupt { thread_id, .. }) => assert_eq!(thread_id, thread),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

/// In the one-object-per-step layout on local disk, the head is a second name of the latest step
/// object (no file is created or freed to move it), and a cold process loads from it without
/// listing the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_local_disk_the_head_is_a_link_to_the_latest_step() {
    use std::os::unix::fs::MetadataExt;
    let disk = tempfile::tempdir().unwrap();
    let local: Arc<dyn Backend> =
        Arc::new(trellis_middleware::backend::FilesystemBackend::new(disk.path()).unwrap());
    let spy = Spy::new(local);
    let backend: Arc<dyn Backend> = spy.clone();
    let cp = BackendCheckpointer::new(backend.clone(), root())
        .unwrap()
        .one_object_per_step();
    let thread = ThreadId::new("linked").unwrap();
    let state = long_thread(&cp, &thread, 40).await;
    let ops = spy.take();
    assert_eq!(log_names(&ops, "link").len(), 40, "every head move is a link");
    assert!(
        !log_names(&ops, "write").iter().any(|p| p.ends_with("/head.json")),
        "no head is written"
    );
    let dir = disk.path().join("threads/linked");
    let mut steps: Vec<std::path::PathBuf> = std::fs::read_dir(dir.join("log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    steps.sort();
    assert_eq!(steps.len(), 40, "no temporary files are left: {steps:?}");
    let ino = |p: &std::path::Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&dir.join("head.json")), ino(steps.last().unwrap()));

    let cold = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let loaded = cold.load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.checkpoint.seq, 39);
    assert_eq!(loaded.checkpoint.state.messages, state.messages);
    assert!(log_names(&spy.take(), "ls").is_empty());

    // A stale writer still conflicts on the linked head, and the winner's step stays the head.
    let mut next = loaded.checkpoint.state.clone();
    next.messages.push(Message::ai("winner"));
    let won = cold
        .save(
            Checkpoint::new(thread.clone(), 40, next.clone()),
            Some(&loaded.version),
        )
        .await
        .unwrap();
    let mut other = loaded.checkpoint.state.clone();
    other.messages.push(Message::ai("loser"));
    let lost = cp
        .save(Checkpoint::new(thread.clone(), 40, other), Some(&loaded.version))
        .await;
    assert!(matches!(lost, Err(CheckpointError::Conflict { .. })), "{lost:?}");
    let fresh = BackendCheckpointer::new(backend.clone(), root()).unwrap();
    let now = fresh.load(&thread).await.unwrap().unwrap();
    assert_eq!(now.version, won);
    assert_eq!(now.checkpoint.state.messages, next.messages);
}
