//! What a power loss leaves of a thread on local disk, and what a load makes of it, for threads
//! kept as one object per step (the layout of earlier builds, still read and written); the
//! one-file layout of new threads is tested in `one_file.rs`, a blob cut short in both.
//!
//! Nothing is written out before a save returns, so after a power loss the newest files of a
//! thread may keep their names but lose some or all of their bytes. The tests cut files short the
//! way that happens (the head and the newest steps emptied or truncated, a new blob emptied) and
//! check that a load goes back to the newest whole step, that the thread carries on from there,
//! and that damage of any other kind is still an error. Also what a `kill -9` in the middle of
//! moving the head leaves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use trellis_middleware::backend::{Backend, FilesystemBackend, VirtualPath};
use trellis_middleware::runtime::checkpoint::{Checkpoint, CheckpointError, CheckpointVersion};
use trellis_middleware::*;

/// A slot value with a large part stored once, as a blob, by content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Catalog {
    #[serde(serialize_with = "trellis_middleware::runtime::checkpoint::serialize_by_content")]
    skills: Arc<Vec<String>>,
}

pub(super) static CATALOG: Slot<Catalog> = Slot::private("_catalog");

pub(super) struct Disk {
    dir: tempfile::TempDir,
    backend: Arc<dyn Backend>,
    one_file: bool,
}

impl Disk {
    /// Threads kept as one object per step.
    pub(super) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
        Self {
            dir,
            backend,
            one_file: false,
        }
    }

    /// New threads kept in one file (the default on local disk).
    pub(super) fn one_file() -> Self {
        Self {
            one_file: true,
            ..Self::new()
        }
    }

    /// A checkpointer as a process started after the power loss has it: nothing cached.
    pub(super) fn cold(&self) -> BackendCheckpointer {
        let cp = self.cold_one_file();
        if self.one_file {
            cp
        } else {
            cp.one_object_per_step()
        }
    }

    /// The store.
    pub(super) fn backend(&self) -> Arc<dyn Backend> {
        self.backend.clone()
    }

    /// A checkpointer that keeps new threads in one file, whichever layout this disk's have.
    pub(super) fn cold_one_file(&self) -> BackendCheckpointer {
        BackendCheckpointer::new(self.backend.clone(), VirtualPath::parse("/threads").unwrap()).unwrap()
    }

    pub(super) fn thread_dir(&self, thread: &str) -> PathBuf {
        self.dir.path().join("threads").join(thread)
    }

    /// The step files, oldest first.
    fn steps(&self, thread: &str) -> Vec<PathBuf> {
        let mut steps: Vec<PathBuf> = std::fs::read_dir(self.thread_dir(thread).join("log"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        steps.sort();
        steps
    }

    pub(super) fn blobs(&self, thread: &str) -> Vec<PathBuf> {
        std::fs::read_dir(self.thread_dir(thread).join("blobs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }
}

pub(super) fn catalog(skills: &[&str]) -> Catalog {
    let long = |s: &&str| {
        format!(
            "{s}: {}",
            "a skill's description, long enough to be kept apart ".repeat(40)
        )
    };
    Catalog {
        skills: Arc::new(skills.iter().map(long).collect()),
    }
}

/// The numbers of the thread's checkpoints, as a fresh process lists them.
pub(super) async fn history(disk: &Disk, thread: &ThreadId) -> Vec<u64> {
    let listed = disk.cold().history(thread).await.unwrap();
    listed.iter().map(|h| h.seq).collect()
}

/// Change the file at `path` in place with `change`, then put its modification time back: a
/// power loss keeps a file's name and times (journaled) while losing data not yet written out.
pub(super) fn in_place(path: &Path, change: impl FnOnce(&mut std::fs::File)) {
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let modified = file.metadata().unwrap().modified().unwrap();
    change(&mut file);
    file.set_modified(modified).unwrap();
}

/// Keep only the first `len` bytes of `path`, as a power loss can leave it.
pub(super) fn cut(path: &Path, len: u64) {
    in_place(path, |file| file.set_len(len).unwrap());
}

/// Saves steps 0 to 5 of `thread`: a message each, the catalog changed at step 5 (a new blob).
/// Returns the state at each step and the last version.
pub(super) async fn six_steps(
    cp: &BackendCheckpointer,
    thread: &ThreadId,
) -> (Vec<State>, CheckpointVersion) {
    let mut state = State::with_messages(vec![Message::human("hi")]);
    state.set(&CATALOG, catalog(&["one"]));
    let mut states = vec![state.clone()];
    let mut version = cp
        .save(Checkpoint::new(thread.clone(), 0, state.clone()), None)
        .await
        .unwrap();
    for seq in 1..6 {
        state.messages.push(Message::ai(format!("step {seq}")));
        if seq == 5 {
            state.set(&CATALOG, catalog(&["one", "two"]));
        }
        version = cp
            .save(
                Checkpoint::new(thread.clone(), seq, state.clone()),
                Some(&version),
            )
            .await
            .unwrap();
        states.push(state.clone());
    }
    (states, version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_head_and_newest_steps_load_as_the_newest_whole_step() {
    let disk = Disk::new();
    let thread = ThreadId::new("lost-power").unwrap();
    let (states, _) = six_steps(&disk.cold(), &thread).await;
    let steps = disk.steps("lost-power");
    assert_eq!(steps.len(), 6);
    let head = disk.thread_dir("lost-power").join("head.json");
    let names: Vec<String> = std::fs::read_dir(disk.thread_dir("lost-power"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| ["head.json", "log", "blobs"].contains(&n.as_str())),
        "moving the head leaves no temporary name: {names:?}"
    );

    // Steps 4 and 5 lost their bytes; the head is step 5's second name, so it is empty too.
    cut(&steps[5], 0);
    cut(&steps[4], 0);
    assert_eq!(std::fs::metadata(&head).unwrap().len(), 0);
    let loaded = disk.cold().load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.checkpoint.seq, 3);
    assert_eq!(loaded.checkpoint.state.messages, states[3].messages);
    assert_eq!(
        loaded.checkpoint.state.get(&CATALOG).unwrap(),
        Some(&catalog(&["one"]))
    );

    // Its history ends there too, until the next save.
    assert_eq!(history(&disk, &thread).await, [0, 1, 2, 3]);

    // The thread carries on from step 3 at the head's version; the lost steps are passed over.
    let cp = disk.cold();
    let loaded = cp.load(&thread).await.unwrap().unwrap();
    let mut next = loaded.checkpoint.state.clone();
    next.messages.push(Message::ai("after the power came back"));
    let version = cp
        .save(
            Checkpoint::new(thread.clone(), 4, next.clone()),
            Some(&loaded.version),
        )
        .await
        .unwrap();
    let again = disk.cold().load(&thread).await.unwrap().unwrap();
    assert_eq!(again.version, version);
    assert_eq!(again.checkpoint.seq, 4);
    assert_eq!(again.checkpoint.state.messages, next.messages);
    assert_eq!(history(&disk, &thread).await, [0, 1, 2, 3, 4]);

    // A stale writer of the lost step 5 still conflicts.
    let mut stale = states[5].clone();
    stale.messages.push(Message::ai("stale"));
    let err = disk
        .cold()
        .save(Checkpoint::new(thread.clone(), 6, stale), Some(&loaded.version))
        .await
        .unwrap_err();
    assert!(matches!(err, CheckpointError::Conflict { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_blob_is_passed_over_then_written_again_whole() {
    for disk in [Disk::new(), Disk::one_file()] {
        emptied_blob(disk).await;
    }
}

async fn emptied_blob(disk: Disk) {
    let thread = ThreadId::new("lost-blob").unwrap();
    let (states, _) = six_steps(&disk.cold(), &thread).await;
    let blob_len = |blob: &Path| std::fs::metadata(blob).unwrap().len();
    let mut blobs = disk.blobs("lost-blob");
    assert_eq!(blobs.len(), 2, "one catalog blob per catalog: {blobs:?}");
    // The newer blob (step 5's catalog) is the longer one.
    blobs.sort_by_key(|b| blob_len(b));
    let (older, newer) = (blobs[0].clone(), blobs[1].clone());
    let whole = blob_len(&newer);
    cut(&newer, 0);

    let cp = disk.cold();
    let loaded = cp.load(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.checkpoint.seq, 4, "step 5 needs the emptied blob");
    assert_eq!(loaded.checkpoint.state.messages, states[4].messages);

    // The run does step 5 again: the same catalog, so the same blob, written whole this time.
    let version = cp
        .save(
            Checkpoint::new(thread.clone(), 5, states[5].clone()),
            Some(&loaded.version),
        )
        .await
        .unwrap();
    assert_eq!(blob_len(&newer), whole);
    let again = disk.cold().load(&thread).await.unwrap().unwrap();
    assert_eq!((again.checkpoint.seq, again.version), (5, version));
    assert_eq!(
        again.checkpoint.state.get(&CATALOG).unwrap(),
        Some(&catalog(&["one", "two"]))
    );

    // With the blob every step needs emptied, no step is whole: a typed error, not a guess.
    cut(&older, 0);
    cut(&newer, 0);
    let err = disk.cold().load(&thread).await.unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Unfinished { thread_id, step: Some(_), .. } if thread_id == &thread),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("lost-blob") && err.to_string().contains("ends early"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_cut_mid_way_is_passed_over_and_other_damage_is_not() {
    let disk = Disk::new();
    let thread = ThreadId::new("torn").unwrap();
    let (states, _) = six_steps(&disk.cold(), &thread).await;
    let steps = disk.steps("torn");
    let good = std::fs::read(&steps[5]).unwrap();

    // Kept its header line and part of its body; then cut within the header line.
    for len in [good.len() - 10, 20] {
        cut(&steps[5], len as u64);
        let loaded = disk.cold().load(&thread).await.unwrap().unwrap();
        assert_eq!(loaded.checkpoint.seq, 4, "cut to {len} bytes");
        assert_eq!(loaded.checkpoint.state.messages, states[4].messages);
    }
    // Cut within its header: the history ends at step 4 as well.
    assert_eq!(history(&disk, &thread).await, [0, 1, 2, 3, 4]);

    // Whole but wrong: not what a power loss leaves, so not passed over. (Written in place, so
    // the head, a second name of the same file, reads the same bytes.)
    let mut garbled = good.clone();
    let end = garbled.len() - 1;
    garbled[end - 1] = b'!';
    in_place(&steps[5], |file| {
        std::io::Write::write_all(file, &garbled).unwrap()
    });
    let err = disk.cold().load(&thread).await.unwrap_err();
    assert!(
        matches!(err, CheckpointError::Corrupt { step: Some(5), .. }),
        "{err:?}"
    );
}

/// A process killed between exchanging the head's names and removing the old one leaves a
/// temporary name for the previous step in the thread's directory; nothing reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_left_by_a_killed_head_move_changes_nothing() {
    let disk = Disk::new();
    let thread = ThreadId::new("killed-mid-move").unwrap();
    let (states, version) = six_steps(&disk.cold(), &thread).await;
    let steps = disk.steps("killed-mid-move");
    let dir = disk.thread_dir("killed-mid-move");
    std::fs::hard_link(&steps[4], dir.join(".head.json.trellis-tmp-1-1")).unwrap();

    let cp = disk.cold();
    let loaded = cp.load(&thread).await.unwrap().unwrap();
    assert_eq!((loaded.checkpoint.seq, &loaded.version), (5, &version));
    assert_eq!(loaded.checkpoint.state.messages, states[5].messages);
    let mut next = states[5].clone();
    next.messages.push(Message::ai("step 6"));
    let saved = cp
        .save(Checkpoint::new(thread.clone(), 6, next.clone()), Some(&version))
        .await
        .unwrap();
    let again = disk.cold().load(&thread).await.unwrap().unwrap();
    assert_eq!((again.checkpoint.seq, again.version), (6, saved));
    assert_eq!(again.checkpoint.state.messages, next.messages);
    assert_eq!(history(&disk, &thread).await, [0, 1, 2, 3, 4, 5, 6]);
}
