//! [`Workdir::write_back`]: what the command changed, back through the backend (see the parent
//! module for the rules).

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use trellis_backend::sandbox::{ExecFiles, FileChange, FileChangeKind, NotWritten, NotWrittenReason};
use trellis_backend::{Backend, BackendError, Version, VirtualPath, WriteMode, WriteSource};

use super::overlay::Overlay;
use super::protected::protected;
use super::walk::{Changed, Plan, Walked, walk};
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
            at: VirtualPath::root(),
            // Over the thread's base the copy is an overlay's upper layer.
            overlay: self.root_overlay.is_some(),
            // Read-only parts are never written back, and overlays' mount points are walked in
            // their upper layers instead.
            skip: self
                .read_only
                .iter()
                .chain(self.overlays.iter().map(|o| &o.at))
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
            whiteouts,
            opaque,
            upper,
            ..
        } = walked;
        let mut changes = Vec::new();
        let mut writer = Writer {
            files,
            root: &root,
            tag: conflict_tag,
            deadline,
            files_left: &mut files_left,
            changes: &mut changes,
            not_written: &mut not_written,
        };
        writer.write_all(changed, &Basis::Copy(&copied)).await;
        // What the command removed: from a copy, what is no longer there; over the thread's base,
        // what a whiteout or an opaque directory of the upper layer hides.
        let removed = |path: &VirtualPath| match &self.root_overlay {
            None => !present.contains(path),
            Some(_) => {
                whiteouts.iter().any(|w| path.starts_with(w))
                    || opaque
                        .iter()
                        .any(|o| path.starts_with(o) && !upper.contains(path))
            }
        };
        for (path, copied) in &copied {
            if !removed(path) {
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
                Some(stopped) => Some(stopped.not_deleted("the copy")),
                None if Instant::now() >= deadline => Some(late(limits.max_time)),
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
        for overlay in std::mem::take(&mut self.overlays) {
            overlay
                .write_back(files, conflict_tag, deadline, &mut changes, &mut not_written)
                .await;
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        not_written.sort_by(|a, b| a.path.cmp(&b.path));
        (changes, not_written)
    }
}

/// What a changed file's write is checked against.
pub(super) enum Basis<'a> {
    /// The copy: the version each file had when it was materialized.
    Copy(&'a BTreeMap<VirtualPath, Copied>),
    /// An overlay: the file the store holds now, unless it changed since the command started.
    Overlay(&'a Overlay),
}

/// How one changed file is written.
enum Decision {
    Write(WriteMode, FileChangeKind),
    /// Someone else changed it meanwhile: keep the command's version beside it.
    Conflict,
    Fail(String),
}

/// Writes the changed files of one walk through the backend.
pub(super) struct Writer<'a> {
    pub files: &'a ExecFiles,
    /// The walked root (the copy, or an overlay's upper layer).
    pub root: &'a Arc<OwnedFd>,
    pub tag: &'a str,
    pub deadline: Instant,
    /// New files the view can still take (for conflict copies).
    pub files_left: &'a mut usize,
    pub changes: &'a mut Vec<FileChange>,
    pub not_written: &'a mut Vec<NotWritten>,
}

impl Writer<'_> {
    /// Write every file of `changed` (paths in the view; read below the root at their path
    /// relative to `basis`'s mount point), checked against `basis`.
    pub(super) async fn write_all(&mut self, changed: Vec<Changed>, basis: &Basis<'_>) {
        let files = self.files;
        for Changed { path, size } in changed {
            if let Some(what) = protected(&path) {
                self.not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: NotWrittenReason::Protected(what.into()),
                });
                continue;
            }
            if Instant::now() >= self.deadline {
                self.not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: late(files.write_back.max_time),
                });
                continue;
            }
            let at = match basis {
                Basis::Copy(_) => VirtualPath::root(),
                Basis::Overlay(overlay) => overlay.at.clone(),
            };
            let file = Opened {
                root: Arc::clone(self.root),
                relative: PathBuf::from(path.relative_to(&at).unwrap_or_default()),
                size,
            };
            let source = match file.open().await {
                Ok(source) => source,
                Err(e) => {
                    self.not_written.push(failed(&path, e.to_string()));
                    continue;
                }
            };
            let decision = match basis {
                Basis::Copy(copied) => match copied.get(&path) {
                    Some(Copied { version: Some(v), .. }) => {
                        Decision::Write(WriteMode::IfVersion(v.clone()), FileChangeKind::Modified)
                    }
                    Some(Copied { version: None, .. }) => {
                        Decision::Write(WriteMode::Overwrite, FileChangeKind::Modified)
                    }
                    None => Decision::Write(WriteMode::CreateNew, FileChangeKind::Created),
                },
                Basis::Overlay(overlay) => match files.backend.stat(&path).await {
                    Ok(_) if overlay.changed_underneath(&path) => Decision::Conflict,
                    Ok(entry) => match entry.version {
                        Some(v) => Decision::Write(WriteMode::IfVersion(v), FileChangeKind::Modified),
                        None => Decision::Write(WriteMode::Overwrite, FileChangeKind::Modified),
                    },
                    Err(BackendError::NotFound { .. }) => {
                        Decision::Write(WriteMode::CreateNew, FileChangeKind::Created)
                    }
                    Err(e) => Decision::Fail(e.to_string()),
                },
            };
            let conflict = match decision {
                Decision::Write(mode, kind) => {
                    let made = match basis {
                        Basis::Overlay(overlay) => overlay.missing_dirs(&path),
                        Basis::Copy(_) => Vec::new(),
                    };
                    match files.backend.write_stream(&path, source, size, mode).await {
                        Ok(_) => {
                            if let Basis::Overlay(overlay) = basis {
                                overlay.hand_over(&path, &made);
                            }
                            self.changes.push(FileChange { path, kind });
                            continue;
                        }
                        Err(BackendError::Conflict { .. }) => true,
                        Err(e) => {
                            self.not_written.push(failed(&path, e.to_string()));
                            continue;
                        }
                    }
                }
                Decision::Conflict => true,
                Decision::Fail(why) => {
                    self.not_written.push(failed(&path, why));
                    continue;
                }
            };
            if conflict {
                // A conflict copy is one more file in the view: only where it still fits.
                let kept_at = if *self.files_left > 0 {
                    keep_beside(files, &path, self.tag, &file).await
                } else {
                    None
                };
                *self.files_left -= usize::from(kept_at.is_some());
                self.not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: NotWrittenReason::Conflict { kept_at },
                });
            }
        }
    }
}

/// The reason for what the write-back did not get to within its time.
pub(super) fn late(max_time: Duration) -> NotWrittenReason {
    NotWrittenReason::TooLarge(format!(
        "the write-back took longer than its limit of {max_time:?}"
    ))
}

/// The answer when the copy could not be walked at all: nothing is written and nothing deleted.
fn nothing_walked(why: String) -> (Vec<FileChange>, Vec<NotWritten>) {
    let not_written = NotWritten {
        path: "/".into(),
        reason: NotWrittenReason::Failed(why),
    };
    (Vec::new(), vec![not_written])
}

pub(super) fn denied(path: &VirtualPath) -> NotWritten {
    NotWritten {
        path: path.to_string(),
        reason: NotWrittenReason::Denied,
    }
}

pub(super) fn failed(path: &VirtualPath, why: String) -> NotWritten {
    NotWritten {
        path: path.to_string(),
        reason: NotWrittenReason::Failed(why),
    }
}

/// A changed file of the walked root, to be opened (again) as a write's source.
struct Opened {
    root: Arc<OwnedFd>,
    /// Below the root.
    relative: PathBuf,
    /// What the walk saw.
    size: u64,
}

impl Opened {
    /// The file, opened by descriptors without following a link and checked to be a regular
    /// file of the size the walk saw (see [`nofollow::open_exactly`]), as a streamed write's
    /// source: the backend reads it in chunks, never whole.
    async fn open(&self) -> std::io::Result<WriteSource> {
        let (root, relative, size) = (Arc::clone(&self.root), self.relative.clone(), self.size);
        let file = tokio::task::spawn_blocking(move || nofollow::open_exactly(&root, &relative, size))
            .await
            .map_err(std::io::Error::other)??;
        Ok(Box::new(tokio::fs::File::from_std(file)))
    }
}

/// Keep the command's version of a conflicting file at `<path>.conflict-<tag>`, if the rules let
/// the agent write there (the copy is a write like any other). The file is opened again, with
/// the same checks, and streamed like the write that conflicted.
async fn keep_beside(files: &ExecFiles, path: &VirtualPath, tag: &str, file: &Opened) -> Option<VirtualPath> {
    let name = format!("{}.conflict-{tag}", path.file_name()?);
    let beside = path.parent()?.join(&name).ok()?;
    if !files.may_write(&beside) {
        return None;
    }
    let source = file.open().await.ok()?;
    files
        .backend
        .write_stream(&beside, source, file.size, WriteMode::CreateNew)
        .await
        .ok()
        .map(|_| beside)
}

/// Delete `path` if it still has `version` (or if the backend has no versions). `Ok(false)`: it
/// changed meanwhile and was left alone. Already gone counts as deleted.
pub(super) async fn delete_if_unchanged(
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
