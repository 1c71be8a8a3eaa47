//! Reading threads that older builds saved as one `{root}/{thread}/checkpoint.json` (formats 1 and
//! 2). They are never written in that form again: the next save of such a thread starts its log
//! with a base step (see `checkpoint/backend.rs`).

use serde_json::Value;

use super::backend::{BackendCheckpointer, LEGACY_VERSION};
use super::blobs::{FORMAT_WITH_BLOBS, blob_refs, restore};
use super::{CHECKPOINT_FORMAT, Checkpoint, CheckpointError, CheckpointVersion, StoredCheckpoint};
use crate::runtime::context::ThreadId;

/// The first format, one JSON file holding the whole state.
const FORMAT_INLINE: u32 = 1;

impl BackendCheckpointer {
    /// The thread's old-format checkpoint, or `None` when there is none.
    pub(super) async fn load_legacy(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        let Some((bytes, version)) = self
            .read_versioned(thread_id, &self.legacy_path(thread_id)?)
            .await?
        else {
            return Ok(None);
        };
        // Check the format before decoding the whole state.
        #[derive(serde::Deserialize)]
        struct Header {
            format: u32,
        }
        let header: Header = serde_json::from_slice(&bytes).map_err(|e| decode(thread_id, e))?;
        if header.format != FORMAT_INLINE && header.format != FORMAT_WITH_BLOBS {
            return Err(CheckpointError::UnsupportedFormat {
                thread_id: thread_id.clone(),
                format: header.format,
            });
        }
        let mut value: Value = serde_json::from_slice(&bytes).map_err(|e| decode(thread_id, e))?;
        if header.format == FORMAT_WITH_BLOBS {
            self.inline_blobs(thread_id, &mut value).await?;
        }
        let mut checkpoint: Checkpoint = serde_json::from_value(value).map_err(|e| decode(thread_id, e))?;
        checkpoint.format = CHECKPOINT_FORMAT;
        Ok(Some(StoredCheckpoint {
            checkpoint,
            version: CheckpointVersion::new(format!("{LEGACY_VERSION}{}", version.as_str())),
        }))
    }

    /// Read the blobs a format-2 `checkpoint` names and put their values back in place.
    async fn inline_blobs(
        &self,
        thread_id: &ThreadId,
        checkpoint: &mut Value,
    ) -> Result<(), CheckpointError> {
        let refs =
            blob_refs(checkpoint).map_err(|reason| decode(thread_id, serde::de::Error::custom(reason)))?;
        let paths = refs
            .values()
            .map(|hash| self.blob_path(thread_id, hash))
            .collect::<Result<Vec<_>, _>>()?;
        let reads = self.backend.read_many(&paths, None).await;
        for (key, read) in refs.keys().zip(reads) {
            let read = read.map_err(|e| Self::storage(thread_id, e))?;
            let value: Value = serde_json::from_slice(&read.bytes).map_err(|e| decode(thread_id, e))?;
            if !restore(checkpoint, key, value) {
                return Err(decode(
                    thread_id,
                    serde::de::Error::custom(format!("blob reference {key:?} points nowhere")),
                ));
            }
        }
        if let Some(object) = checkpoint.as_object_mut() {
            object.remove("blobs");
        }
        Ok(())
    }
}

fn decode(thread_id: &ThreadId, source: serde_json::Error) -> CheckpointError {
    CheckpointError::Decode {
        thread_id: thread_id.clone(),
        source,
    }
}
