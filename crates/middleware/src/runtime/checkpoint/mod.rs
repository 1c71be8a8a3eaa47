//! Threads and checkpoints: the [`Checkpointer`] trait, [`InMemoryCheckpointer`] and
//! [`BackendCheckpointer`] (any storage backend, object stores included).
//!
//! A checkpoint is written after every step of a run. Writes are version-checked: a run remembers
//! the version it loaded (or last wrote) and every save must name it, so two workers running one
//! thread can never overwrite each other. The second gets [`CheckpointError::Conflict`] and can
//! reload and retry. Earlier checkpoints stay: [`Checkpointer::history`] lists them,
//! [`Checkpointer::load_at`] reads one, [`Checkpointer::fork`] starts a new thread from one.
//! Within a step, the tool-call journal ([`Checkpointer::record_call`], see `journal.rs`) keeps
//! each call's result as it completes, so a run resumed after a crash re-runs only what has none.

mod appended;
mod backend;
mod blobs;
mod commit;
mod delta;
mod history;
mod journal;
mod latest;
mod legacy;
mod log_read;
mod memory;
mod record;
mod recover;
mod shared;
mod thread_cache;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use self::backend::BackendCheckpointer;
pub use self::history::GarbageReport;
pub use self::journal::{CallOutcome, CallRecord, SlotWrite};
pub use self::memory::InMemoryCheckpointer;
pub use self::record::ForkOrigin;
pub use self::shared::{TEXT_BY_CONTENT_BYTES, serialize_by_content, serialize_str_by_content};
use crate::backend::Backend;
use crate::runtime::context::ThreadId;
use crate::runtime::state::State;

/// The checkpoint format this crate writes: 3, the step log (`BackendCheckpointer` still reads the
/// single-file formats 1 and 2 of older builds).
pub const CHECKPOINT_FORMAT: u32 = 3;

/// A thread's saved state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format of the serialized checkpoint ([`CHECKPOINT_FORMAT`]).
    pub format: u32,
    /// The thread.
    pub thread_id: ThreadId,
    /// How many checkpoints of this thread came before this one (0 for the first).
    pub seq: u64,
    /// When it was saved, in milliseconds since the Unix epoch.
    pub saved_at_ms: u64,
    /// The state: messages and every slot, private ones included.
    pub state: State,
}

impl Checkpoint {
    /// A checkpoint of `state`, stamped now.
    pub fn new(thread_id: ThreadId, seq: u64, state: State) -> Self {
        Self {
            format: CHECKPOINT_FORMAT,
            thread_id,
            seq,
            saved_at_ms: Self::now_ms(),
            state,
        }
    }

    /// Milliseconds since the Unix epoch, now.
    pub(crate) fn now_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// One checkpoint in a thread's history ([`Checkpointer::history`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    /// Its number ([`Checkpoint::seq`]): what [`Checkpointer::load_at`] and
    /// [`Checkpointer::fork`] take.
    pub seq: u64,
    /// When it was saved, in milliseconds since the Unix epoch.
    pub saved_at_ms: u64,
    /// One line about what the step added (its last new message, or the slots it wrote).
    pub summary: String,
    /// Messages in the state at this checkpoint.
    pub messages: usize,
    /// Set on a fork's first checkpoint: where it was forked from.
    pub forked_from: Option<ForkOrigin>,
}

impl CheckpointInfo {
    /// An entry for `checkpoint` alone, summarized by its last message.
    pub fn latest(checkpoint: &Checkpoint) -> Self {
        let last: Vec<Arc<crate::runtime::message::Message>> = checkpoint
            .state
            .messages
            .shared()
            .last()
            .cloned()
            .into_iter()
            .collect();
        Self {
            seq: checkpoint.seq,
            saved_at_ms: checkpoint.saved_at_ms,
            summary: record::summarize(&last, &[], &[]),
            messages: checkpoint.state.messages.len(),
            forked_from: None,
        }
    }
}

/// An opaque version of a thread's latest checkpoint. A save that stores a checkpoint gives a new
/// one; a store may keep no checkpoint for a save that changes nothing since the version it was
/// given, and return that version (see [`BackendCheckpointer`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CheckpointVersion(String);

impl CheckpointVersion {
    /// Wrap a checkpointer-specific tag.
    pub fn new(tag: impl Into<String>) -> Self {
        Self(tag.into())
    }

    /// The tag.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CheckpointVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A loaded checkpoint and its version.
#[derive(Debug, Clone)]
pub struct StoredCheckpoint {
    /// The checkpoint.
    pub checkpoint: Checkpoint,
    /// Its version, to pass to the next [`Checkpointer::save`].
    pub version: CheckpointVersion,
}

/// Why a checkpoint could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// Another writer saved the thread since this one loaded it (or created it first).
    #[error("conflict on thread {thread_id}: another writer saved it first")]
    Conflict {
        /// The thread.
        thread_id: ThreadId,
    },
    /// The state could not be serialized.
    #[error("checkpoint of thread {thread_id} cannot be serialized: {source}")]
    Encode {
        /// The thread.
        thread_id: ThreadId,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The stored checkpoint could not be read back.
    #[error("checkpoint of thread {thread_id} is unreadable: {source}")]
    Decode {
        /// The thread.
        thread_id: ThreadId,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A stored step (or the head, `step: None`) is damaged or missing: never skipped.
    #[error("thread {thread_id} is corrupt at {}: {reason}", step_name(*.step))]
    Corrupt {
        /// The thread.
        thread_id: ThreadId,
        /// The checkpoint number, when the damage is in one step.
        step: Option<u64>,
        /// What is wrong.
        reason: String,
    },
    /// A stored step, the head or a blob ends early (empty, or its JSON stops short): a write the
    /// storage never finished, as a power loss leaves on a file system that allocates late.
    /// [`BackendCheckpointer`] loads go back to the newest step whose whole chain is there, so
    /// this reaches a caller only when none is.
    #[error("thread {thread_id} is cut short at {}: {what} ends early (a write that never finished)", step_name(*.step))]
    Unfinished {
        /// The thread.
        thread_id: ThreadId,
        /// The checkpoint number, when the damage is in one step.
        step: Option<u64>,
        /// Which object: "the head", "the step's body", "blob" and its hash, ….
        what: String,
    },
    /// The thread, or the checkpoint asked for, does not exist.
    #[error("thread {thread_id} has no checkpoint {seq}")]
    NoSuchCheckpoint {
        /// The thread.
        thread_id: ThreadId,
        /// The checkpoint asked for.
        seq: u64,
    },
    /// The stored checkpoint has a format this version does not read.
    #[error(
        "checkpoint of thread {thread_id} has format {format}; this build reads formats 1 to {CHECKPOINT_FORMAT}"
    )]
    UnsupportedFormat {
        /// The thread.
        thread_id: ThreadId,
        /// The format found.
        format: u32,
    },
    /// Listing the stored threads failed.
    #[error("listing the stored threads failed: {source}")]
    Listing {
        /// The cause.
        #[source]
        source: crate::backend::BackendError,
    },
    /// The storage failed.
    #[error("checkpoint storage failed for thread {thread_id}: {source}")]
    Storage {
        /// The thread.
        thread_id: ThreadId,
        /// The cause.
        #[source]
        source: crate::backend::BackendError,
    },
    /// The storage cannot do version-checked writes.
    #[error("checkpoint storage cannot be used: {0}")]
    Unsupported(String),
}

fn step_name(step: Option<u64>) -> String {
    step.map_or_else(|| "its head".to_owned(), |s| format!("step {s}"))
}

/// Where threads are saved.
///
/// Object-safe (`Arc<dyn Checkpointer>`). The contract, for every implementation:
/// * `save(cp, None)` creates the thread and fails with `Conflict` when it exists;
/// * `save(cp, Some(v))` adds a checkpoint after the current one only when its version is `v`, and
///   fails with `Conflict` otherwise (changed, or deleted);
/// * `load` returns the latest checkpoint with its version, or `None` for an unknown thread;
/// * `history`, `load_at` and `fork` see the checkpoints the implementation keeps (the defaults:
///   the latest only);
/// * when [`keeps_call_journal`](Checkpointer::keeps_call_journal) is true, a record given to
///   `record_call` is durable when it returns, replaces the call's earlier record, is returned by
///   `recorded_calls` until `forget_calls` or `delete`, and is never copied by `fork`.
#[async_trait]
pub trait Checkpointer: Send + Sync + Debug {
    /// The thread's latest checkpoint.
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<StoredCheckpoint>, CheckpointError>;

    /// The thread's latest checkpoint, read to look at (a caller's view of its state or of what it
    /// waits for), not to continue from: a store that remembers what it loaded so the next save
    /// can be a delta ([`BackendCheckpointer`]) does not remember it, so reading many threads
    /// does not grow the process by their states. The default is [`load`](Checkpointer::load).
    async fn peek(&self, thread_id: &ThreadId) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        self.load(thread_id).await
    }

    /// Save `checkpoint` as its thread's latest, if the thread's current version is `expected`.
    async fn save(
        &self,
        checkpoint: Checkpoint,
        expected: Option<&CheckpointVersion>,
    ) -> Result<CheckpointVersion, CheckpointError>;

    /// Forget the thread, its files included. Deleting an unknown thread is not an error.
    async fn delete(&self, thread_id: &ThreadId) -> Result<(), CheckpointError>;

    /// The thread's own file space: stored beside its checkpoints, so a resumed thread finds its
    /// files in any process that can load it, and removed by [`delete`](Checkpointer::delete).
    /// The agent loop hands it to the run as its [`ThreadFiles`](crate::tools::ThreadFiles).
    /// `None` (the default) when this checkpointer keeps no files.
    fn thread_files(&self, thread_id: &ThreadId) -> Option<Arc<dyn Backend>> {
        let _ = thread_id;
        None
    }

    /// True when this checkpointer keeps the tool-call journal ([`record_call`](Self::record_call)).
    /// The default, false, keeps none: a run resumed after a crash then cannot tell a call that
    /// never started from one that did, and treats every call without a result as possibly started.
    fn keeps_call_journal(&self) -> bool {
        false
    }

    /// Keep `record` in the thread's tool-call journal, replacing the call's earlier record;
    /// durable (as a checkpoint is) when this returns. The default keeps nothing.
    async fn record_call(&self, thread_id: &ThreadId, record: &CallRecord) -> Result<(), CheckpointError> {
        let _ = (thread_id, record);
        Ok(())
    }

    /// The journal's records of the calls `call_ids` of the thread: those it has, in any order.
    /// The default has none.
    async fn recorded_calls(
        &self,
        thread_id: &ThreadId,
        call_ids: &[String],
    ) -> Result<Vec<CallRecord>, CheckpointError> {
        let _ = (thread_id, call_ids);
        Ok(Vec::new())
    }

    /// Forget the journal's records of the calls `call_ids` (unknown ones are no error): the
    /// agent loop calls it once the checkpoint holding their results is saved.
    async fn forget_calls(&self, thread_id: &ThreadId, call_ids: &[String]) -> Result<(), CheckpointError> {
        let _ = (thread_id, call_ids);
        Ok(())
    }

    /// The thread's checkpoints, oldest first; empty for an unknown thread. The default lists the
    /// latest only.
    async fn history(&self, thread_id: &ThreadId) -> Result<Vec<CheckpointInfo>, CheckpointError> {
        let latest = self.load(thread_id).await?;
        Ok(latest
            .map(|s| CheckpointInfo::latest(&s.checkpoint))
            .into_iter()
            .collect())
    }

    /// The thread's checkpoint number `seq`, or `None` when it has none of that number. The default
    /// finds the latest only.
    async fn load_at(&self, thread_id: &ThreadId, seq: u64) -> Result<Option<Checkpoint>, CheckpointError> {
        let latest = self.load(thread_id).await?;
        Ok(latest.map(|s| s.checkpoint).filter(|c| c.seq == seq))
    }

    /// Start thread `to` from checkpoint `seq` of thread `from`: `to`'s first checkpoint has that
    /// state and number, and its file space starts as a copy of `from`'s files as they are now
    /// (files are not versioned with checkpoints). Fails with `Conflict` when `to` exists and with
    /// `NoSuchCheckpoint` when `from` has no checkpoint `seq`. The two threads share nothing
    /// afterwards: deleting one leaves the other whole. Returns `to`'s version.
    async fn fork(
        &self,
        from: &ThreadId,
        seq: u64,
        to: &ThreadId,
    ) -> Result<CheckpointVersion, CheckpointError> {
        fork_by_copy(self, from, seq, to).await
    }
}

/// The generic fork: read the checkpoint, save it as the new thread's first, copy the files.
async fn fork_by_copy<C: Checkpointer + ?Sized>(
    checkpointer: &C,
    from: &ThreadId,
    seq: u64,
    to: &ThreadId,
) -> Result<CheckpointVersion, CheckpointError> {
    let Some(checkpoint) = checkpointer.load_at(from, seq).await? else {
        return Err(CheckpointError::NoSuchCheckpoint {
            thread_id: from.clone(),
            seq,
        });
    };
    if checkpointer.load(to).await?.is_some() {
        return Err(CheckpointError::Conflict {
            thread_id: to.clone(),
        });
    }
    if let (Some(src), Some(dst)) = (checkpointer.thread_files(from), checkpointer.thread_files(to)) {
        copy_files(src.as_ref(), dst.as_ref())
            .await
            .map_err(|source| CheckpointError::Storage {
                thread_id: to.clone(),
                source,
            })?;
    }
    checkpointer
        .save(Checkpoint::new(to.clone(), seq, checkpoint.state), None)
        .await
}

/// Most files a fork copies.
const FORK_FILES: usize = 100_000;

/// Copy every file of `src` to the same path in `dst`.
async fn copy_files(src: &dyn Backend, dst: &dyn Backend) -> Result<(), crate::backend::BackendError> {
    use crate::backend::{BackendError, VirtualPath, WriteMode};
    let listing = src.list_files(&VirtualPath::root(), FORK_FILES).await?;
    if listing.truncated {
        // A fork copies at most FORK_FILES files.
        return Err(BackendError::TooLarge {
            path: "/".to_owned(),
            size: FORK_FILES as u64 + 1,
            limit: FORK_FILES as u64,
        });
    }
    for chunk in listing.files.chunks(64) {
        let paths: Vec<VirtualPath> = chunk.iter().map(|e| e.path.clone()).collect();
        for (path, read) in paths.iter().zip(src.read_many(&paths, None).await) {
            dst.write(path, read?.bytes, WriteMode::Overwrite).await?;
        }
    }
    Ok(())
}

/// Something that stands between a thread's runs and the thread's file space: given the space,
/// the backend the runs get instead (a server fencing writes by a lost lease, say). It must pass
/// reads through unchanged.
pub trait ThreadFilesGuard: Send + Sync + std::fmt::Debug {
    /// The backend `thread_id`'s runs use for its `files`.
    fn guard(&self, thread_id: &ThreadId, files: Arc<dyn Backend>) -> Arc<dyn Backend>;
}
