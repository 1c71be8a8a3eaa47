//! Threads and checkpoints: the [`Checkpointer`] trait, [`InMemoryCheckpointer`] and
//! [`BackendCheckpointer`] (any storage backend, object stores included).
//!
//! A thread's latest checkpoint is written after every step of a run. Writes are version-checked:
//! a run remembers the version it loaded (or last wrote) and every save must name it, so two workers
//! running one thread can never overwrite each other. The second gets
//! [`CheckpointError::Conflict`] and can reload and retry.

mod backend;
mod blobs;
mod memory;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use self::backend::BackendCheckpointer;
pub use self::blobs::DEFAULT_BLOB_THRESHOLD;
pub use self::memory::InMemoryCheckpointer;
use crate::backend::Backend;
use crate::runtime::context::ThreadId;
use crate::runtime::state::State;

/// The checkpoint format this crate writes.
pub const CHECKPOINT_FORMAT: u32 = 1;

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
        let saved_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Self {
            format: CHECKPOINT_FORMAT,
            thread_id,
            seq,
            saved_at_ms,
            state,
        }
    }
}

/// An opaque version of a thread's latest checkpoint; any save gives a new one.
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
    /// The stored checkpoint has a format this version does not read.
    #[error(
        "checkpoint of thread {thread_id} has format {format}; this build reads format {CHECKPOINT_FORMAT}"
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

/// Where threads are saved.
///
/// Object-safe (`Arc<dyn Checkpointer>`). The contract, for every implementation:
/// * `save(cp, None)` creates the thread and fails with `Conflict` when it exists;
/// * `save(cp, Some(v))` replaces the checkpoint only when its current version is `v`, and fails with
///   `Conflict` otherwise (changed, or deleted);
/// * `load` returns the latest checkpoint with its version, or `None` for an unknown thread.
#[async_trait]
pub trait Checkpointer: Send + Sync + Debug {
    /// The thread's latest checkpoint.
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<StoredCheckpoint>, CheckpointError>;

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
}
