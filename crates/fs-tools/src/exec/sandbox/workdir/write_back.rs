//! [`Workdir::write_back`]: what the command changed, back through the backend (see the parent
//! module for the rules).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use trellis_backend::sandbox::{ExecFiles, FileChange, FileChangeKind, NotWritten, NotWrittenReason};
use trellis_backend::{Backend, BackendError, Version, VirtualPath, WriteMode};

use super::protected::protected;
use super::walk::{Changed, Plan, Stopped, Walked, walk};
use super::{Copied, Workdir, nofollow};

impl Workdir {
    /// Write back what the command changed (call only once every process of it is gone), within
    /// `files.write_back`'s bounds (see `walk.rs`).
    pub async fn write_back(
        mut self,
        files: &ExecFiles,
        conflict_tag: &str,
    ) -> (Vec<FileChange>, Vec<NotWritten>) {
        let limits = files.write_back;
        let now = Instant::now();
        // A bound too far to represent is no bound.
        let deadline = now
            .checked_add(limits.max_time)
            .unwrap_or(now + Duration::from_secs(100 * 365 * 86_400));
        let root = match nofollow::open_root(self.dir.path()) {
            Ok(root) => Arc::new(root),
            Err(e) => return nothing_walked(format!("the copy could not be opened: {e}")),
        };
        let plan = Plan {
            root: Arc::clone(&root),
            skip: self
                .read_only
                .iter()
                .map(|p| PathBuf::from(p.as_str().trim_start_matches('/')))
                .collect(),
            files: files.clone(),
            copied: std::mem::take(&mut self.copied),
            counted: self.counted,
            deadline,
        };
        let walked = match tokio::task::spawn_blocking(move || walk(plan)).await {
            Ok(walked) => walked,
            Err(e) => return nothing_walked(format!("the walk of the copy failed: {e}")),
        };
        let Walked {
            copied,
            changed,
            mut not_written,
            present,
            stopped,
            mut files_left,
        } = walked;
        let late = || {
            NotWrittenReason::TooLarge(format!(
                "the write-back took longer than its limit of {:?}",
                limits.max_time
            ))
        };
        let mut changes = Vec::new();
        for Changed { path, size } in changed {
            if let Some(what) = protected(&path) {
                not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: NotWrittenReason::Protected(what.into()),
                });
                continue;
            }
            if Instant::now() >= deadline {
                not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: late(),
                });
                continue;
            }
            let relative = PathBuf::from(path.as_str().trim_start_matches('/'));
            let root = Arc::clone(&root);
            let data =
                match tokio::task::spawn_blocking(move || nofollow::read_exactly(&root, &relative, size))
                    .await
                {
                    Ok(Ok(data)) => Bytes::from(data),
                    Ok(Err(e)) => {
                        not_written.push(failed(&path, e.to_string()));
                        continue;
                    }
                    Err(e) => {
                        not_written.push(failed(&path, e.to_string()));
                        continue;
                    }
                };
            let (mode, kind) = match copied.get(&path) {
                Some(Copied { version: Some(v), .. }) => {
                    (WriteMode::IfVersion(v.clone()), FileChangeKind::Modified)
                }
                Some(Copied { version: None, .. }) => (WriteMode::Overwrite, FileChangeKind::Modified),
                None => (WriteMode::CreateNew, FileChangeKind::Created),
            };
            match files.backend.write(&path, data.clone(), mode).await {
                Ok(_) => changes.push(FileChange { path, kind }),
                Err(BackendError::Conflict { .. }) => {
                    // A conflict copy is one more file in the view: only where it still fits.
                    let kept_at = if files_left > 0 {
                        keep_beside(files, &path, conflict_tag, data).await
                    } else {
                        None
                    };
                    files_left -= usize::from(kept_at.is_some());
                    not_written.push(NotWritten {
                        path: path.to_string(),
                        reason: NotWrittenReason::Conflict { kept_at },
                    });
                }
                Err(e) => not_written.push(failed(&path, e.to_string())),
            }
        }
        for (path, copied) in &copied {
            if present.contains(path) {
                continue;
            }
            if !files.may_write(path) {
                not_written.push(denied(path));
                continue;
            }
            if let Some(what) = protected(path) {
                not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: NotWrittenReason::Protected(what.into()),
                });
                continue;
            }
            let reason = match &stopped {
                Some(Stopped::Unreadable) => Some(NotWrittenReason::Failed(
                    "not deleted: part of the copy could not be read back, so a removed file cannot be told from a moved one".into(),
                )),
                Some(Stopped::Bound(bound)) => Some(NotWrittenReason::TooLarge(format!(
                    "not deleted: {bound}, so the walk did not reach all of the copy, and a removed file cannot be told from one it did not reach"
                ))),
                None if Instant::now() >= deadline => Some(late()),
                None => None,
            };
            if let Some(reason) = reason {
                not_written.push(NotWritten {
                    path: path.to_string(),
                    reason,
                });
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

/// The answer when the copy could not be walked at all: nothing is written and nothing deleted.
fn nothing_walked(why: String) -> (Vec<FileChange>, Vec<NotWritten>) {
    let not_written = NotWritten {
        path: "/".into(),
        reason: NotWrittenReason::Failed(why),
    };
    (Vec::new(), vec![not_written])
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
