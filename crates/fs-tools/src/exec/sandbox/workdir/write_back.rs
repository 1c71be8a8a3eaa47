//! [`Workdir::write_back`]: what the command changed, back through the backend (see the parent
//! module for the rules).

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;
use trellis_backend::sandbox::{ExecFiles, FileChange, FileChangeKind, NotWritten, NotWrittenReason};
use trellis_backend::{Backend, BackendError, Version, VirtualPath, WriteMode};

use super::{Copied, RESERVED, Workdir, materialized_mtime};

impl Workdir {
    /// Write back what the command changed (call only once every process of it is gone).
    pub async fn write_back(
        self,
        files: &ExecFiles,
        conflict_tag: &str,
    ) -> (Vec<FileChange>, Vec<NotWritten>) {
        let root = self.dir.path().to_path_buf();
        let skip: Vec<PathBuf> = self.read_only.iter().map(|p| self.host_path(p)).collect();
        let walked = tokio::task::spawn_blocking(move || walk(&root, &skip))
            .await
            .unwrap_or_else(|e| {
                vec![Found::Unreadable {
                    path: "/".into(),
                    error: format!("the walk failed: {e}"),
                }]
            });
        let mut changes = Vec::new();
        let mut not_written = Vec::new();
        let mut present = BTreeSet::new();
        // A file the walk did not see may be below what it could not read (or moved there): with
        // any part unread, nothing is deleted.
        let mut unread = false;
        for found in walked {
            let path = match found {
                Found::Unreadable { path, error } => {
                    unread = true;
                    not_written.push(NotWritten {
                        path,
                        reason: NotWrittenReason::Failed(format!(
                            "could not be read back ({error}); nothing in it was written back, and nothing the command may have removed was deleted"
                        )),
                    });
                    continue;
                }
                Found::File { path, size, mtime } => {
                    present.insert(path.clone());
                    let unchanged = self
                        .copied
                        .get(&path)
                        .is_some_and(|c| c.size == size && mtime == Some(materialized_mtime()));
                    if unchanged {
                        continue;
                    }
                    path
                }
                Found::Other(path) => {
                    if let Ok(v) = VirtualPath::parse(&path)
                        && self.copied.contains_key(&v)
                    {
                        present.insert(v);
                    }
                    not_written.push(NotWritten {
                        path,
                        reason: NotWrittenReason::NotARegularFile,
                    });
                    continue;
                }
                Found::BadName(path) => {
                    not_written.push(NotWritten {
                        path,
                        reason: NotWrittenReason::InvalidName,
                    });
                    continue;
                }
            };
            if !files.may_write(&path) {
                not_written.push(denied(&path));
                continue;
            }
            let data = match read_no_follow(&self.host_path(&path)) {
                Ok(data) => Bytes::from(data),
                Err(e) => {
                    not_written.push(failed(&path, e.to_string()));
                    continue;
                }
            };
            let (mode, kind) = match self.copied.get(&path) {
                Some(Copied { version: Some(v), .. }) => {
                    (WriteMode::IfVersion(v.clone()), FileChangeKind::Modified)
                }
                Some(Copied { version: None, .. }) => (WriteMode::Overwrite, FileChangeKind::Modified),
                None => (WriteMode::CreateNew, FileChangeKind::Created),
            };
            match files.backend.write(&path, data.clone(), mode).await {
                Ok(_) => changes.push(FileChange { path, kind }),
                Err(BackendError::Conflict { .. }) => {
                    let kept_at = keep_beside(files, &path, conflict_tag, data).await;
                    not_written.push(NotWritten {
                        path: path.to_string(),
                        reason: NotWrittenReason::Conflict { kept_at },
                    });
                }
                Err(e) => not_written.push(failed(&path, e.to_string())),
            }
        }
        for (path, copied) in &self.copied {
            if present.contains(path) {
                continue;
            }
            if !files.may_write(path) {
                not_written.push(denied(path));
                continue;
            }
            if unread {
                not_written.push(failed(
                    path,
                    "not deleted: part of the copy could not be read back, so a removed file cannot be told from a moved one".into(),
                ));
                continue;
            }
            match delete_if_unchanged(files.backend.as_ref(), path, copied.version.as_ref()).await {
                Ok(true) => changes.push(FileChange {
                    path: path.clone(),
                    kind: FileChangeKind::Deleted,
                }),
                Ok(false) => not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: NotWrittenReason::Conflict { kept_at: None },
                }),
                Err(e) => not_written.push(failed(path, e.to_string())),
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        not_written.sort_by(|a, b| a.path.cmp(&b.path));
        (changes, not_written)
    }
}

fn denied(path: &VirtualPath) -> NotWritten {
    NotWritten {
        path: path.to_string(),
        reason: NotWrittenReason::Denied,
    }
}

fn failed(path: &VirtualPath, why: String) -> NotWritten {
    NotWritten {
        path: path.to_string(),
        reason: NotWrittenReason::Failed(why),
    }
}

/// Keep the command's version of a conflicting file at `<path>.conflict-<tag>`, if the rules let
/// the agent write there (the copy is a write like any other).
async fn keep_beside(files: &ExecFiles, path: &VirtualPath, tag: &str, data: Bytes) -> Option<VirtualPath> {
    let name = format!("{}.conflict-{tag}", path.file_name()?);
    let beside = path.parent()?.join(&name).ok()?;
    if !files.may_write(&beside) {
        return None;
    }
    files
        .backend
        .write(&beside, data, WriteMode::CreateNew)
        .await
        .ok()
        .map(|_| beside)
}

/// Delete `path` if it still has `version` (or if the backend has no versions). `Ok(false)`: it
/// changed meanwhile and was left alone. Already gone counts as deleted.
async fn delete_if_unchanged(
    backend: &dyn Backend,
    path: &VirtualPath,
    version: Option<&Version>,
) -> Result<bool, BackendError> {
    match backend.stat(path).await {
        Ok(entry) if version.is_some() && entry.version.as_ref() != version => Ok(false),
        Ok(_) => match backend.delete(path).await {
            Ok(()) | Err(BackendError::NotFound { .. }) => Ok(true),
            Err(e) => Err(e),
        },
        Err(BackendError::NotFound { .. }) => Ok(true),
        Err(e) => Err(e),
    }
}

/// Something found in the copy after the command ran.
#[derive(Debug)]
enum Found {
    File {
        path: VirtualPath,
        size: u64,
        mtime: Option<SystemTime>,
    },
    /// A symbolic link, FIFO, socket or device.
    Other(String),
    /// A name that is not a valid virtual path.
    BadName(String),
    /// A directory that could not be listed, or an entry that could not be examined (by its
    /// lossy virtual name): what is below it is unknown.
    Unreadable { path: String, error: String },
}

/// Walk the copy without following links, leaving out reserved top-level names and `skip`.
fn walk(root: &Path, skip: &[PathBuf]) -> Vec<Found> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    let name_of = |host: &Path| {
        host.strip_prefix(root)
            .map(|rel| format!("/{}", rel.to_string_lossy()))
            .unwrap_or_default()
    };
    while let Some(dir) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => {
                found.push(Found::Unreadable {
                    path: name_of(&dir),
                    error: e.to_string(),
                });
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    found.push(Found::Unreadable {
                        path: name_of(&dir),
                        error: e.to_string(),
                    });
                    break;
                }
            };
            let host = entry.path();
            if dir == root && entry.file_name().to_str().is_some_and(|n| RESERVED.contains(&n)) {
                continue;
            }
            if skip.contains(&host) {
                continue;
            }
            let virtual_name = name_of(&host);
            let meta = match fs::symlink_metadata(&host) {
                Ok(meta) => meta,
                Err(e) => {
                    found.push(Found::Unreadable {
                        path: virtual_name,
                        error: e.to_string(),
                    });
                    continue;
                }
            };
            let kind = meta.file_type();
            if kind.is_dir() {
                stack.push(host);
                continue;
            }
            let path = match host.strip_prefix(root).ok().and_then(|r| r.to_str()) {
                Some(rel) => VirtualPath::parse(&format!("/{rel}")).ok(),
                None => None,
            };
            let Some(path) = path else {
                found.push(Found::BadName(virtual_name));
                continue;
            };
            if kind.is_file() {
                found.push(Found::File {
                    path,
                    size: meta.size(),
                    mtime: meta.modified().ok(),
                });
            } else {
                found.push(Found::Other(path.to_string()));
            }
        }
    }
    found
}

/// Read a file without following a symbolic link at its last component.
fn read_no_follow(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    Ok(data)
}
