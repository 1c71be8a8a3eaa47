//! [`UserCache`]: a small, bounded, thread-safe map from user key to a shared value, for the per-user
//! layers (user memory, personal skills).
//!
//! It holds at most `capacity` users; inserting one more evicts the least recently used. Values are
//! `Arc`s, so a hit is a lock, a hash lookup and a reference-count increment, and an evicted value
//! lives on in the threads that still hold it. Eviction only costs a re-read of that user's files on
//! their next run; nothing is lost, because the files are the truth.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Users kept by default by each per-user cache.
pub const DEFAULT_USER_CACHE_CAPACITY: usize = 1024;

/// A bounded least-recently-used map from user key to `Arc<V>`; see the module docs.
#[derive(Debug)]
pub struct UserCache<V> {
    capacity: usize,
    inner: Mutex<Entries<V>>,
}

#[derive(Debug)]
struct Entries<V> {
    clock: u64,
    map: HashMap<String, (Arc<V>, u64)>,
}

impl<V> UserCache<V> {
    /// A cache of at most `capacity` users (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(Entries {
                clock: 0,
                map: HashMap::new(),
            }),
        }
    }

    /// Most users kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Users cached now.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// True when no user is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of `key`, marked as recently used.
    pub fn get(&self, key: &str) -> Option<Arc<V>> {
        let mut entries = self.lock();
        entries.clock += 1;
        let now = entries.clock;
        entries.map.get_mut(key).map(|(value, used)| {
            *used = now;
            value.clone()
        })
    }

    /// Set `key` to `value`, evicting the least recently used user when full.
    pub fn insert(&self, key: &str, value: Arc<V>) {
        let mut entries = self.lock();
        entries.clock += 1;
        let now = entries.clock;
        if !entries.map.contains_key(key) && entries.map.len() >= self.capacity {
            let oldest = entries
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                entries.map.remove(&oldest);
            }
        }
        entries.map.insert(key.to_owned(), (value, now));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries<V>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_at_most_capacity_users_evicting_the_least_recently_used() {
        let cache = UserCache::new(2);
        cache.insert("ada", Arc::new(1));
        cache.insert("bob", Arc::new(2));
        assert_eq!(
            cache.get("ada").as_deref(),
            Some(&1),
            "ada is now the most recent"
        );
        cache.insert("cy", Arc::new(3));
        assert_eq!(cache.len(), 2);
        assert!(cache.get("bob").is_none(), "bob was the least recently used");
        assert_eq!(cache.get("ada").as_deref(), Some(&1));
        cache.insert("ada", Arc::new(4));
        assert_eq!(cache.get("ada").as_deref(), Some(&4), "replacing keeps the size");
        assert_eq!(cache.len(), 2);
    }
}
