//! [`BackendCheckpointer`]: threads saved through a storage [`Backend`].

use std::sync::Arc;

use async_trait::async_trait;
use trellis_backend::{Backend, BackendError, ConflictKind, Version, VirtualPath, WriteMode};

use super::{
    CHECKPOINT_FORMAT, Checkpoint, CheckpointError, CheckpointVersion, Checkpointer, StoredCheckpoint,
};
use crate::context::ThreadId;

/// Threads saved as JSON files through any [`Backend`]: `{root}/{thread_id}/checkpoint.json`.
///
/// Saves are version-checked writes ([`WriteMode::CreateNew`] for a new thread,
/// [`WriteMode::IfVersion`] after), so on a shared store (an `s3://` bucket through
/// `ObjectStoreBackend`) several processes can run threads, resume each other's threads, and never
/// clobber one: the second writer gets [`CheckpointError::Conflict`].
#[derive(Debug, Clone)]
pub struct BackendCheckpointer {
    backend: Arc<dyn Backend>,
    root: VirtualPath,
}

const FILE_NAME: &str = "checkpoint.json";

impl BackendCheckpointer {
    /// Checkpoints under `root` of `backend`. Fails when the backend cannot do version-checked writes.
    pub fn new(backend: Arc<dyn Backend>, root: VirtualPath) -> Result<Self, CheckpointError> {
        if !backend.capabilities().versioned_writes {
            return Err(CheckpointError::Unsupported(format!(
                "backend {backend:?} has no version-checked writes"
            )));
        }
        Ok(Self { backend, root })
    }

    /// Where the thread's checkpoint lives.
    pub fn path(&self, thread_id: &ThreadId) -> Result<VirtualPath, CheckpointError> {
        // A ThreadId is always a valid path segment; the error path is defensive.
        self.root
            .join(thread_id.as_str())
            .and_then(|dir| dir.join(FILE_NAME))
            .map_err(|e| Self::storage(thread_id, BackendError::invalid_path(thread_id.as_str(), e)))
    }

    fn storage(thread_id: &ThreadId, source: BackendError) -> CheckpointError {
        CheckpointError::Storage {
            thread_id: thread_id.clone(),
            source,
        }
    }
}

#[async_trait]
impl Checkpointer for BackendCheckpointer {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        let path = self.path(thread_id)?;
        let out = match self.backend.read(&path, None).await {
            Ok(out) => out,
            Err(BackendError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(Self::storage(thread_id, e)),
        };
        let Some(version) = out.version else {
            return Err(CheckpointError::Unsupported(format!(
                "{path} was read without a version tag"
            )));
        };
        // Check the format before decoding the whole state.
        #[derive(serde::Deserialize)]
        struct Header {
            format: u32,
        }
        let header: Header =
            serde_json::from_slice(&out.bytes).map_err(|source| CheckpointError::Decode {
                thread_id: thread_id.clone(),
                source,
            })?;
        if header.format != CHECKPOINT_FORMAT {
            return Err(CheckpointError::UnsupportedFormat {
                thread_id: thread_id.clone(),
                format: header.format,
            });
        }
        let checkpoint: Checkpoint =
            serde_json::from_slice(&out.bytes).map_err(|source| CheckpointError::Decode {
                thread_id: thread_id.clone(),
                source,
            })?;
        Ok(Some(StoredCheckpoint {
            checkpoint,
            version: CheckpointVersion::new(version.as_str()),
        }))
    }

    async fn save(
        &self,
        checkpoint: Checkpoint,
        expected: Option<&CheckpointVersion>,
    ) -> Result<CheckpointVersion, CheckpointError> {
        let thread_id = &checkpoint.thread_id;
        let bytes = serde_json::to_vec(&checkpoint).map_err(|source| CheckpointError::Encode {
            thread_id: thread_id.clone(),
            source,
        })?;
        let mode = match expected {
            None => WriteMode::CreateNew,
            Some(v) => WriteMode::IfVersion(Version::new(v.as_str())),
        };
        let path = self.path(thread_id)?;
        match self.backend.write(&path, bytes.into(), mode).await {
            Ok(outcome) => match outcome.version {
                Some(v) => Ok(CheckpointVersion::new(v.as_str())),
                None => Err(CheckpointError::Unsupported(format!(
                    "{path} was written without a version tag"
                ))),
            },
            Err(BackendError::Conflict {
                kind: ConflictKind::AlreadyExists | ConflictKind::VersionMismatch,
                ..
            }) => Err(CheckpointError::Conflict {
                thread_id: thread_id.clone(),
            }),
            Err(e) => Err(Self::storage(thread_id, e)),
        }
    }

    async fn delete(&self, thread_id: &ThreadId) -> Result<(), CheckpointError> {
        match self.backend.delete(&self.path(thread_id)?).await {
            Ok(()) | Err(BackendError::NotFound { .. }) => Ok(()),
            Err(e) => Err(Self::storage(thread_id, e)),
        }
    }
}
