//! [`BackendCheckpointer`]: threads saved through a storage [`Backend`].

use std::sync::Arc;

use crate::backend::{Backend, BackendError, ConflictKind, ScopedBackend, Version, VirtualPath, WriteMode};
use async_trait::async_trait;
use serde_json::Value;

use super::blobs::{
    DEFAULT_BLOB_THRESHOLD, FORMAT_WITH_BLOBS, KnownBlobs, blob_refs, ensure_blob, restore, take_large_slots,
};
use super::{
    CHECKPOINT_FORMAT, Checkpoint, CheckpointError, CheckpointVersion, Checkpointer, StoredCheckpoint,
};
use crate::runtime::context::ThreadId;

/// Threads saved as JSON files through any [`Backend`]: `{root}/{thread_id}/checkpoint.json`, with
/// the thread's own files under `{root}/{thread_id}/files/` ([`Checkpointer::thread_files`]).
///
/// Saves are version-checked writes ([`WriteMode::CreateNew`] for a new thread,
/// [`WriteMode::IfVersion`] after), so on a shared store (an `s3://` bucket through
/// `ObjectStoreBackend`) several processes can run threads, resume each other's threads, and never
/// clobber one: the second writer gets [`CheckpointError::Conflict`].
///
/// Slot values of at least [`DEFAULT_BLOB_THRESHOLD`] serialized bytes (see
/// [`BackendCheckpointer::with_blob_threshold`]) are stored once each, by content, under
/// `{root}/{thread_id}/blobs/`, and a save whose large values did not change writes only the small
/// checkpoint file (see `checkpoint/blobs.rs`).
#[derive(Debug, Clone)]
pub struct BackendCheckpointer {
    backend: Arc<dyn Backend>,
    root: VirtualPath,
    blob_threshold: usize,
    known_blobs: Arc<KnownBlobs>,
}

const FILE_NAME: &str = "checkpoint.json";
const BLOB_DIR: &str = "blobs";
const FILES_DIR: &str = "files";

impl BackendCheckpointer {
    /// Checkpoints under `root` of `backend`. Fails when the backend cannot do version-checked writes.
    pub fn new(backend: Arc<dyn Backend>, root: VirtualPath) -> Result<Self, CheckpointError> {
        if !backend.capabilities().versioned_writes {
            return Err(CheckpointError::Unsupported(format!(
                "backend {backend:?} has no version-checked writes"
            )));
        }
        Ok(Self {
            backend,
            root,
            blob_threshold: DEFAULT_BLOB_THRESHOLD,
            known_blobs: Arc::default(),
        })
    }

    /// Store slot values of at least `bytes` serialized bytes as blobs (`usize::MAX`: never).
    pub fn with_blob_threshold(mut self, bytes: usize) -> Self {
        self.blob_threshold = bytes.max(1);
        self
    }

    fn thread_dir(&self, thread_id: &ThreadId) -> Result<VirtualPath, CheckpointError> {
        self.root
            .join(thread_id.as_str())
            .map_err(|e| Self::storage(thread_id, BackendError::invalid_path(thread_id.as_str(), e)))
    }

    /// The ids of the stored threads, sorted: the directories under the root that hold a
    /// checkpoint. Directories whose names are not thread ids are left out.
    pub async fn threads(&self) -> Result<Vec<ThreadId>, CheckpointError> {
        let entries = match self.backend.ls(&self.root).await {
            Ok(entries) => entries,
            Err(BackendError::NotFound { .. }) => return Ok(Vec::new()),
            Err(source) => return Err(CheckpointError::Listing { source }),
        };
        let candidates: Vec<ThreadId> = entries
            .iter()
            .filter_map(|e| e.path.file_name())
            .filter_map(|name| ThreadId::new(name).ok())
            .collect();
        let mut paths = Vec::with_capacity(candidates.len());
        for id in &candidates {
            paths.push(self.path(id)?);
        }
        let found = self.backend.stat_many(&paths).await;
        let mut ids: Vec<ThreadId> = candidates
            .into_iter()
            .zip(found)
            .filter_map(|(id, stat)| stat.ok().map(|_| id))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// `{root}/{thread_id}/files`: the thread's own files.
    fn files_dir(&self, thread_id: &ThreadId) -> Result<VirtualPath, CheckpointError> {
        self.thread_dir(thread_id)?
            .join(FILES_DIR)
            .map_err(|e| Self::storage(thread_id, BackendError::invalid_path(FILES_DIR, e)))
    }

    /// Where the blob with content hash `hash` (64 hex digits) of the thread lives.
    fn blob_path(&self, thread_id: &ThreadId, hash: &str) -> Result<VirtualPath, CheckpointError> {
        self.thread_dir(thread_id)?
            .join(BLOB_DIR)
            .and_then(|dir| dir.join(&format!("{hash}.json")))
            .map_err(|e| Self::storage(thread_id, BackendError::invalid_path(hash, e)))
    }

    fn decode(thread_id: &ThreadId, source: serde_json::Error) -> CheckpointError {
        CheckpointError::Decode {
            thread_id: thread_id.clone(),
            source,
        }
    }

    /// Read the blobs `checkpoint` names and put their values back in place.
    async fn inline_blobs(
        &self,
        thread_id: &ThreadId,
        checkpoint: &mut Value,
    ) -> Result<(), CheckpointError> {
        let refs = blob_refs(checkpoint)
            .map_err(|reason| Self::decode(thread_id, serde::de::Error::custom(reason)))?;
        if refs.is_empty() {
            return Ok(());
        }
        let paths = refs
            .values()
            .map(|hash| self.blob_path(thread_id, hash))
            .collect::<Result<Vec<_>, _>>()?;
        let reads = self.backend.read_many(&paths, None).await;
        for (key, read) in refs.keys().zip(reads) {
            let read = read.map_err(|e| Self::storage(thread_id, e))?;
            let value: Value = serde_json::from_slice(&read.bytes).map_err(|e| Self::decode(thread_id, e))?;
            if !restore(checkpoint, key, value) {
                return Err(Self::decode(
                    thread_id,
                    serde::de::Error::custom(format!("blob reference {key:?} points nowhere")),
                ));
            }
        }
        if let Some(object) = checkpoint.as_object_mut() {
            object.remove("blobs");
            object.insert("format".to_owned(), Value::from(CHECKPOINT_FORMAT));
        }
        Ok(())
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
        let header: Header = serde_json::from_slice(&out.bytes).map_err(|e| Self::decode(thread_id, e))?;
        if header.format != CHECKPOINT_FORMAT && header.format != FORMAT_WITH_BLOBS {
            return Err(CheckpointError::UnsupportedFormat {
                thread_id: thread_id.clone(),
                format: header.format,
            });
        }
        let checkpoint: Checkpoint = if header.format == FORMAT_WITH_BLOBS {
            let mut value: Value =
                serde_json::from_slice(&out.bytes).map_err(|e| Self::decode(thread_id, e))?;
            self.inline_blobs(thread_id, &mut value).await?;
            serde_json::from_value(value).map_err(|e| Self::decode(thread_id, e))?
        } else {
            serde_json::from_slice(&out.bytes).map_err(|e| Self::decode(thread_id, e))?
        };
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
        let encode = |source| CheckpointError::Encode {
            thread_id: thread_id.clone(),
            source,
        };
        let mut value = serde_json::to_value(&checkpoint).map_err(encode)?;
        let blobs = take_large_slots(&mut value, self.blob_threshold).map_err(encode)?;
        if !blobs.is_empty() {
            // Blobs first: a saved checkpoint never names a missing blob.
            let mut refs = serde_json::Map::new();
            for blob in blobs {
                let path = self.blob_path(thread_id, &blob.hash)?;
                ensure_blob(self.backend.as_ref(), &self.known_blobs, &path, blob.bytes)
                    .await
                    .map_err(|e| Self::storage(thread_id, e))?;
                refs.insert(blob.key, Value::String(blob.hash));
            }
            if let Some(object) = value.as_object_mut() {
                object.insert("format".to_owned(), Value::from(FORMAT_WITH_BLOBS));
                object.insert("blobs".to_owned(), Value::Object(refs));
            }
        }
        let bytes = serde_json::to_vec(&value).map_err(encode)?;
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
        // The checkpoint first, so no reader finds one whose blobs are gone.
        match self.backend.delete(&self.path(thread_id)?).await {
            Ok(()) | Err(BackendError::NotFound { .. }) => {}
            Err(e) => return Err(Self::storage(thread_id, e)),
        }
        let dir = self
            .thread_dir(thread_id)?
            .join(BLOB_DIR)
            .map_err(|e| Self::storage(thread_id, BackendError::invalid_path(BLOB_DIR, e)))?;
        self.known_blobs.forget_below(&dir);
        for dir in [dir, self.files_dir(thread_id)?] {
            ScopedBackend::new(self.backend.clone(), dir)
                .delete_all()
                .await
                .map_err(|e| Self::storage(thread_id, e))?;
        }
        Ok(())
    }

    fn thread_files(&self, thread_id: &ThreadId) -> Option<Arc<dyn Backend>> {
        let dir = self.files_dir(thread_id).ok()?;
        Some(Arc::new(ScopedBackend::new(self.backend.clone(), dir)))
    }
}
