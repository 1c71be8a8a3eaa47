//! [`InMemoryCheckpointer`]: threads kept in this process.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::delta::message_delta;
use super::record::summarize;
use super::{
    CallRecord, Checkpoint, CheckpointError, CheckpointInfo, CheckpointVersion, Checkpointer,
    StoredCheckpoint,
};
use crate::backend::{Backend, StateBackend};
use crate::runtime::context::ThreadId;

/// Threads kept in memory, for one process. Saving clones the state (cheap: messages and slot
/// values are shared), so nothing is serialized. By default only each thread's latest checkpoint is
/// kept (history and forks see that one); [`InMemoryCheckpointer::with_history`] keeps more, at the
/// memory cost of every slot value those checkpoints changed. Each thread's files are a
/// [`StateBackend`] of its own, created on first use and dropped by
/// [`delete`](Checkpointer::delete).
#[derive(Debug)]
pub struct InMemoryCheckpointer {
    inner: Mutex<Inner>,
    history: usize,
}

impl Default for InMemoryCheckpointer {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            history: 1,
        }
    }
}

#[derive(Debug)]
struct Entry {
    checkpoint: Checkpoint,
    revision: u64,
    summary: String,
}

#[derive(Debug, Default)]
struct Inner {
    threads: HashMap<ThreadId, VecDeque<Entry>>,
    files: HashMap<ThreadId, Arc<StateBackend>>,
    /// Each thread's tool-call journal, by call id.
    calls: HashMap<ThreadId, HashMap<String, CallRecord>>,
    /// Last revision handed out; revisions never repeat, even after a delete.
    revision: u64,
}

impl InMemoryCheckpointer {
    /// No threads.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keep the last `checkpoints` checkpoints of each thread (at least 1) for
    /// [`Checkpointer::history`], [`Checkpointer::load_at`] and [`Checkpointer::fork`].
    pub fn with_history(mut self, checkpoints: usize) -> Self {
        self.history = checkpoints.max(1);
        self
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

/// What `checkpoint` added to `before`, in one line.
fn summary_of(checkpoint: &Checkpoint, before: Option<&Checkpoint>) -> String {
    let delta = message_delta(&checkpoint.state, before.map(|b| &b.state));
    let slots = checkpoint.state.slots();
    let changed: Vec<&str> = slots
        .slot_names()
        .filter(|name| before.is_none_or(|b| !b.state.slots().same_value(slots, name)))
        .collect();
    summarize(&delta.append, &changed, &[])
}

#[async_trait]
impl Checkpointer for InMemoryCheckpointer {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(inner
            .threads
            .get(thread_id)
            .and_then(VecDeque::back)
            .map(|entry| StoredCheckpoint {
                checkpoint: entry.checkpoint.clone(),
                version: version(entry.revision),
            }))
    }

    async fn save(
        &self,
        checkpoint: Checkpoint,
        expected: Option<&CheckpointVersion>,
    ) -> Result<CheckpointVersion, CheckpointError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let entries = inner.threads.get(&checkpoint.thread_id);
        let current = entries.and_then(VecDeque::back).map(|e| version(e.revision));
        if current.as_ref() != expected {
            return Err(CheckpointError::Conflict {
                thread_id: checkpoint.thread_id.clone(),
            });
        }
        let summary = summary_of(
            &checkpoint,
            entries.and_then(VecDeque::back).map(|e| &e.checkpoint),
        );
        inner.revision += 1;
        let revision = inner.revision;
        let entries = inner.threads.entry(checkpoint.thread_id.clone()).or_default();
        while entries.len() >= self.history {
            entries.pop_front();
        }
        entries.push_back(Entry {
            checkpoint,
            revision,
            summary,
        });
        Ok(version(revision))
    }

    async fn delete(&self, thread_id: &ThreadId) -> Result<(), CheckpointError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.threads.remove(thread_id);
        inner.files.remove(thread_id);
        inner.calls.remove(thread_id);
        Ok(())
    }

    fn keeps_call_journal(&self) -> bool {
        true
    }

    async fn record_call(&self, thread_id: &ThreadId, record: &CallRecord) -> Result<(), CheckpointError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .calls
            .entry(thread_id.clone())
            .or_default()
            .insert(record.call_id.clone(), record.clone());
        Ok(())
    }

    async fn recorded_calls(
        &self,
        thread_id: &ThreadId,
        call_ids: &[String],
    ) -> Result<Vec<CallRecord>, CheckpointError> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Some(calls) = inner.calls.get(thread_id) else {
            return Ok(Vec::new());
        };
        Ok(call_ids.iter().filter_map(|id| calls.get(id).cloned()).collect())
    }

    async fn forget_calls(&self, thread_id: &ThreadId, call_ids: &[String]) -> Result<(), CheckpointError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(calls) = inner.calls.get_mut(thread_id) {
            for id in call_ids {
                calls.remove(id);
            }
            if calls.is_empty() {
                inner.calls.remove(thread_id);
            }
        }
        Ok(())
    }

    fn thread_files(&self, thread_id: &ThreadId) -> Option<Arc<dyn Backend>> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let files = inner.files.entry(thread_id.clone()).or_default().clone();
        Some(files)
    }

    async fn history(&self, thread_id: &ThreadId) -> Result<Vec<CheckpointInfo>, CheckpointError> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let entries = inner.threads.get(thread_id).into_iter().flatten();
        Ok(entries
            .map(|e| CheckpointInfo {
                seq: e.checkpoint.seq,
                saved_at_ms: e.checkpoint.saved_at_ms,
                summary: e.summary.clone(),
                messages: e.checkpoint.state.messages.len(),
                forked_from: None,
            })
            .collect())
    }

    async fn load_at(&self, thread_id: &ThreadId, seq: u64) -> Result<Option<Checkpoint>, CheckpointError> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut entries = inner.threads.get(thread_id).into_iter().flatten();
        Ok(entries
            .rfind(|e| e.checkpoint.seq == seq)
            .map(|e| e.checkpoint.clone()))
    }
}
