//! [`UserCache`]: a small, bounded, thread-safe map from user key to a shared value, for the per-user
//! layers (user memory, personal skills).
//!
//! It holds at most `capacity` users; inserting one more evicts the least recently used. Values are
//! `Arc`s, so a hit is a lock, a hash lookup and a reference-count increment, and an evicted value
//! lives on in the threads that still hold it. Eviction only costs a re-read of that user's files on
//! their next run; nothing is lost, because the files are the truth. The map is the `lru` crate's
//! (constant-time lookup, promotion and eviction) behind one mutex.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;

/// Users kept by default by each per-user cache.
pub const DEFAULT_USER_CACHE_CAPACITY: usize = 1024;

/// A bounded least-recently-used map from user key to `Arc<V>`; see the module docs.
#[derive(Debug)]
pub struct UserCache<V> {
    inner: Mutex<LruCache<String, Arc<V>>>,
}

impl<V> UserCache<V> {
    /// A cache of at most `capacity` users (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            inner: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// Most users kept.
    pub fn capacity(&self) -> usize {
        self.lock().cap().get()
    }

    /// Users cached now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no user is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of `key`, marked as recently used.
    pub fn get(&self, key: &str) -> Option<Arc<V>> {
        self.lock().get(key).cloned()
    }

    /// Set `key` to `value`, evicting the least recently used user when full.
    pub fn insert(&self, key: &str, value: Arc<V>) {
        self.lock().put(key.to_owned(), value);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, Arc<V>>> {
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
