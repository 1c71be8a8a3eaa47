//! How a saved step becomes the thread's latest: [`BackendCheckpointer::commit`] writes the step
//! object create-only, then moves the head to it with a version-checked link or write. Kept apart
//! from `backend.rs` (what a save writes and a load reads) because it is the one place where two
//! writers of a thread meet: exactly one of them moves the head.

use std::sync::atomic::Ordering;

use super::appended::{LOG_VERSION, LogAt, frame, log_version};
use super::backend::BackendCheckpointer;
use super::record::{Head, LOG_FORMAT, SinceBase, StepName};
use super::{CheckpointError, CheckpointVersion};
use crate::backend::{AppendMode, BackendError, ConflictKind, Version, WriteMode};
use crate::runtime::context::ThreadId;

impl BackendCheckpointer {
    /// Write one step object (`since`: the steps before it from the latest base step) and move
    /// the head to it. `expected` decides the write mode of the head. Where the store links
    /// (local disk), the head becomes a second name of the step object: no file is created for
    /// it and none freed; elsewhere it is a small object naming the step.
    pub(super) async fn commit(
        &self,
        thread_id: &ThreadId,
        step: &StepName,
        since: &SinceBase,
        bytes: Vec<u8>,
        saved_at_ms: u64,
        expected: Option<&CheckpointVersion>,
    ) -> Result<CheckpointVersion, CheckpointError> {
        let step_path = self.step_path(thread_id, step)?;
        match self
            .backend
            .write(&step_path, bytes.into(), WriteMode::CreateNew)
            .await
        {
            Ok(_) => {}
            Err(BackendError::Conflict { .. }) => return Err(Self::conflict(thread_id)),
            Err(e) => return Err(Self::storage(thread_id, e)),
        }
        let mode = match expected {
            None => WriteMode::CreateNew,
            Some(v) => WriteMode::IfVersion(Version::new(v.as_str())),
        };
        let path = self.path(thread_id)?;
        let linked = if self.links.load(Ordering::Relaxed) {
            self.backend.link(&step_path, &path, mode.clone()).await
        } else {
            None
        };
        let moved = match linked {
            Some(moved) => moved,
            None => {
                self.links.store(false, Ordering::Relaxed);
                let head = Head {
                    format: LOG_FORMAT,
                    thread_id: thread_id.clone(),
                    seq: step.seq,
                    step: step.file_name(),
                    saved_at_ms,
                    since_base: Some(since.clone()),
                    linked: false,
                };
                let head = serde_json::to_vec(&head).map_err(|source| CheckpointError::Encode {
                    thread_id: thread_id.clone(),
                    source,
                })?;
                self.backend.write(&path, head.into(), mode).await
            }
        };
        match moved {
            Ok(outcome) => match outcome.version {
                Some(v) => Ok(CheckpointVersion::new(v.as_str())),
                None => Err(CheckpointError::Unsupported(format!(
                    "{path} was written without a version tag"
                ))),
            },
            Err(e) => {
                // The step object is unreferenced now; removing it is only tidying.
                let _ = self.backend.delete(&step_path).await;
                self.cache.forget(thread_id);
                match e {
                    BackendError::Conflict {
                        kind: ConflictKind::AlreadyExists | ConflictKind::VersionMismatch,
                        ..
                    } => Err(Self::conflict(thread_id)),
                    e => Err(Self::storage(thread_id, e)),
                }
            }
        }
    }
}

impl BackendCheckpointer {
    /// Append the step object `bytes` to the thread's file (`appended.rs`): after `at`, checked
    /// against `expected`, or, for a new thread (`at` and `expected` both `None`), as a new file.
    /// `Ok(None)` when the store cannot append: the caller writes an object for the step, and new
    /// threads get one object per step from then on. Of two writers on one version exactly one
    /// appends; the other gets `Conflict` and nothing of its step is written.
    pub(super) async fn append_step(
        &self,
        thread_id: &ThreadId,
        step: &StepName,
        bytes: &[u8],
        at: Option<LogAt>,
        expected: Option<&CheckpointVersion>,
    ) -> Result<Option<(CheckpointVersion, LogAt)>, CheckpointError> {
        let path = self.log_path(thread_id)?;
        let (mode, start) = match (at, expected) {
            (Some(at), Some(version)) => {
                let Some(tag) = version.as_str().strip_prefix(LOG_VERSION) else {
                    return Err(Self::conflict(thread_id));
                };
                let mode = AppendMode::IfVersion {
                    version: Version::new(tag),
                    keep: at.end,
                };
                (mode, at.end)
            }
            (None, None) => {
                // Not new if it has a head object (a thread of the one-object-per-step layout).
                match self.backend.stat(&self.path(thread_id)?).await {
                    Ok(_) => return Err(Self::conflict(thread_id)),
                    Err(BackendError::NotFound { .. }) => {}
                    Err(e) => return Err(Self::storage(thread_id, e)),
                }
                (AppendMode::CreateNew, 0)
            }
            _ => return Err(Self::conflict(thread_id)),
        };
        let base = match at {
            Some(at) if !step.base => at.base,
            _ => start,
        };
        let record = frame(bytes, start, base);
        let end = start + record.len() as u64;
        let Some(appended) = self.backend.append(&path, record.into(), mode).await else {
            self.appends.cannot();
            if at.is_some() {
                // Read through a store that cannot append (a wrapper that does not forward it):
                // writing the step elsewhere would fork the thread.
                return Err(CheckpointError::Unsupported(format!(
                    "thread {thread_id} keeps its steps in one file ({path}), and this store cannot append to it"
                )));
            }
            return Ok(None);
        };
        match appended {
            Ok(out) => match out.version {
                Some(v) => Ok(Some((log_version(&v), LogAt { end, base }))),
                None => Err(CheckpointError::Unsupported(format!(
                    "{path} was appended to without a version tag"
                ))),
            },
            Err(e) => {
                self.cache.forget(thread_id);
                match e {
                    BackendError::Conflict { .. } => Err(Self::conflict(thread_id)),
                    e => Err(Self::storage(thread_id, e)),
                }
            }
        }
    }
}
