//! [`ObjectStoreBackend`]'s streamed write (see [`Backend::write_stream`]).
//!
//! Only an overwrite of more than [`MULTIPART_THRESHOLD`] bytes streams, as a multipart upload
//! ([`WriteMultipart`]: parts of 5 MiB, at most [`PARTS_IN_FLIGHT`] uploading at once, so about
//! 15 MiB in memory whatever the size). The upload becomes the object only when it completes,
//! so a reader sees the old object or the new one, as with a single put; a source of the wrong
//! length or a failed part aborts it and the old object stays.
//!
//! Create-only and version-checked writes are read into memory and written with one conditional
//! put, as [`Backend::write`] does: object_store 0.14's multipart upload takes no `PutMode`
//! (`PutMultipartOptions` has tags, attributes and extensions only), so a streamed upload could
//! not keep the version check, and checking the version before (or after) an unconditional
//! upload would let another writer's change be overwritten unseen. Small overwrites are buffered
//! too: one request is cheaper than three.

use object_store::{ObjectStoreExt, WriteMultipart};

use super::{ObjectStoreBackend, encode_version, map_error};
use crate::backend::{Backend, WriteMode, WriteOutcome};
use crate::error::{BackendError, Result};
use crate::path::VirtualPath;
use crate::stream::{Exact, WriteSource, read_source};

/// Overwrites of more bytes than this stream as multipart uploads.
pub const MULTIPART_THRESHOLD: u64 = 8 << 20;

/// Parts of one upload sent at once.
const PARTS_IN_FLIGHT: usize = 2;

impl ObjectStoreBackend {
    /// See the module documentation.
    pub(super) async fn stream_in(
        &self,
        path: &VirtualPath,
        source: WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        if mode != WriteMode::Overwrite || len <= MULTIPART_THRESHOLD {
            return self
                .write(path, read_source(path, source, len).await?, mode)
                .await;
        }
        if path.is_root() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        let key = self.key(path)?;
        let upload = self
            .store
            .put_multipart(&key)
            .await
            .map_err(|e| map_error(path, e))?;
        let mut writer = WriteMultipart::new(upload);
        let mut exact = Exact::new(path, source, len);
        loop {
            let chunk = match exact.next().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => {
                    abort(path, writer).await;
                    return Err(e);
                }
            };
            if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                abort(path, writer).await;
                return Err(map_error(path, e));
            }
            writer.write(chunk);
        }
        // A failed completion leaves the upload to the store's clean-up of incomplete uploads
        // (`finish` aborts nothing); the object is unchanged either way.
        let put = writer.finish().await.map_err(|e| map_error(path, e))?;
        // A completed upload's reply may name the version differently from what a read of the
        // object gives (moto answers version "null" for an unversioned bucket, HEAD none), and a
        // version must compare equal to the one a read returns. One HEAD settles it: while the
        // ETag is the upload's, the object is this write, and its version is the one a read sees.
        let version = match self.store.head(&key).await {
            Ok(meta) if meta.e_tag.is_some() && meta.e_tag == put.e_tag => {
                encode_version(meta.e_tag, meta.version)
            }
            _ => encode_version(put.e_tag, put.version),
        };
        Ok(WriteOutcome {
            version: Some(version),
        })
    }
}

/// Abort an upload that will not complete, so the store frees its parts.
async fn abort(path: &VirtualPath, writer: WriteMultipart) {
    if let Err(e) = writer.abort().await {
        tracing::warn!(path = %path, error = %e, "could not abort a multipart upload");
    }
}
