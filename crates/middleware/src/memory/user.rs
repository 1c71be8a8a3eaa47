//! The per-user layer of memory: files in the run's user's workspace (`agents/AGENTS.md`,
//! `agents/USER.md`, `agents/MEMORY.md`, …), rendered after the agent's own memory.
//!
//! * **Where.** Sources are relative to the user's workspace, found by [`UserHomes`] exactly as the
//!   file tools find it; the model sees them below the workspace mount
//!   (`/workspace/agents/MEMORY.md`) and edits them there.
//! * **When.** Every run reads the user's sources once, in one batched read (missing ones are
//!   skipped); a source with a first-use template that is missing is created from it, create-only,
//!   so an existing file is never overwritten (and a file someone else created first is read).
//! * **Cache.** What was read is kept per user in a bounded [`UserCache`] with a revision that
//!   changes whenever the text does. Each model call compares the thread's revision with the
//!   user's: an edit made by any thread of that user in this process (re-read after the edit)
//!   reaches the user's other threads on their next call; an edit made in another process is read
//!   by the next run. Nothing keyed by one user is ever shown to another.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{BackendError, VirtualPath, WriteMode};
use crate::tools::Extensions;
use crate::users::UserCache;
use crate::users::{UserHome, UserHomes, shown_path};

use super::{MemoryError, MemoryFile, to_memory_file};

/// What one user's memory was when last read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UserEntry {
    /// The loaded files, in the declared order, with the paths the model sees.
    pub files: Vec<MemoryFile>,
    /// Unique in this process for every distinct text of every user.
    pub revision: u64,
}

/// The per-user memory sources of a [`MemoryMiddleware`](super::MemoryMiddleware).
#[derive(Debug)]
pub(super) struct UserMemory {
    homes: UserHomes,
    sources: Vec<VirtualPath>,
    templates: Vec<(VirtualPath, String)>,
    cache: UserCache<UserEntry>,
}

fn next_revision() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A relative path inside the user's workspace.
pub(super) fn parse_relative(source: &str) -> Result<VirtualPath, MemoryError> {
    let path = VirtualPath::parse(source).map_err(|e| MemoryError::BadSource {
        path: source.to_owned(),
        reason: e.to_string(),
    })?;
    if path.is_root() {
        return Err(MemoryError::BadSource {
            path: source.to_owned(),
            reason: "it names the workspace itself, not a file".to_owned(),
        });
    }
    Ok(path)
}

impl UserMemory {
    pub(super) fn new(homes: UserHomes, sources: Vec<VirtualPath>, capacity: usize) -> Self {
        Self {
            homes,
            sources,
            templates: Vec::new(),
            cache: UserCache::new(capacity),
        }
    }

    /// The same configuration with an empty cache of its own.
    pub(super) fn fresh_copy(&self) -> Self {
        Self {
            homes: self.homes.clone(),
            sources: self.sources.clone(),
            templates: self.templates.clone(),
            cache: UserCache::new(self.cache.capacity()),
        }
    }

    pub(super) fn with_homes(mut self, homes: UserHomes) -> Self {
        self.homes = homes;
        self
    }

    pub(super) fn with_capacity(mut self, capacity: usize) -> Self {
        self.cache = UserCache::new(capacity);
        self
    }

    pub(super) fn add_template(&mut self, path: VirtualPath, text: String) -> Result<(), MemoryError> {
        if !self.sources.contains(&path) {
            return Err(MemoryError::BadSource {
                path: path.to_string(),
                reason: "a template needs a user memory source of the same path".to_owned(),
            });
        }
        self.templates.retain(|(p, _)| p != &path);
        self.templates.push((path, text));
        Ok(())
    }

    /// The paths the model sees for the sources (below the workspace mount).
    pub(super) fn shown_sources(&self) -> impl Iterator<Item = VirtualPath> + '_ {
        self.sources.iter().map(|s| shown_path(self.homes.mount(), s))
    }

    /// The workspace-relative source the model path `shown` names, if any.
    pub(super) fn source_at(&self, shown: &VirtualPath) -> Option<&VirtualPath> {
        let relative = shown.relative_to(self.homes.mount())?;
        self.sources
            .iter()
            .find(|s| s.as_str().trim_start_matches('/') == relative)
    }

    pub(super) fn key_of<'a>(&self, extensions: &'a Extensions) -> Option<&'a str> {
        self.homes.key_of(extensions)
    }

    pub(super) fn cached(&self, key: &str) -> Option<Arc<UserEntry>> {
        self.cache.get(key)
    }

    pub(super) fn home(&self, extensions: &Extensions) -> Result<Option<UserHome>, MemoryError> {
        self.homes.resolve(extensions).map_err(MemoryError::User)
    }

    /// Read the user's sources (one batched read), creating missing templated ones, and record
    /// them in the cache; the revision stays when the text did not change.
    pub(super) async fn load(&self, home: &UserHome) -> Result<Arc<UserEntry>, MemoryError> {
        let reads = home.backend.read_many(&self.sources, None).await;
        let mut files = Vec::new();
        for (source, read) in self.sources.iter().zip(reads) {
            let shown = home.shown_path(source);
            let bytes = match read {
                Ok(out) => Some(out.bytes),
                Err(BackendError::NotFound { .. }) => self.create_from_template(home, source).await?,
                Err(source_err) => {
                    return Err(MemoryError::Load {
                        path: shown.to_string(),
                        source: source_err,
                    });
                }
            };
            if let Some(bytes) = bytes
                && let Some(file) = to_memory_file(&shown, &bytes)?
            {
                files.push(file);
            }
        }
        Ok(self.record(&home.key, files))
    }

    /// Re-read one source after an edit and record the new text.
    pub(super) async fn refresh(
        &self,
        home: &UserHome,
        source: &VirtualPath,
    ) -> Result<Arc<UserEntry>, MemoryError> {
        let shown = home.shown_path(source);
        let fresh = match home.backend.read(source, None).await {
            Ok(out) => to_memory_file(&shown, &out.bytes)?,
            Err(BackendError::NotFound { .. }) => None,
            Err(e) => {
                return Err(MemoryError::Load {
                    path: shown.to_string(),
                    source: e,
                });
            }
        };
        let current = self.cache.get(&home.key);
        let mut files = Vec::with_capacity(self.sources.len());
        for s in &self.sources {
            let path = home.shown_path(s);
            if s == source {
                files.extend(fresh.clone());
            } else if let Some(f) = current
                .as_ref()
                .and_then(|c| c.files.iter().find(|f| f.path == path.as_str()))
            {
                files.push(f.clone());
            }
        }
        Ok(self.record(&home.key, files))
    }

    fn record(&self, key: &str, files: Vec<MemoryFile>) -> Arc<UserEntry> {
        if let Some(current) = self.cache.get(key)
            && current.files == files
        {
            return current;
        }
        let entry = Arc::new(UserEntry {
            files,
            revision: next_revision(),
        });
        self.cache.insert(key, entry.clone());
        entry
    }

    /// A missing source's template, written create-only; what is there afterwards.
    async fn create_from_template(
        &self,
        home: &UserHome,
        source: &VirtualPath,
    ) -> Result<Option<bytes::Bytes>, MemoryError> {
        let Some((_, text)) = self.templates.iter().find(|(p, _)| p == source) else {
            return Ok(None);
        };
        let shown = home.shown_path(source);
        let load_err = |source| MemoryError::Load {
            path: shown.to_string(),
            source,
        };
        match home
            .backend
            .write(source, text.clone().into(), WriteMode::CreateNew)
            .await
        {
            Ok(_) => Ok(Some(text.clone().into())),
            // Someone created it first: theirs wins, never ours.
            Err(BackendError::Conflict { .. }) => match home.backend.read(source, None).await {
                Ok(out) => Ok(Some(out.bytes)),
                Err(BackendError::NotFound { .. }) => Ok(None),
                Err(e) => Err(load_err(e)),
            },
            Err(e) => Err(load_err(e)),
        }
    }
}
