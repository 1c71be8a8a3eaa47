//! [`ThreadCache`]: what this process remembers of each thread's latest step, so the next save
//! can be written as a delta without reading the thread back. Bounded: past [`CACHED_THREADS`]
//! threads it starts over (a thread it forgot is read once on its next save).

use std::collections::HashMap;
use std::sync::Mutex;

use super::CheckpointVersion;
use super::delta::Previous;
use super::record::StepName;
use crate::runtime::context::ThreadId;

/// Threads whose last state this process remembers; past that the memory starts over.
pub(super) const CACHED_THREADS: usize = 1024;

/// What this process knows of a thread at one version: enough to write the next step as a delta.
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub(super) version: CheckpointVersion,
    pub(super) step: StepName,
    /// The committed steps from the latest base step to `step` (what the head names).
    pub(super) since_base: Vec<StepName>,
    /// Message chunks that hold the first messages of `previous` (see [`Replayed::chunks`]).
    pub(super) chunks: Vec<String>,
    pub(super) previous: Previous,
    /// Saved (not just loaded) by this process: shared values are in the memo.
    pub(super) saved: bool,
}

#[derive(Debug, Default)]
pub(super) struct ThreadCache(Mutex<HashMap<ThreadId, Known>>);

impl ThreadCache {
    pub(super) fn get(&self, thread_id: &ThreadId, version: &CheckpointVersion) -> Option<Known> {
        let cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        cache.get(thread_id).filter(|k| &k.version == version).cloned()
    }

    pub(super) fn put(&self, thread_id: ThreadId, known: Known) {
        let mut cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHED_THREADS && !cache.contains_key(&thread_id) {
            cache.clear();
        }
        cache.insert(thread_id, known);
    }

    pub(super) fn forget(&self, thread_id: &ThreadId) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(thread_id);
    }
}
