//! [`InMemoryCheckpointer`]: threads kept in this process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{Checkpoint, CheckpointError, CheckpointVersion, Checkpointer, StoredCheckpoint};
use crate::backend::{Backend, StateBackend};
use crate::runtime::context::ThreadId;

/// Threads kept in memory, for one process. Saving clones the state (cheap: slot values are shared),
/// so nothing is serialized. Each thread's files are a [`StateBackend`] of its own, created on first
/// use and dropped by [`delete`](Checkpointer::delete).
#[derive(Debug, Default)]
pub struct InMemoryCheckpointer {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    threads: HashMap<ThreadId, (Checkpoint, u64)>,
    files: HashMap<ThreadId, Arc<StateBackend>>,
    /// Last revision handed out; revisions never repeat, even after a delete.
    revision: u64,
}

impl InMemoryCheckpointer {
    /// No threads.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ids of the stored threads, sorted.
    pub fn threads(&self) -> Vec<ThreadId> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut ids: Vec<ThreadId> = inner.threads.keys().cloned().collect();
        ids.sort();
        ids
    }
}

fn version(revision: u64) -> CheckpointVersion {
    CheckpointVersion::new(format!("m{revision}"))
}

#[async_trait]
impl Checkpointer for InMemoryCheckpointer {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(inner
            .threads
            .get(thread_id)
            .map(|(checkpoint, revision)| StoredCheckpoint {
                checkpoint: checkpoint.clone(),
                version: version(*revision),
            }))
    }

    async fn save(
        &self,
        checkpoint: Checkpoint,
        expected: Option<&CheckpointVersion>,
    ) -> Result<CheckpointVersion, CheckpointError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let current = inner.threads.get(&checkpoint.thread_id).map(|(_, r)| version(*r));
        if current.as_ref() != expected {
            return Err(CheckpointError::Conflict {
                thread_id: checkpoint.thread_id.clone(),
            });
        }
        inner.revision += 1;
        let revision = inner.revision;
        inner
            .threads
            .insert(checkpoint.thread_id.clone(), (checkpoint, revision));
        Ok(version(revision))
    }

    async fn delete(&self, thread_id: &ThreadId) -> Result<(), CheckpointError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.threads.remove(thread_id);
        inner.files.remove(thread_id);
        Ok(())
    }

    fn thread_files(&self, thread_id: &ThreadId) -> Option<Arc<dyn Backend>> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let files = inner.files.entry(thread_id.clone()).or_default().clone();
        Some(files)
    }
}
