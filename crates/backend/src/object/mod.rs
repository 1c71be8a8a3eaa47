//! [`ObjectStoreBackend`]: any `object_store` store (S3, GCS, Azure, local, memory) under a prefix.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as StorePath;
use object_store::{
    Attribute, GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    UpdateVersion,
};

use crate::backend::{
    Backend, ByteRange, Capabilities, Entry, EntryKind, FileListing, ReadOutput, Version, WriteMode,
    WriteOutcome,
};
use crate::error::{BackendError, ConflictKind, Result};
use crate::object_config::{StoreOptions, build_store};
use crate::path::VirtualPath;
use crate::stream::WriteSource;

mod multipart;

pub use multipart::MULTIPART_THRESHOLD;

/// A backend over any [`ObjectStore`], rooted at a key prefix.
///
/// Directories are key prefixes (there are no empty directories); `ls` is one delimited listing,
/// `list_files` (and so `glob` and `grep`) is one recursive paged listing rather than a walk, and
/// `read_many` runs ranged GETs concurrently. Version tags are the store's ETag and version (S3,
/// Azure) or generation (GCS); version-checked writes use the store's conditional puts. Stores
/// without conditional updates (object_store's local file system) get them emulated under a
/// per-key lock, which is safe only within one process.
///
/// **Lost replies.** The store client retries a request whose connection failed or that got a
/// 5xx reply. For a create-only or version-checked write that means the retry can meet the write's
/// own first attempt and be refused (412), or the client gives up although the write was applied.
/// So each such write carries a random tag in the object's metadata (`trelliswrite`); when it
/// fails with a precondition failure, a transport error or a 5xx, one `HEAD` checks the tag, and a
/// write that landed is reported as written (with its version), not as a conflict or an error.
/// A write that landed and was then replaced by another writer before the check is still reported
/// as failed.
///
/// Keys are used as written: a key listed by the store that is not a valid [`VirtualPath`] (for
/// example one holding a percent-escape) is skipped with a warning.
#[derive(Debug, Clone)]
pub struct ObjectStoreBackend {
    store: Arc<dyn ObjectStore>,
    prefix: StorePath,
    emulate_update: bool,
    /// The store starts a listing at a key server-side (see [`Backend::list_files_between`]).
    lists_from_key: bool,
    update_locks: Arc<Mutex<HashMap<StorePath, Arc<tokio::sync::Mutex<()>>>>>,
}

impl ObjectStoreBackend {
    /// Wrap a store; every key lives under `prefix` (`""` for the whole bucket).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Result<Self> {
        let prefix = StorePath::parse(prefix).map_err(|e| BackendError::InvalidPath {
            path: prefix.to_owned(),
            reason: e.to_string(),
        })?;
        let name = store.to_string();
        let emulate_update = name.starts_with("LocalFileSystem");
        // S3 (`start-after`) and GCS (`startOffset`) start a listing at a key; the in-memory store
        // filters a map it holds anyway. Azure's `startFrom` is not served by Azurite and the
        // client cannot tell an emulator from here, and a local directory is walked whole.
        let lists_from_key = ["AmazonS3", "GoogleCloudStorage", "InMemory"]
            .iter()
            .any(|kind| name.starts_with(kind));
        Ok(Self {
            store,
            prefix,
            emulate_update,
            lists_from_key,
            update_locks: Arc::default(),
        })
    }

    /// Build from a URL: `s3://bucket/prefix`, `gs://bucket/prefix`, `az://container/prefix`,
    /// `file:///abs/dir`, `memory://` (a new, empty store each call).
    pub fn from_url(url: &str, options: &StoreOptions) -> Result<Self> {
        let (store, prefix) = build_store(url, options)?;
        let mut backend = Self::new(store, "")?;
        backend.prefix = prefix;
        Ok(backend)
    }

    /// The underlying store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    fn key(&self, path: &VirtualPath) -> Result<StorePath> {
        let rel = path.as_str().trim_start_matches('/');
        let raw = match (self.prefix.as_ref().is_empty(), rel.is_empty()) {
            (true, _) => rel.to_owned(),
            (false, true) => self.prefix.as_ref().to_owned(),
            (false, false) => format!("{}/{rel}", self.prefix.as_ref()),
        };
        StorePath::parse(&raw).map_err(|e| BackendError::InvalidPath {
            path: path.to_string(),
            reason: e.to_string(),
        })
    }

    fn virtual_path(&self, key: &StorePath) -> Option<VirtualPath> {
        let raw = key.as_ref();
        let rel = if self.prefix.as_ref().is_empty() {
            raw
        } else {
            raw.strip_prefix(self.prefix.as_ref())?.strip_prefix('/')?
        };
        match VirtualPath::parse(&format!("/{rel}")) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(key = raw, error = %e, "skipping an object whose key is not a valid path");
                None
            }
        }
    }

    fn file_entry(&self, meta: &ObjectMeta) -> Option<Entry> {
        Some(Entry {
            path: self.virtual_path(&meta.location)?,
            kind: EntryKind::File,
            size: meta.size,
            modified: Some(meta.last_modified),
            version: Some(encode_version(meta.e_tag.clone(), meta.version.clone())),
        })
    }

    /// True when at least one object lies below `path`.
    async fn has_children(&self, path: &VirtualPath) -> Result<bool> {
        let key = self.key(path)?;
        let mut listing = self.store.list(Some(&key));
        match listing.next().await {
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(map_error(path, e)),
            None => Ok(false),
        }
    }

    /// A `NotFound` for `path`, or `IsADirectory` when objects lie below it.
    async fn missing(&self, path: &VirtualPath) -> BackendError {
        match self.has_children(path).await {
            Ok(true) => BackendError::IsADirectory {
                path: path.to_string(),
            },
            Ok(false) => BackendError::not_found(path),
            Err(e) => e,
        }
    }

    /// The object's current version when its metadata holds `tag`: the write that carried the tag
    /// landed and nothing has replaced it since. `None` when it did not, or cannot be told.
    async fn landed(&self, key: &StorePath, tag: &str) -> Option<Version> {
        let options = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        let found = self.store.get_opts(key, options).await.ok()?;
        let value = found.attributes.get(&Attribute::Metadata(WRITE_TAG.into()))?;
        (value.as_ref() == tag).then(|| encode_version(found.meta.e_tag.clone(), found.meta.version.clone()))
    }

    async fn emulated_update(
        &self,
        path: &VirtualPath,
        key: &StorePath,
        data: Bytes,
        want: &Version,
    ) -> Result<WriteOutcome> {
        let lock = {
            let mut locks = self.update_locks.lock().unwrap_or_else(|p| p.into_inner());
            locks.retain(|_, l| Arc::strong_count(l) > 1);
            locks.entry(key.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        let current = match self.store.head(key).await {
            Ok(meta) => Some(encode_version(meta.e_tag, meta.version)),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(map_error(path, e)),
        };
        if current.as_ref() != Some(want) {
            return Err(BackendError::Conflict {
                path: path.to_string(),
                kind: ConflictKind::VersionMismatch,
            });
        }
        let put = self
            .store
            .put_opts(key, data.into(), PutOptions::from(PutMode::Overwrite))
            .await
            .map_err(|e| map_error(path, e))?;
        Ok(WriteOutcome {
            version: Some(encode_version(put.e_tag, put.version)),
        })
    }
}

/// Metadata key of a conditional write's tag (letters only: valid on S3, GCS and Azure alike).
const WRITE_TAG: &str = "trelliswrite";

/// A tag no other write carries: 128 random bits (or, without an entropy source, the process,
/// the time and a counter).
fn write_tag() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&nanos.to_le_bytes());
        bytes[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        bytes[12..].copy_from_slice(&(n as u32).to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// True when a conditional write failed in a way that may hide its own success: a precondition
/// failure (a retry met the write's own first attempt), or a transport failure or 5xx after which
/// the write may or may not have been applied.
fn reply_may_be_lost(err: &object_store::Error) -> bool {
    use object_store::Error as E;
    matches!(
        err,
        E::Precondition { .. } | E::AlreadyExists { .. } | E::NotFound { .. } | E::Generic { .. }
    )
}

fn encode_version(e_tag: Option<String>, version: Option<String>) -> Version {
    Version::new(serde_json::json!([e_tag, version]).to_string())
}

fn decode_version(version: &Version) -> Option<UpdateVersion> {
    let (e_tag, version): (Option<String>, Option<String>) = serde_json::from_str(version.as_str()).ok()?;
    Some(UpdateVersion { e_tag, version })
}

/// True when a request in `err`'s chain of causes timed out.
fn is_timeout(err: &object_store::Error) -> bool {
    use object_store::client::{HttpError, HttpErrorKind};
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if e.downcast_ref::<HttpError>()
            .is_some_and(|h| h.kind() == HttpErrorKind::Timeout)
            || e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// Map an `object_store` error to ours.
pub(crate) fn map_error(path: &VirtualPath, err: object_store::Error) -> BackendError {
    use object_store::Error as E;
    let path = path.to_string();
    match err {
        E::NotFound { .. } => BackendError::NotFound { path },
        E::AlreadyExists { .. } => BackendError::Conflict {
            path,
            kind: ConflictKind::AlreadyExists,
        },
        E::Precondition { .. } => BackendError::Conflict {
            path,
            kind: ConflictKind::VersionMismatch,
        },
        E::PermissionDenied { source, .. } | E::Unauthenticated { source, .. } => {
            BackendError::PermissionDenied {
                path,
                source: Some(source),
            }
        }
        E::InvalidPath { source } => BackendError::InvalidPath {
            path,
            reason: source.to_string(),
        },
        // Transport failures surface as `Generic` once the store's own retries are spent.
        E::Generic { .. } if is_timeout(&err) => BackendError::Timeout {
            path,
            source: Box::new(err),
        },
        E::Generic { .. } | E::JoinError { .. } => BackendError::Unavailable {
            path,
            source: Box::new(err),
        },
        other => BackendError::Other {
            path,
            source: Box::new(other),
        },
    }
}

impl ObjectStoreBackend {
    /// One range of `base`'s keys (see [`Backend::list_files_between`]): listed from `after`
    /// by the store, stopped at the first key past `until`, so only the pages of the range are
    /// fetched. Keys compare as the store orders them: byte by byte, all under one prefix.
    async fn list_between(
        &self,
        base: &VirtualPath,
        after: Option<&VirtualPath>,
        until: Option<&VirtualPath>,
        limit: usize,
    ) -> Result<FileListing> {
        let key = self.key(base)?;
        let prefix = (!key.as_ref().is_empty()).then_some(&key);
        let mut stream = match after {
            Some(after) => self.store.list_with_offset(prefix, &self.key(after)?),
            None => self.store.list(prefix),
        };
        let until = until.map(|u| self.key(u)).transpose()?;
        let mut files = Vec::new();
        let mut truncated = false;
        while let Some(meta) = stream.try_next().await.map_err(|e| map_error(base, e))? {
            if until
                .as_ref()
                .is_some_and(|u| meta.location.as_ref().as_bytes() > u.as_ref().as_bytes())
            {
                break;
            }
            if files.len() >= limit {
                truncated = true;
                break;
            }
            if let Some(entry) = self.file_entry(&meta) {
                files.push(entry);
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(FileListing { files, truncated })
    }
}

#[async_trait]
impl Backend for ObjectStoreBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranged_reads: true,
            versioned_writes: true,
            strict_hierarchy: false,
        }
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        let key = self.key(dir)?;
        let prefix = (!key.as_ref().is_empty()).then_some(&key);
        let listing = self
            .store
            .list_with_delimiter(prefix)
            .await
            .map_err(|e| map_error(dir, e))?;
        let mut out: Vec<Entry> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| self.virtual_path(p).map(Entry::directory))
            .chain(
                listing
                    .objects
                    .iter()
                    .filter(|m| m.location != key)
                    .filter_map(|m| self.file_entry(m)),
            )
            .collect();
        if out.is_empty() && !dir.is_root() {
            return match self.store.head(&key).await {
                Ok(_) => Err(BackendError::NotADirectory {
                    path: dir.to_string(),
                }),
                Err(object_store::Error::NotFound { .. }) => Err(BackendError::not_found(dir)),
                Err(e) => Err(map_error(dir, e)),
            };
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out.dedup_by(|a, b| a.path == b.path);
        Ok(out)
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        if path.is_root() {
            return Ok(Entry::directory(path.clone()));
        }
        let key = self.key(path)?;
        match self.store.head(&key).await {
            Ok(meta) => self
                .file_entry(&meta)
                .ok_or_else(|| BackendError::not_found(path)),
            Err(object_store::Error::NotFound { .. }) => {
                if self.has_children(path).await? {
                    Ok(Entry::directory(path.clone()))
                } else {
                    Err(BackendError::not_found(path))
                }
            }
            Err(e) => Err(map_error(path, e)),
        }
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        if path.is_root() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        let key = self.key(path)?;
        let get_range = match range {
            None => None,
            Some(ByteRange { start, end: None }) => Some(GetRange::Offset(start)),
            Some(ByteRange {
                start,
                end: Some(end),
            }) if end > start => Some(GetRange::Bounded(start..end)),
            // A zero-length range: object stores refuse it, so only look the file up.
            Some(_) => {
                let meta = self.store.head(&key).await;
                return match meta {
                    Ok(meta) => Ok(ReadOutput {
                        bytes: Bytes::new(),
                        size: meta.size,
                        version: Some(encode_version(meta.e_tag, meta.version)),
                        modified: Some(meta.last_modified),
                    }),
                    Err(object_store::Error::NotFound { .. }) => Err(self.missing(path).await),
                    Err(e) => Err(map_error(path, e)),
                };
            }
        };
        let options = GetOptions {
            range: get_range,
            ..GetOptions::default()
        };
        let result = match self.store.get_opts(&key, options).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Err(self.missing(path).await),
            Err(e) if range.is_some() => {
                // A range that starts at or past the end (an empty file included) reads nothing.
                match self.store.head(&key).await {
                    Ok(meta) if range.is_some_and(|r| r.start >= meta.size) => {
                        return Ok(ReadOutput {
                            bytes: Bytes::new(),
                            size: meta.size,
                            version: Some(encode_version(meta.e_tag, meta.version)),
                            modified: Some(meta.last_modified),
                        });
                    }
                    _ => return Err(map_error(path, e)),
                }
            }
            Err(e) => return Err(map_error(path, e)),
        };
        let meta = result.meta.clone();
        let bytes = result.bytes().await.map_err(|e| map_error(path, e))?;
        Ok(ReadOutput {
            bytes,
            size: meta.size,
            version: Some(encode_version(meta.e_tag, meta.version)),
            modified: Some(meta.last_modified),
        })
    }

    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        if path.is_root() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        let key = self.key(path)?;
        let put_mode = match &mode {
            WriteMode::CreateNew => PutMode::Create,
            WriteMode::Overwrite => PutMode::Overwrite,
            WriteMode::IfVersion(v) => {
                if self.emulate_update {
                    return self.emulated_update(path, &key, data, v).await;
                }
                match decode_version(v) {
                    Some(update) => PutMode::Update(update),
                    None => {
                        return Err(BackendError::Conflict {
                            path: path.to_string(),
                            kind: ConflictKind::VersionMismatch,
                        });
                    }
                }
            }
        };
        // A create-only or version-checked write carries a one-off tag in the object's metadata:
        // when its reply is lost, the tag tells whether it landed (see `landed`).
        let tag = (!self.emulate_update && !matches!(put_mode, PutMode::Overwrite)).then(write_tag);
        let mut options = PutOptions::from(put_mode);
        if let Some(tag) = &tag {
            options
                .attributes
                .insert(Attribute::Metadata(WRITE_TAG.into()), tag.clone().into());
        }
        let err = match self.store.put_opts(&key, data.into(), options).await {
            Ok(put) => {
                return Ok(WriteOutcome {
                    version: Some(encode_version(put.e_tag, put.version)),
                });
            }
            Err(e) => e,
        };
        if let Some(tag) = &tag
            && reply_may_be_lost(&err)
            && let Some(version) = self.landed(&key, tag).await
        {
            tracing::info!(path = %path, error = %err, "the write's reply was lost, but the write landed");
            return Ok(WriteOutcome {
                version: Some(version),
            });
        }
        match err {
            // A version-checked write to a file that is gone has lost its race too.
            object_store::Error::NotFound { .. } if matches!(mode, WriteMode::IfVersion(_)) => {
                Err(BackendError::Conflict {
                    path: path.to_string(),
                    kind: ConflictKind::VersionMismatch,
                })
            }
            e => Err(map_error(path, e)),
        }
    }

    /// Overwrites above [`MULTIPART_THRESHOLD`] stream as multipart uploads; everything else is
    /// read into memory and written with [`Backend::write`] (see `object/multipart.rs` for why
    /// conditional writes cannot stream).
    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        self.stream_in(path, source, len, mode).await
    }

    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        if path.is_root() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        let key = self.key(path)?;
        // Object stores delete missing keys silently; the contract says NotFound.
        match self.store.head(&key).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => return Err(self.missing(path).await),
            Err(e) => return Err(map_error(path, e)),
        }
        self.store.delete(&key).await.map_err(|e| map_error(path, e))
    }

    async fn list_files_between(
        &self,
        base: &VirtualPath,
        after: Option<&VirtualPath>,
        until: Option<&VirtualPath>,
        limit: usize,
    ) -> Option<Result<FileListing>> {
        if !self.lists_from_key {
            return None;
        }
        Some(self.list_between(base, after, until, limit).await)
    }

    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        let key = self.key(base)?;
        if !base.is_root()
            && let Ok(meta) = self.store.head(&key).await
        {
            return Ok(FileListing {
                files: self.file_entry(&meta).into_iter().collect(),
                truncated: false,
            });
        }
        self.list_between(base, None, None, limit).await
    }
}
