//! [`FilesystemBackend`]: a directory on local disk.

use std::collections::HashMap;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::backend::{
    Backend, ByteRange, Capabilities, Entry, EntryKind, ReadOutput, Version, WriteMode, WriteOutcome,
};
use crate::error::{BackendError, ConflictKind, Result};
use crate::path::VirtualPath;

/// Files under one root directory on local disk.
///
/// Every path resolves inside the root: virtual paths cannot name `..`, and a symlink whose target
/// lies outside the root is refused on every operation (`InvalidPath`) and left out of listings.
/// Writes go to a temporary file that is then renamed into place (create-only writes link it, which
/// fails if the name exists), so a reader never sees half a file.
///
/// Version tags are the modification time in nanoseconds and the size. Writes through this backend
/// move a file's modification time strictly forward, and version-checked writes are serialized per
/// path within the process, so a stale version can never win. Another process editing the same file
/// in the same clock tick with the same size is not detected.
#[derive(Debug)]
pub struct FilesystemBackend {
    root: PathBuf,
    locks: Mutex<HashMap<VirtualPath, Arc<tokio::sync::Mutex<()>>>>,
}

impl FilesystemBackend {
    /// Serve the directory `root`, which must exist.
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let shown = root.as_ref().display().to_string();
        let root = std::fs::canonicalize(root.as_ref()).map_err(|e| BackendError::from_io(&shown, e))?;
        if !root.is_dir() {
            return Err(BackendError::NotADirectory { path: shown });
        }
        Ok(Self {
            root,
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lexical(&self, path: &VirtualPath) -> PathBuf {
        let mut out = self.root.clone();
        out.extend(path.segments());
        out
    }

    fn escape(path: &VirtualPath) -> BackendError {
        BackendError::InvalidPath {
            path: path.to_string(),
            reason: "resolves outside the backend root (through a symlink)".to_owned(),
        }
    }

    /// The host path of an existing file or directory, with every symlink resolved and checked.
    async fn resolve_existing(&self, path: &VirtualPath) -> Result<PathBuf> {
        let real = tokio::fs::canonicalize(self.lexical(path))
            .await
            .map_err(|e| BackendError::from_io(path, e))?;
        if !real.starts_with(&self.root) {
            return Err(Self::escape(path));
        }
        Ok(real)
    }

    /// Check that the deepest existing ancestor of `path` lies inside the root.
    async fn check_ancestors(&self, path: &VirtualPath) -> Result<()> {
        let mut current = path.parent();
        while let Some(dir) = current {
            match tokio::fs::canonicalize(self.lexical(&dir)).await {
                Ok(real) if real.starts_with(&self.root) => return Ok(()),
                Ok(_) => return Err(Self::escape(path)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => current = dir.parent(),
                Err(e) => return Err(BackendError::from_io(path, e)),
            }
        }
        Ok(())
    }

    fn lock_for(&self, path: &VirtualPath) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry(path.clone()).or_default().clone()
    }

    async fn entry_for(&self, path: VirtualPath, meta: &std::fs::Metadata) -> Entry {
        let modified = meta.modified().ok();
        if meta.is_dir() {
            return Entry {
                modified: modified.map(DateTime::<Utc>::from),
                ..Entry::directory(path)
            };
        }
        Entry {
            path,
            kind: EntryKind::File,
            size: meta.len(),
            modified: modified.map(DateTime::<Utc>::from),
            version: Some(version_of(meta)),
        }
    }
}

fn nanos(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn version_of(meta: &std::fs::Metadata) -> Version {
    let mtime = meta.modified().map(nanos).unwrap_or(0);
    Version::new(format!("{mtime:x}-{:x}", meta.len()))
}

fn temp_name(target: &Path) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.trellis-tmp-{}-{n}", std::process::id()))
}

#[async_trait]
impl Backend for FilesystemBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranged_reads: true,
            versioned_writes: true,
            strict_hierarchy: true,
        }
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        let real = self.resolve_existing(dir).await?;
        let mut reader = tokio::fs::read_dir(&real)
            .await
            .map_err(|e| BackendError::from_io(dir, e))?;
        let mut out = Vec::new();
        while let Some(item) = reader
            .next_entry()
            .await
            .map_err(|e| BackendError::from_io(dir, e))?
        {
            let name = item.file_name();
            let Some(name) = name.to_str() else {
                tracing::warn!(dir = %dir, name = ?item.file_name(), "skipping a name that is not UTF-8");
                continue;
            };
            let Ok(child) = dir.join(name) else {
                tracing::warn!(dir = %dir, name, "skipping a name that is not a valid virtual path");
                continue;
            };
            let Ok(kind) = item.file_type().await else {
                continue;
            };
            let meta = if kind.is_symlink() {
                // Follow only links that stay inside the root.
                match tokio::fs::canonicalize(item.path()).await {
                    Ok(target) if target.starts_with(&self.root) => {
                        match tokio::fs::metadata(&target).await {
                            Ok(m) => m,
                            Err(_) => continue,
                        }
                    }
                    _ => continue,
                }
            } else {
                match item.metadata().await {
                    Ok(m) => m,
                    Err(_) => continue,
                }
            };
            if !meta.is_dir() && !meta.is_file() {
                continue;
            }
            out.push(self.entry_for(child, &meta).await);
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        let real = self.resolve_existing(path).await?;
        let meta = tokio::fs::metadata(&real)
            .await
            .map_err(|e| BackendError::from_io(path, e))?;
        Ok(self.entry_for(path.clone(), &meta).await)
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        let real = self.resolve_existing(path).await?;
        let mut file = tokio::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&real)
            .await
            .map_err(|e| BackendError::from_io(path, e))?;
        let meta = file
            .metadata()
            .await
            .map_err(|e| BackendError::from_io(path, e))?;
        if meta.is_dir() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        let size = meta.len();
        let span = range.map(|r| r.clamp(size)).unwrap_or(0..size);
        let mut buf = Vec::with_capacity((span.end - span.start) as usize);
        if span.start > 0 {
            file.seek(SeekFrom::Start(span.start))
                .await
                .map_err(|e| BackendError::from_io(path, e))?;
        }
        file.take(span.end - span.start)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| BackendError::from_io(path, e))?;
        Ok(ReadOutput {
            bytes: Bytes::from(buf),
            size,
            version: Some(version_of(&meta)),
            modified: meta.modified().ok().map(DateTime::<Utc>::from),
        })
    }

    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        if path.is_root() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        self.check_ancestors(path).await?;
        let target = self.lexical(path);
        let Some(parent) = target.parent() else {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        };
        if let Err(e) = tokio::fs::create_dir_all(parent).await {
            return Err(match e.kind() {
                std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotADirectory => {
                    BackendError::NotADirectory {
                        path: path.to_string(),
                    }
                }
                _ => BackendError::from_io(path, e),
            });
        }
        // The parent now exists: make sure no symlink swapped in meanwhile leads out of the root.
        let real_parent = tokio::fs::canonicalize(parent)
            .await
            .map_err(|e| BackendError::from_io(path, e))?;
        if !real_parent.starts_with(&self.root) {
            return Err(Self::escape(path));
        }
        let lock = self.lock_for(path);
        let _guard = lock.lock().await;

        let existing = match tokio::fs::symlink_metadata(&target).await {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(BackendError::from_io(path, e)),
        };
        if let Some(meta) = &existing {
            if meta.is_dir() {
                return Err(BackendError::IsADirectory {
                    path: path.to_string(),
                });
            }
            if meta.file_type().is_symlink() {
                // Writing replaces the link itself; its target must still be inside the root.
                self.resolve_existing(path).await.or_else(|e| match e {
                    BackendError::NotFound { .. } => Ok(PathBuf::new()),
                    other => Err(other),
                })?;
            }
        }
        match (&mode, &existing) {
            (WriteMode::CreateNew, Some(_)) => {
                return Err(BackendError::Conflict {
                    path: path.to_string(),
                    kind: ConflictKind::AlreadyExists,
                });
            }
            (WriteMode::IfVersion(want), found) => {
                let current = match found {
                    Some(_) => tokio::fs::metadata(&target).await.ok().map(|m| version_of(&m)),
                    None => None,
                };
                if current.as_ref() != Some(want) {
                    return Err(BackendError::Conflict {
                        path: path.to_string(),
                        kind: ConflictKind::VersionMismatch,
                    });
                }
            }
            _ => {}
        }
        let previous_mtime = existing.as_ref().and_then(|m| m.modified().ok());

        let temp = temp_name(&target);
        let result = async {
            let mut file = tokio::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(0o644)
                .open(&temp)
                .await?;
            file.write_all(&data).await?;
            file.flush().await?;
            let file = file.into_std().await;
            // Move the modification time strictly forward so the version tag always changes.
            let mut mtime = SystemTime::now();
            if let Some(prev) = previous_mtime
                && mtime <= prev
            {
                mtime = prev + Duration::from_micros(1);
            }
            file.set_modified(mtime)?;
            drop(file);
            if mode == WriteMode::CreateNew {
                tokio::fs::hard_link(&temp, &target).await?;
                tokio::fs::remove_file(&temp).await
            } else {
                tokio::fs::rename(&temp, &target).await
            }
        }
        .await;
        if let Err(e) = result {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(BackendError::from_io(path, e));
        }
        let meta = tokio::fs::metadata(&target)
            .await
            .map_err(|e| BackendError::from_io(path, e))?;
        Ok(WriteOutcome {
            version: Some(version_of(&meta)),
        })
    }

    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        if path.is_root() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        self.check_ancestors(path).await?;
        let target = self.lexical(path);
        let meta = tokio::fs::symlink_metadata(&target)
            .await
            .map_err(|e| BackendError::from_io(path, e))?;
        if meta.is_dir() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        if meta.file_type().is_symlink() {
            // Only links that stay inside the root are visible, so only those can be deleted; the
            // link itself is removed, never its target.
            self.resolve_existing(path).await?;
        }
        tokio::fs::remove_file(&target)
            .await
            .map_err(|e| BackendError::from_io(path, e))
    }
}
