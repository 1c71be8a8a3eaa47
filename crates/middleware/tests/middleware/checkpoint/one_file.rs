//! New threads on local disk: every step appended to one file, `steps.log` (see
//! `checkpoint/appended.rs`). A save changes that file in place and no directory; a load, history,
//! `load_at`, a fork, garbage collection and deletion read it back; a killed append and a power
//! loss leave a cut record that a load passes over and the next save cuts off; a record changed
//! in place is an error; threads of the one-object-per-step layout keep theirs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

use trellis_middleware::backend::{
    Backend, ByteRange, Entry, ReadOutput, VirtualPath, WriteMode, WriteOutcome,
};
use trellis_middleware::runtime::checkpoint::{Checkpoint, CheckpointError};
use trellis_middleware::*;

use super::power_loss::{CATALOG, Disk, catalog, cut, history, in_place, six_steps};

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_is_one_file_changed_in_place_and_read_back_whole() {
    let disk = Disk::one_file();
    let thread = ThreadId::new("one-file").unwrap();
    let cp = disk.cold();
    let mut state = State::with_messages(vec![Message::human("hi")]);
    state.set(&CATALOG, catalog(&["one"]));
    let mut version = cp
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await
        .unwrap();
    let dir = disk.thread_dir("one-file");
    let log = dir.join("steps.log");
    let (ino, dir_mtime) = (
        std::fs::metadata(&log).unwrap().ino(),
        std::fs::metadata(&dir).unwrap().modified().unwrap(),
    );
    // 40 steps: a base step every 32, so the load replays from step 32.
    let mut states = vec![state.clone()];
    for seq in 1..40 {
        state.messages.push(Message::ai(format!("step {seq}")));
        version = cp
            .save(
                Checkpoint::new(thread.clone(), seq, state.clone()),
                Some(&version),
            )
            .await
            .unwrap();
        states.push(state.clone());
    }
    assert_eq!(
        names(&dir),
        ["blobs", "steps.log"],
        "no head object, no step objects"
    );
    assert_eq!(
        std::fs::metadata(&log).unwrap().ino(),
        ino,
        "the same file throughout"
    );
    assert_eq!(
        std::fs::metadata(&dir).unwrap().modified().unwrap(),
        dir_mtime,
        "no save after the first changed the thread's directory"
    );

    let cold = disk.cold();
    let loaded = cold.load(&thread).await.unwrap().unwrap();
    assert_eq!((loaded.checkpoint.seq, &loaded.version), (39, &version));
    assert_eq!(loaded.checkpoint.state.messages, state.messages);
    assert_eq!(
        loaded.checkpoint.state.get(&CATALOG).unwrap(),
        Some(&catalog(&["one"]))
    );
    assert_eq!(history(&disk, &thread).await, (0..40).collect::<Vec<u64>>());
    for seq in [0, 5, 31, 32, 39] {
        let at = cold.load_at(&thread, seq).await.unwrap().unwrap();
        assert_eq!(at.state.messages, states[seq as usize].messages, "load_at({seq})");
    }
    assert!(cold.load_at(&thread, 40).await.unwrap().is_none());
    assert_eq!(cold.threads().await.unwrap(), std::slice::from_ref(&thread));

    // Two processes saving on one version: exactly one appends.
    let (a, b) = (disk.cold(), disk.cold());
    let (va, vb) = (
        a.load(&thread).await.unwrap().unwrap().version,
        b.load(&thread).await.unwrap().unwrap().version,
    );
    let mut next = state.clone();
    next.messages.push(Message::ai("a"));
    let won = a
        .save(Checkpoint::new(thread.clone(), 40, next.clone()), Some(&va))
        .await
        .unwrap();
    let mut other = state.clone();
    other.messages.push(Message::ai("b"));
    let lost = b
        .save(Checkpoint::new(thread.clone(), 40, other), Some(&vb))
        .await;
    assert!(matches!(lost, Err(CheckpointError::Conflict { .. })), "{lost:?}");
    let loaded = disk.cold().load(&thread).await.unwrap().unwrap();
    assert_eq!((loaded.checkpoint.seq, &loaded.version), (40, &won));
    assert_eq!(loaded.checkpoint.state.messages, next.messages);

    // A fork is a new file holding one base step.
    let fork = ThreadId::new("one-file-fork").unwrap();
    cold.fork(&thread, 5, &fork).await.unwrap();
    assert_eq!(names(&disk.thread_dir("one-file-fork")), ["blobs", "steps.log"]);
    let forked = disk.cold().load(&fork).await.unwrap().unwrap();
    assert_eq!(forked.checkpoint.state.messages, states[5].messages);
    assert!(matches!(
        cold.fork(&thread, 6, &fork).await,
        Err(CheckpointError::Conflict { .. })
    ));

    // Garbage: no step is ever off the chain; an unreferenced blob still goes.
    std::fs::write(dir.join("blobs").join(format!("{}.json", "0".repeat(64))), "{}").unwrap();
    let report = cold.collect_garbage(&thread, Duration::ZERO).await.unwrap();
    assert_eq!((report.steps, report.blobs), (0, 1));
    assert_eq!(disk.cold().load(&thread).await.unwrap().unwrap().version, won);

    cold.delete(&thread).await.unwrap();
    assert!(disk.cold().load(&thread).await.unwrap().is_none());
    assert_eq!(cold.threads().await.unwrap(), [fork]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_append_leaves_a_tail_that_loads_pass_over_and_the_next_save_cuts() {
    let disk = Disk::one_file();
    let thread = ThreadId::new("killed").unwrap();
    let (states, before) = six_steps(&disk.cold(), &thread).await;
    let log = disk.thread_dir("killed").join("steps.log");
    let whole = std::fs::read(&log).unwrap();
    // A record half written when the process was killed: the start of a step object, no trailer.
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    file.write_all(&whole[..whole.len() / 3]).unwrap();
    drop(file);

    let cp = disk.cold();
    let loaded = cp.load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.checkpoint.seq, 5);
    assert_eq!(loaded.checkpoint.state.messages, states[5].messages);
    assert_ne!(loaded.version, before, "the file changed, so its version did");
    assert_eq!(history(&disk, &thread).await, [0, 1, 2, 3, 4, 5]);

    // A writer holding the version from before the kill: the file changed since.
    let mut stale = states[5].clone();
    stale.messages.push(Message::ai("stale"));
    let err = disk
        .cold()
        .save(Checkpoint::new(thread.clone(), 6, stale), Some(&before))
        .await
        .unwrap_err();
    assert!(matches!(err, CheckpointError::Conflict { .. }), "{err:?}");

    // The next save cuts the half record and appends its own.
    let mut next = loaded.checkpoint.state.clone();
    next.messages.push(Message::ai("step 6"));
    let version = cp
        .save(
            Checkpoint::new(thread.clone(), 6, next.clone()),
            Some(&loaded.version),
        )
        .await
        .unwrap();
    let after = std::fs::read(&log).unwrap();
    assert_eq!(
        &after[..whole.len()],
        &whole[..],
        "the whole records stay as they were"
    );
    assert!(
        !String::from_utf8_lossy(&after[whole.len()..]).contains("\"seq\":0"),
        "the half record is gone"
    );
    let again = disk.cold().load(&thread).await.unwrap().unwrap();
    assert_eq!((again.checkpoint.seq, again.version), (6, version));
    assert_eq!(again.checkpoint.state.messages, next.messages);
    assert_eq!(history(&disk, &thread).await, [0, 1, 2, 3, 4, 5, 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_anywhere_in_the_newest_records_loads_the_newest_whole_one() {
    let disk = Disk::one_file();
    let thread = ThreadId::new("cut").unwrap();
    let cp = disk.cold();
    let (states, _) = six_steps(&cp, &thread).await;
    let log = disk.thread_dir("cut").join("steps.log");
    let whole = std::fs::read(&log).unwrap();
    // Where each record ends, from the trailers.
    let ends: Vec<usize> = whole
        .windows(7)
        .enumerate()
        .filter(|(_, w)| *w == b"\n#step ")
        .map(|(i, _)| i + 50)
        .collect();
    assert_eq!(ends.len(), 6);
    assert_eq!(*ends.last().unwrap(), whole.len());
    // A power loss can keep any prefix of what was appended in its last seconds.
    for len in (ends[3] + 1..whole.len()).step_by(7) {
        std::fs::write(&log, &whole).unwrap();
        cut(&log, len as u64);
        let expected = ends.iter().rposition(|e| *e <= len).unwrap();
        let loaded = disk.cold().load(&thread).await.unwrap().unwrap();
        assert_eq!(loaded.checkpoint.seq, expected as u64, "cut to {len} bytes");
        assert_eq!(loaded.checkpoint.state.messages, states[expected].messages);
    }

    // A file with no whole record left: a typed error.
    cut(&log, (ends[0] - 1) as u64);
    let err = disk.cold().load(&thread).await.unwrap_err();
    assert!(matches!(&err, CheckpointError::Unfinished { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_changed_in_place_is_corrupt_not_passed_over() {
    let disk = Disk::one_file();
    let thread = ThreadId::new("garbled").unwrap();
    six_steps(&disk.cold(), &thread).await;
    let log = disk.thread_dir("garbled").join("steps.log");
    let whole = std::fs::read(&log).unwrap();
    // A byte of step 2's message, well before the end.
    let at = String::from_utf8_lossy(&whole).find("step 2").unwrap();
    in_place(&log, |file| {
        use std::os::unix::fs::FileExt;
        file.write_all_at(b"X", at as u64).unwrap();
    });
    let err = disk.cold().load(&thread).await.unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Corrupt { thread_id, .. } if thread_id == &thread),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_of_the_one_object_per_step_layout_keeps_it() {
    let disk = Disk::new();
    let thread = ThreadId::new("earlier").unwrap();
    let (states, version) = six_steps(&disk.cold(), &thread).await;
    let dir = disk.thread_dir("earlier");

    // A checkpointer that puts new threads in one file reads it and saves it as it is.
    let cp = disk.cold_one_file();
    let loaded = cp.load(&thread).await.unwrap().unwrap();
    assert_eq!((loaded.checkpoint.seq, &loaded.version), (5, &version));
    let mut next = states[5].clone();
    next.messages.push(Message::ai("step 6"));
    cp.save(
        Checkpoint::new(thread.clone(), 6, next.clone()),
        Some(&loaded.version),
    )
    .await
    .unwrap();
    assert_eq!(names(&dir), ["blobs", "head.json", "log"]);
    assert_eq!(
        disk.cold()
            .load(&thread)
            .await
            .unwrap()
            .unwrap()
            .checkpoint
            .state
            .messages,
        next.messages
    );

    // Creating it as a new thread is a conflict, in either layout: it exists.
    let fresh = State::with_messages(vec![Message::human("again")]);
    let err = cp
        .save(Checkpoint::new(thread.clone(), 0, fresh), None)
        .await
        .unwrap_err();
    assert!(matches!(err, CheckpointError::Conflict { .. }), "{err:?}");
    assert!(!dir.join("steps.log").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_larger_than_the_tail_a_load_reads_first_load_whole() {
    let disk = Disk::one_file();
    let thread = ThreadId::new("large").unwrap();
    let cp = disk.cold();
    let mut state = State::with_messages(vec![Message::human("hi")]);
    let mut version = cp
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await
        .unwrap();
    // A reply of 1 MiB: its record is larger than the 256 KiB a load reads first.
    state.messages.push(Message::ai("x".repeat(1 << 20)));
    version = cp
        .save(Checkpoint::new(thread.clone(), 1, state.clone()), Some(&version))
        .await
        .unwrap();
    let loaded = disk.cold().load(&thread).await.unwrap().unwrap();
    assert_eq!((loaded.checkpoint.seq, &loaded.version), (1, &version));
    assert_eq!(loaded.checkpoint.state.messages, state.messages);

    // A small step after it: the tail holds the head, the chain reaches back past it.
    state.messages.push(Message::human("and a short one"));
    version = cp
        .save(Checkpoint::new(thread.clone(), 2, state.clone()), Some(&version))
        .await
        .unwrap();
    let loaded = disk.cold().load(&thread).await.unwrap().unwrap();
    assert_eq!((loaded.checkpoint.seq, &loaded.version), (2, &version));
    assert_eq!(loaded.checkpoint.state.messages, state.messages);
    assert_eq!(history(&disk, &thread).await, [0, 1, 2]);
}

/// A wrapper that does not forward `Backend::append`, as one written before it existed.
#[derive(Debug)]
struct NoAppend(Arc<dyn Backend>);

#[async_trait::async_trait]
impl Backend for NoAppend {
    fn capabilities(&self) -> trellis_middleware::backend::Capabilities {
        self.0.capabilities()
    }
    async fn ls(&self, dir: &VirtualPath) -> trellis_middleware::backend::Result<Vec<Entry>> {
        self.0.ls(dir).await
    }
    async fn stat(&self, path: &VirtualPath) -> trellis_middleware::backend::Result<Entry> {
        self.0.stat(path).await
    }
    async fn read(
        &self,
        path: &VirtualPath,
        range: Option<ByteRange>,
    ) -> trellis_middleware::backend::Result<ReadOutput> {
        self.0.read(path, range).await
    }
    async fn write(
        &self,
        path: &VirtualPath,
        data: bytes::Bytes,
        mode: WriteMode,
    ) -> trellis_middleware::backend::Result<WriteOutcome> {
        self.0.write(path, data, mode).await
    }
    async fn delete(&self, path: &VirtualPath) -> trellis_middleware::backend::Result<()> {
        self.0.delete(path).await
    }
}

/// A store that cannot append keeps new threads as one object per step. Reading never depends
/// on it: a thread another checkpointer kept in one file is read whole through a wrapper that
/// does not forward appends, and saving it there is a clear error that leaves the file as it was
/// (writing the step elsewhere would fork the thread).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_append_reads_one_file_threads_and_keeps_new_ones_as_objects() {
    let disk = Disk::one_file();
    let thread = ThreadId::new("appended").unwrap();
    let (states, _) = six_steps(&disk.cold(), &thread).await;
    let log = disk.thread_dir("appended").join("steps.log");
    let before = std::fs::read(&log).unwrap();

    let root = VirtualPath::parse("/threads").unwrap();
    let wrapped: Arc<dyn Backend> = Arc::new(NoAppend(disk.backend()));
    let cp = BackendCheckpointer::new(wrapped, root).unwrap();
    let loaded = cp.load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.checkpoint.seq, 5);
    assert_eq!(loaded.checkpoint.state.messages, states[5].messages);
    assert_eq!(cp.history(&thread).await.unwrap().len(), 6);
    let mut next = states[5].clone();
    next.messages.push(Message::ai("step 6"));
    let err = cp
        .save(Checkpoint::new(thread.clone(), 6, next), Some(&loaded.version))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Unsupported(m) if m.contains("appended") && m.contains("cannot append")),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&log).unwrap(), before);
    assert!(!disk.thread_dir("appended").join("head.json").exists());

    // A new thread through it: one object per step, as on any store that cannot append.
    let other = ThreadId::new("objects").unwrap();
    six_steps(&cp, &other).await;
    assert!(disk.thread_dir("objects").join("head.json").is_file());
    assert!(!disk.thread_dir("objects").join("steps.log").exists());
    assert_eq!(disk.cold().load(&other).await.unwrap().unwrap().checkpoint.seq, 5);
}
