//! [`ObjectStoreBackend`]: any `object_store` store (S3, GCS, Azure, local, memory) under a prefix.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as StorePath;
use object_store::{
    GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion,
};

use crate::backend::{
    Backend, ByteRange, Capabilities, Entry, EntryKind, FileListing, ReadOutput, Version, WriteMode,
    WriteOutcome,
};
use crate::error::{BackendError, ConflictKind, Result};
use crate::path::VirtualPath;

/// How to build an [`ObjectStoreBackend`] from a URL.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Builder options as `object_store` spells them (`aws_endpoint`, `aws_allow_http`,
    /// `google_service_account`, `azure_storage_use_emulator`, `timeout`, …). Explicit options win
    /// over the environment.
    pub options: Vec<(String, String)>,
    /// Also read `AWS_*`, `GOOGLE_*` and `AZURE_*` variables from the environment (as the stores'
    /// own `from_env` builders do).
    pub from_env: bool,
}

impl StoreOptions {
    /// Options from the environment only.
    pub fn from_env() -> Self {
        Self {
            options: Vec::new(),
            from_env: true,
        }
    }

    /// Options for an S3-compatible server at `endpoint` (MinIO, moto, R2, …): static credentials,
    /// path-style requests, region `us-east-1`; an `http://` endpoint is allowed.
    pub fn s3_compatible(
        endpoint: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        let endpoint = endpoint.into();
        let allow_http = endpoint.starts_with("http://");
        Self::default()
            .with("aws_endpoint", endpoint)
            .with("aws_allow_http", allow_http.to_string())
            .with("aws_access_key_id", access_key_id)
            .with("aws_secret_access_key", secret_access_key)
            .with("aws_region", "us-east-1")
    }

    /// Add one option.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.push((key.into(), value.into()));
        self
    }
}

/// A backend over any [`ObjectStore`], rooted at a key prefix.
///
/// Directories are key prefixes (there are no empty directories); `ls` is one delimited listing,
/// `list_files` (and so `glob` and `grep`) is one recursive paged listing rather than a walk, and
/// `read_many` runs ranged GETs concurrently. Version tags are the store's ETag and version (S3,
/// Azure) or generation (GCS); version-checked writes use the store's conditional puts. Stores
/// without conditional updates (object_store's local file system) get them emulated under a
/// per-key lock, which is safe only within one process.
///
/// Keys are used as written: a key listed by the store that is not a valid [`VirtualPath`] (for
/// example one holding a percent-escape) is skipped with a warning.
#[derive(Debug, Clone)]
pub struct ObjectStoreBackend {
    store: Arc<dyn ObjectStore>,
    prefix: StorePath,
    emulate_update: bool,
    update_locks: Arc<Mutex<HashMap<StorePath, Arc<tokio::sync::Mutex<()>>>>>,
}

/// Install the process-wide rustls crypto provider (ring) once; reqwest is built without one.
pub(crate) fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl ObjectStoreBackend {
    /// Wrap a store; every key lives under `prefix` (`""` for the whole bucket).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Result<Self> {
        let prefix = StorePath::parse(prefix).map_err(|e| BackendError::InvalidPath {
            path: prefix.to_owned(),
            reason: e.to_string(),
        })?;
        let emulate_update = store.to_string().starts_with("LocalFileSystem");
        Ok(Self {
            store,
            prefix,
            emulate_update,
            update_locks: Arc::default(),
        })
    }

    /// Build from a URL: `s3://bucket/prefix`, `gs://bucket/prefix`, `az://container/prefix`,
    /// `file:///abs/dir`, `memory://` (a new, empty store each call).
    pub fn from_url(url: &str, options: &StoreOptions) -> Result<Self> {
        install_crypto_provider();
        let parsed = url::Url::parse(url).map_err(|e| BackendError::InvalidPath {
            path: url.to_owned(),
            reason: format!("not a URL: {e}"),
        })?;
        let mut opts: Vec<(String, String)> = Vec::new();
        if options.from_env {
            for (key, value) in std::env::vars() {
                if key.starts_with("AWS_") || key.starts_with("GOOGLE_") || key.starts_with("AZURE_") {
                    opts.push((key.to_ascii_lowercase(), value));
                }
            }
        }
        for (key, _) in &options.options {
            check_option_key(&parsed, key).map_err(|reason| BackendError::InvalidPath {
                path: url.to_owned(),
                reason,
            })?;
        }
        opts.extend(options.options.iter().cloned());
        if parsed.scheme() == "file" {
            // object_store's local store needs the directory to exist.
            if let Ok(dir) = parsed.to_file_path() {
                std::fs::create_dir_all(&dir).map_err(|e| BackendError::from_io(url, e))?;
            }
        }
        let (store, prefix) =
            object_store::parse_url_opts(&parsed, opts).map_err(|e| BackendError::InvalidPath {
                path: url.to_owned(),
                reason: e.to_string(),
            })?;
        let store: Arc<dyn ObjectStore> = Arc::from(store);
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

/// Refuse an explicit option the URL's store would silently ignore (object_store skips unknown
/// keys), so a typo is an error rather than a surprise.
fn check_option_key(url: &url::Url, key: &str) -> std::result::Result<(), String> {
    use object_store::ObjectStoreScheme as Scheme;
    let (scheme, _) = Scheme::parse(url).map_err(|e| e.to_string())?;
    let lower = key.to_ascii_lowercase();
    let known = match scheme {
        Scheme::AmazonS3 => lower.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok(),
        Scheme::GoogleCloudStorage => lower.parse::<object_store::gcp::GoogleConfigKey>().is_ok(),
        Scheme::MicrosoftAzure => lower.parse::<object_store::azure::AzureConfigKey>().is_ok(),
        // Local and in-memory stores take no options.
        _ => false,
    };
    if known {
        Ok(())
    } else {
        Err(format!("unknown option `{key}` for this store"))
    }
}

fn encode_version(e_tag: Option<String>, version: Option<String>) -> Version {
    Version::new(serde_json::json!([e_tag, version]).to_string())
}

fn decode_version(version: &Version) -> Option<UpdateVersion> {
    let (e_tag, version): (Option<String>, Option<String>) = serde_json::from_str(version.as_str()).ok()?;
    Some(UpdateVersion { e_tag, version })
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
        match self
            .store
            .put_opts(&key, data.into(), PutOptions::from(put_mode))
            .await
        {
            Ok(put) => Ok(WriteOutcome {
                version: Some(encode_version(put.e_tag, put.version)),
            }),
            // A version-checked write to a file that is gone has lost its race too.
            Err(object_store::Error::NotFound { .. }) if matches!(mode, WriteMode::IfVersion(_)) => {
                Err(BackendError::Conflict {
                    path: path.to_string(),
                    kind: ConflictKind::VersionMismatch,
                })
            }
            Err(e) => Err(map_error(path, e)),
        }
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
        let prefix = (!key.as_ref().is_empty()).then_some(&key);
        let mut stream = self.store.list(prefix);
        let mut files = Vec::new();
        let mut truncated = false;
        while let Some(meta) = stream.try_next().await.map_err(|e| map_error(base, e))? {
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
