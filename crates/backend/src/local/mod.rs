//! [`FilesystemBackend`]: a directory on local disk.

mod at;
mod beneath;
mod fast_path;
mod list;
mod offload;
mod stream;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::os::unix::fs::OpenOptionsExt;
use tokio::io::AsyncWriteExt;

use self::beneath::{Beneath, read_range};
use self::fast_path::{fast_metadata, fast_read, in_batches, output};
use self::list::list_dir;
use crate::backend::{
    AppendMode, Backend, ByteRange, Capabilities, Entry, EntryKind, ReadOutput, Version, WriteMode,
    WriteOutcome,
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
///
/// On a local file system (ext4, xfs, btrfs, tmpfs, overlayfs, zfs, …), small writes, hard links,
/// `stat`s and small reads run on the calling task and the rest on tokio's blocking pool; on any
/// other (NFS, SMB, FUSE, …) everything runs on the pool (`offload.rs` says why, with
/// measurements). [`FilesystemBackend::offload_all`] sends everything to the pool anyway.
#[derive(Debug)]
pub struct FilesystemBackend {
    root: PathBuf,
    beneath: Option<Arc<Beneath>>,
    locks: Mutex<HashMap<VirtualPath, Arc<tokio::sync::Mutex<()>>>>,
    /// The local file system the root is on, by name (see
    /// [`FilesystemBackend::local_file_system`]).
    file_system: Option<&'static str>,
    /// Small operations run on the calling task (on a local file system, unless
    /// [`FilesystemBackend::offload_all`]).
    inline_small: bool,
}

/// Paths per blocking batch in `read_many`.
const READ_BATCH: usize = 128;

impl FilesystemBackend {
    /// Serve the directory `root`, which must exist.
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let shown = root.as_ref().display().to_string();
        let root = std::fs::canonicalize(root.as_ref()).map_err(|e| BackendError::from_io(&shown, e))?;
        if !root.is_dir() {
            return Err(BackendError::NotADirectory { path: shown });
        }
        let file_system = offload::local_file_system(&root);
        Ok(Self {
            beneath: Beneath::new(&root).map(Arc::new),
            file_system,
            inline_small: file_system.is_some(),
            root,
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// Every operation on tokio's blocking pool, small ones included, whatever the file system.
    /// [`FilesystemBackend::new`] already does so off the local file systems it knows; this is
    /// for a root whose file system reads as local but may still wait (a local mount of slow or
    /// remote storage).
    pub fn offload_all(mut self) -> Self {
        self.inline_small = false;
        self
    }

    /// The name of the local file system the root is on (`ext4`, `xfs`, `tmpfs`, …), as
    /// `statfs` reported it when the backend was made; `None` for any file system not known to be
    /// local (NFS, SMB, FUSE, …), where every operation goes to the blocking pool.
    pub fn local_file_system(&self) -> Option<&'static str> {
        self.file_system
    }

    /// Whether small operations run on the calling task (see the type's docs).
    pub fn runs_small_operations_inline(&self) -> bool {
        self.inline_small
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

    /// Read through `openat2` ([`fast_path::read`]); `None` when the slow path must decide.
    async fn read_fast(&self, path: &VirtualPath, range: Option<ByteRange>) -> Option<Result<ReadOutput>> {
        let beneath = self.beneath.as_ref()?;
        let relative = path.as_str().trim_start_matches('/').to_owned();
        fast_path::read(beneath, relative, range, path.clone(), self.inline_small).await
    }

    /// The slow path: canonicalize, check, then read.
    async fn read_checked(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        let real = self.resolve_existing(path).await?;
        let shown = path.clone();
        tokio::task::spawn_blocking(move || {
            let file = std::fs::OpenOptions::new()
                .read(true)
                // Non-blocking: a FIFO must not hang the open (read_range refuses it).
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&real)
                .map_err(|e| BackendError::from_io(&shown, e))?;
            let (bytes, meta) = read_range(file, range).map_err(|e| BackendError::from_io(&shown, e))?;
            Ok(output(bytes, &meta))
        })
        .await
        .unwrap_or_else(|e| Err(BackendError::other(path, e)))
    }

    fn entry_for_sync(&self, path: VirtualPath, meta: &std::fs::Metadata) -> Entry {
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
    version_parts(meta.modified().ok(), meta.len())
}

/// The version tag of a file modified at `modified` holding `len` bytes.
fn version_parts(modified: Option<SystemTime>, len: u64) -> Version {
    let mtime = modified.map(nanos).unwrap_or(0);
    Version::new(format!("{mtime:x}-{len:x}"))
}

fn temp_name(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(at::temp_for(&name))
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

    /// The whole backend: its root directory.
    fn local_dirs(&self) -> Vec<crate::backend::LocalDir> {
        vec![crate::backend::LocalDir {
            at: VirtualPath::root(),
            host: self.root.clone(),
        }]
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        if let Some(beneath) = self.beneath.clone()
            && beneath.supported()
        {
            let shown = dir.clone();
            let listed = tokio::task::spawn_blocking(move || at::list(&beneath, &shown))
                .await
                .map_err(|e| BackendError::other(dir, e))?;
            if let Some(listed) = listed {
                return listed;
            }
        }
        let real = self.resolve_existing(dir).await?;
        let root = self.root.clone();
        let shown = dir.clone();
        // One blocking task for the whole listing: per-entry async calls would each hop to the pool.
        let listed = tokio::task::spawn_blocking(move || list_dir(&real, &root, &shown))
            .await
            .map_err(|e| BackendError::other(dir, e))??;
        Ok(listed
            .into_iter()
            .map(|(child, meta)| self.entry_for_sync(child, &meta))
            .collect())
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        if let Some(beneath) = self.beneath.clone()
            && !path.is_root()
        {
            let relative = path.as_str().trim_start_matches('/').to_owned();
            let fast = offload::run(self.inline_small, move || fast_metadata(&beneath, &relative))
                .await
                .ok()
                .flatten();
            if let Some(meta) = fast {
                let meta = meta.map_err(|e| BackendError::from_io(path, e))?;
                return Ok(self.entry_for_sync(path.clone(), &meta));
            }
        }
        let real = self.resolve_existing(path).await?;
        let meta = tokio::fs::metadata(&real)
            .await
            .map_err(|e| BackendError::from_io(path, e))?;
        Ok(self.entry_for_sync(path.clone(), &meta))
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        if path.is_root() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        match self.read_fast(path, range).await {
            Some(result) => result,
            None => self.read_checked(path, range).await,
        }
    }

    async fn stat_many(&self, paths: &[VirtualPath]) -> Vec<Result<Entry>> {
        let Some(beneath) = self.beneath.clone() else {
            return futures::stream::iter(paths.iter().cloned())
                .map(|p| async move { self.stat(&p).await })
                .buffered(crate::backend::DEFAULT_READ_CONCURRENCY)
                .collect()
                .await;
        };
        let fast = in_batches(&beneath, paths, |beneath, p| {
            if p.is_root() {
                return None;
            }
            fast_metadata(beneath, p.as_str().trim_start_matches('/'))
        })
        .await;
        let mut out = Vec::with_capacity(paths.len());
        for (path, fast) in paths.iter().zip(fast) {
            out.push(match fast {
                Some(meta) => meta
                    .map(|meta| self.entry_for_sync(path.clone(), &meta))
                    .map_err(|e| BackendError::from_io(path, e)),
                None => self.stat(path).await,
            });
        }
        out
    }

    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        let Some(beneath) = self.beneath.clone() else {
            return futures::stream::iter(paths.iter().cloned())
                .map(|p| async move { self.read(&p, range).await })
                .buffered(crate::backend::DEFAULT_READ_CONCURRENCY)
                .collect()
                .await;
        };
        let fast = in_batches(&beneath, paths, move |beneath, p| {
            if p.is_root() {
                return Some(Err(BackendError::IsADirectory { path: p.to_string() }));
            }
            fast_read(beneath, p.as_str().trim_start_matches('/'), range, p)
        })
        .await;
        let mut out = Vec::with_capacity(paths.len());
        for (path, fast) in paths.iter().zip(fast) {
            out.push(match fast {
                Some(result) => result,
                None => self.read_checked(path, range).await,
            });
        }
        out
    }

    async fn link(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        mode: WriteMode,
    ) -> Option<Result<WriteOutcome>> {
        if from.is_root() || to.is_root() {
            let path = if from.is_root() { from } else { to };
            return Some(Err(BackendError::IsADirectory {
                path: path.to_string(),
            }));
        }
        let beneath = self.beneath.clone().filter(|b| b.supported())?;
        let lock = self.lock_for(to);
        let _guard = lock.lock().await;
        let (from, shown) = (from.clone(), to.clone());
        let linked = offload::run(self.inline_small, move || {
            at::link(&beneath, &from, &shown, &mode)
        })
        .await
        .map_err(|e| BackendError::other(to, e));
        match linked {
            Ok(linked) => linked.map(|r| {
                r.map(|version| WriteOutcome {
                    version: Some(version),
                })
            }),
            Err(e) => Some(Err(e)),
        }
    }

    async fn append(
        &self,
        path: &VirtualPath,
        data: Bytes,
        mode: AppendMode,
    ) -> Option<Result<WriteOutcome>> {
        if path.is_root() {
            return Some(Err(BackendError::IsADirectory {
                path: path.to_string(),
            }));
        }
        let beneath = self.beneath.clone().filter(|b| b.supported())?;
        let lock = self.lock_for(path);
        let _guard = lock.lock().await;
        let inline = self.inline_small && data.len() <= offload::INLINE_MAX;
        let shown = path.clone();
        let appended = offload::run(inline, move || at::append(&beneath, &shown, &data, &mode))
            .await
            .map_err(|e| BackendError::other(path, e));
        match appended {
            Ok(appended) => appended.map(|r| {
                r.map(|version| WriteOutcome {
                    version: Some(version),
                })
            }),
            Err(e) => Some(Err(e)),
        }
    }

    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        if path.is_root() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        if let Some(beneath) = self.beneath.clone()
            && beneath.supported()
        {
            let lock = self.lock_for(path);
            let _guard = lock.lock().await;
            let (shown, data, mode) = (path.clone(), data.clone(), mode.clone());
            let inline = self.inline_small && data.len() <= offload::INLINE_MAX;
            let written = offload::run(inline, move || at::write(&beneath, &shown, &data, &mode))
                .await
                .map_err(|e| BackendError::other(path, e))?;
            if let Some(written) = written {
                return written.map(|version| WriteOutcome {
                    version: Some(version),
                });
            }
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

    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: crate::WriteSource,
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
        if let Some(beneath) = self.beneath.clone()
            && beneath.supported()
        {
            let shown = path.clone();
            let deleted = tokio::task::spawn_blocking(move || at::delete(&beneath, &shown))
                .await
                .map_err(|e| BackendError::other(path, e))?;
            if let Some(deleted) = deleted {
                return deleted;
            }
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
