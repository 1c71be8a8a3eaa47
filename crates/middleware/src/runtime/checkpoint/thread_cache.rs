//! [`ThreadCache`]: what this process remembers of each thread's latest step, so the next save
//! can be written as a delta without reading the thread back.
//!
//! Bounded twice. By count: past [`CACHED_THREADS`] threads it starts over. By weight: an entry
//! weighs the bytes of the blobs its state decoded on its own — a thread loaded from the store
//! holds its own copy of every shared value (at 5,000 skills, a catalog decoded from a 1 MB
//! blob), while threads saved by this process share theirs through the content memo and weigh
//! nothing. Past [`CACHED_BLOB_BYTES`] the heaviest other entries are forgotten, so a worker that
//! resumes hundreds of distinct threads does not keep a catalog for each after their runs end.
//! A thread it forgot is read once on its next save.

use std::collections::HashMap;
use std::sync::Mutex;

use super::CheckpointVersion;
use super::appended::LogAt;
use super::delta::Previous;
use super::record::StepName;
use crate::runtime::context::ThreadId;

/// Threads whose last state this process remembers; past that the memory starts over.
pub(super) const CACHED_THREADS: usize = 1024;
/// Most blob bytes the remembered states may have decoded on their own (their in-memory size is
/// a few times this).
pub(super) const CACHED_BLOB_BYTES: usize = 64 << 20;

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
    /// Bytes of the blobs `previous` decoded on its own (see the module docs).
    pub(super) weight: usize,
    /// Where the thread's file of steps ends, for a thread kept in one (`appended.rs`).
    pub(super) log: Option<LogAt>,
}

#[derive(Debug)]
pub(super) struct ThreadCache {
    entries: Mutex<Entries>,
    budget: usize,
}

#[derive(Debug, Default)]
struct Entries {
    known: HashMap<ThreadId, Known>,
    weight: usize,
}

impl Default for ThreadCache {
    fn default() -> Self {
        Self::with_budget(CACHED_BLOB_BYTES)
    }
}

impl Entries {
    fn remove(&mut self, thread_id: &ThreadId) -> Option<Known> {
        let known = self.known.remove(thread_id)?;
        self.weight -= known.weight;
        Some(known)
    }
}

impl ThreadCache {
    /// A cache whose entries may weigh `budget` bytes together.
    pub(super) fn with_budget(budget: usize) -> Self {
        Self {
            entries: Mutex::default(),
            budget,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn get(&self, thread_id: &ThreadId, version: &CheckpointVersion) -> Option<Known> {
        let cache = self.lock();
        cache
            .known
            .get(thread_id)
            .filter(|k| &k.version == version)
            .cloned()
    }

    /// Remember `known` for `thread_id`; the newest entry always stays, even alone over budget.
    pub(super) fn put(&self, thread_id: ThreadId, known: Known) {
        let mut cache = self.lock();
        cache.remove(&thread_id);
        if cache.known.len() >= CACHED_THREADS {
            *cache = Entries::default();
        }
        while cache.weight + known.weight > self.budget {
            let heaviest = cache
                .known
                .iter()
                .filter(|(_, k)| k.weight > 0)
                .max_by_key(|(_, k)| k.weight)
                .map(|(id, _)| id.clone());
            match heaviest {
                Some(id) => {
                    cache.remove(&id);
                }
                None => break,
            }
        }
        cache.weight += known.weight;
        cache.known.insert(thread_id, known);
    }

    pub(super) fn forget(&self, thread_id: &ThreadId) {
        self.lock().remove(thread_id);
    }

    /// Threads remembered and their total weight.
    #[cfg(test)]
    fn size(&self) -> (usize, usize) {
        let cache = self.lock();
        (cache.known.len(), cache.weight)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::runtime::state::State;

    fn known(weight: usize) -> Known {
        let step = StepName {
            seq: 1,
            nonce: "n".into(),
            parent: None,
            base: true,
        };
        Known {
            version: CheckpointVersion::new("v"),
            step: step.clone(),
            since_base: vec![step],
            chunks: Vec::new(),
            previous: Previous {
                state: State::default(),
                slots: Default::default(),
            },
            saved: false,
            weight,
            log: None,
        }
    }

    fn id(i: usize) -> ThreadId {
        ThreadId::new(format!("t-{i}")).unwrap()
    }

    #[test]
    fn loaded_states_are_bounded_by_weight_and_shared_ones_are_not() {
        let cache = ThreadCache::with_budget(100);
        for i in 0..10 {
            cache.put(id(i), known(30));
            let (_, weight) = cache.size();
            assert!(weight <= 100, "{weight}");
            assert!(
                cache.get(&id(i), &CheckpointVersion::new("v")).is_some(),
                "the newest stays"
            );
        }
        assert_eq!(cache.size(), (3, 90));
        // Weightless entries (states that share their values) never push others out.
        for i in 10..20 {
            cache.put(id(i), known(0));
        }
        assert_eq!(cache.size(), (13, 90));
        // An entry over the whole budget stays alone with the weightless ones.
        cache.put(id(99), known(500));
        assert_eq!(cache.size(), (11, 500));
        // Replacing an entry replaces its weight; forgetting it frees it.
        cache.put(id(99), known(10));
        assert_eq!(cache.size(), (11, 10));
        cache.forget(&id(99));
        assert_eq!(cache.size(), (10, 0));
    }
}
