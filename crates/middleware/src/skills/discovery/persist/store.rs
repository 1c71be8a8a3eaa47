//! Where persisted catalogs live: [`CatalogStore`], a local cache directory
//! ([`LocalCatalogDir`]) and an index object in the source's own bucket ([`BucketIndex`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;

use crate::backend::{Backend, BackendError, Version, VirtualPath, WriteMode};

use super::CacheError;

/// One place a source's persisted catalog is loaded from and saved to. Object-safe; the key is
/// [`cache_key`](super::cache_key) of the source's origin.
///
/// Contract: `load` of a key never saved is `Ok(None)`; `save` is atomic (a reader sees the old
/// bytes or the new ones, never a mix) and never corrupts what another writer saves concurrently
/// (one of them wins whole, or the loser gets [`CacheError::Conflict`]).
#[async_trait]
pub trait CatalogStore: Send + Sync + fmt::Debug {
    /// The bytes saved under `key`, if any.
    async fn load(&self, key: &str) -> Result<Option<Bytes>, CacheError>;
    /// Save `bytes` under `key`.
    async fn save(&self, key: &str, bytes: Bytes) -> Result<(), CacheError>;
    /// True when the origin in the header must match the caller's (a store shared by many
    /// sources); false for a store that is the source's own (an index inside the source).
    fn checks_origin(&self) -> bool {
        true
    }
}

/// A cache directory on local disk: one file per origin, `<dir>/<key>.catalog`, written to a
/// temporary file in the same directory and renamed over the old one (atomic on POSIX), so
/// concurrent writers never interleave and a crash leaves the old file or none.
#[derive(Debug, Clone)]
pub struct LocalCatalogDir {
    dir: PathBuf,
}

impl LocalCatalogDir {
    /// A cache in `dir` (created on first save).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self, key: &str) -> Result<PathBuf, CacheError> {
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(CacheError::Corrupt {
                reason: format!("cache key {key:?} is not alphanumeric"),
            });
        }
        Ok(self.dir.join(format!("{key}.catalog")))
    }
}

/// The default cache directory: `$TRELLIS_CACHE_DIR`, else `$XDG_CACHE_HOME/trellis/skills`,
/// else `$HOME/.cache/trellis/skills`; `None` when none of them is set.
pub fn default_cache_dir() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("TRELLIS_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("trellis").join("skills")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("trellis").join("skills")))
}

#[async_trait]
impl CatalogStore for LocalCatalogDir {
    async fn load(&self, key: &str) -> Result<Option<Bytes>, CacheError> {
        let file = self.file(key)?;
        let read = tokio::task::spawn_blocking(move || std::fs::read(file))
            .await
            .map_err(|e| CacheError::Io(std::io::Error::other(e)))?;
        match read {
            Ok(bytes) => Ok(Some(Bytes::from(bytes))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CacheError::Io(e)),
        }
    }

    async fn save(&self, key: &str, bytes: Bytes) -> Result<(), CacheError> {
        let file = self.file(key)?;
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            use std::io::Write as _;
            std::fs::create_dir_all(&dir)?;
            let mut tmp = tempfile::NamedTempFile::new_in(&dir)?;
            tmp.write_all(&bytes)?;
            tmp.as_file().sync_data()?;
            tmp.persist(&file).map_err(|e| e.error)?;
            Ok(())
        })
        .await
        .map_err(|e| CacheError::Io(std::io::Error::other(e)))?
        .map_err(CacheError::Io)
    }
}

/// The index object a source publishes into its own bucket (`trellis skills index URL`), so every
/// worker starts from the same catalog. Saves are create-only when no index was loaded, and
/// version-checked against the loaded one otherwise: two publishers racing cannot interleave, the
/// loser gets [`CacheError::Conflict`].
pub struct BucketIndex {
    backend: Arc<dyn Backend>,
    path: VirtualPath,
    loaded: Mutex<Option<Version>>,
}

/// The index object's name, in the source directory (a file, so never a skill candidate).
pub const INDEX_FILE: &str = ".trellis-skills-index";

impl fmt::Debug for BucketIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketIndex")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl BucketIndex {
    /// The index of the source at `source_dir` on `backend` (`<source_dir>/.trellis-skills-index`).
    pub fn new(backend: Arc<dyn Backend>, source_dir: &VirtualPath) -> Result<Self, CacheError> {
        let path = source_dir.join(INDEX_FILE).map_err(|e| CacheError::Corrupt {
            reason: e.to_string(),
        })?;
        Ok(Self {
            backend,
            path,
            loaded: Mutex::new(None),
        })
    }

    /// Where the index object is.
    pub fn path(&self) -> &VirtualPath {
        &self.path
    }

    fn remember(&self, version: Option<Version>) {
        if let Ok(mut loaded) = self.loaded.lock() {
            *loaded = version;
        }
    }
}

#[async_trait]
impl CatalogStore for BucketIndex {
    async fn load(&self, _key: &str) -> Result<Option<Bytes>, CacheError> {
        match self.backend.read(&self.path, None).await {
            Ok(out) => {
                self.remember(out.version.clone());
                Ok(Some(out.bytes))
            }
            Err(BackendError::NotFound { .. }) => {
                self.remember(None);
                Ok(None)
            }
            Err(e) => Err(CacheError::Backend(e)),
        }
    }

    async fn save(&self, _key: &str, bytes: Bytes) -> Result<(), CacheError> {
        let loaded = self.loaded.lock().ok().and_then(|v| v.clone());
        let mode = match loaded {
            Some(version) => WriteMode::IfVersion(version),
            None => WriteMode::CreateNew,
        };
        match self.backend.write(&self.path, bytes, mode).await {
            Ok(outcome) => {
                self.remember(outcome.version);
                Ok(())
            }
            Err(e) if e.is_conflict() => Err(CacheError::Conflict {
                path: self.path.to_string(),
            }),
            Err(e) => Err(CacheError::Backend(e)),
        }
    }

    fn checks_origin(&self) -> bool {
        false
    }
}
