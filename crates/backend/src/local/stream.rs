//! [`FilesystemBackend`]'s streamed write: the source is copied into the temporary file in
//! chunks of [`WRITE_CHUNK`](crate::WRITE_CHUNK) bytes, so a file of any size takes that much
//! memory, and the same checks and rename as [`Backend::write`] then put it in place.

use tokio::io::AsyncWriteExt;

use super::{FilesystemBackend, at};
use crate::backend::{Backend, WriteMode, WriteOutcome};
use crate::error::{BackendError, Result};
use crate::path::VirtualPath;
use crate::stream::{Exact, WriteSource, read_source};

impl FilesystemBackend {
    /// See [`Backend::write_stream`]. The temporary file is made beside the target first (a
    /// write bound to conflict fails there, before the source is read), filled from the source
    /// without any lock held, then checked again and renamed under the same per-path and
    /// directory locks as a [`Backend::write`]. A source of the wrong length, a failure, or a
    /// write dropped halfway removes the temporary file, and the old file stays as it was.
    ///
    /// Without `openat2` (Linux before 5.6) the source is read into memory and written with
    /// [`Backend::write`]: the older check-then-use path is not worth a streamed twin.
    pub(super) async fn stream_in(
        &self,
        path: &VirtualPath,
        source: WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        if path.is_root() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        let Some(beneath) = self.beneath.clone().filter(|b| b.supported()) else {
            return self
                .write(path, read_source(path, source, len).await?, mode)
                .await;
        };
        let (shown, asked, opener) = (path.clone(), mode.clone(), beneath.clone());
        let staged = tokio::task::spawn_blocking(move || at::stage(&opener, &shown, &asked))
            .await
            .map_err(|e| BackendError::other(path, e))?;
        let Some(staged) = staged else {
            return self
                .write(path, read_source(path, source, len).await?, mode)
                .await;
        };
        let (staged, file) = staged?;
        let mut file = tokio::fs::File::from_std(file);
        let mut exact = Exact::new(path, source, len);
        while let Some(chunk) = exact.next().await? {
            file.write_all(chunk)
                .await
                .map_err(|e| BackendError::from_io(path, e))?;
        }
        file.flush().await.map_err(|e| BackendError::from_io(path, e))?;
        let file = file.into_std().await;
        let lock = self.lock_for(path);
        let _guard = lock.lock().await;
        let version = tokio::task::spawn_blocking(move || at::commit(&beneath, staged, file, &mode))
            .await
            .map_err(|e| BackendError::other(path, e))??;
        Ok(WriteOutcome {
            version: Some(version),
        })
    }
}
