//! [`BackendExt`]: conveniences on top of the core [`Backend`] trait.

use std::future::Future;

use bytes::Bytes;

use crate::backend::{Backend, ByteRange, ReadOutput, WriteMode, WriteOutcome};
use crate::error::{BackendError, ConflictKind, Result};
use crate::path::VirtualPath;

/// Conveniences available on every [`Backend`] (including `dyn Backend`).
pub trait BackendExt: Backend {
    /// Read a whole file.
    fn read_bytes(&self, path: &VirtualPath) -> impl Future<Output = Result<Bytes>> + Send {
        async move { Ok(self.read(path, None).await?.bytes) }
    }

    /// Read a whole file as UTF-8. Errors: `Other` when the bytes are not UTF-8.
    fn read_to_string(&self, path: &VirtualPath) -> impl Future<Output = Result<String>> + Send {
        async move {
            let bytes = self.read(path, None).await?.bytes;
            String::from_utf8(bytes.to_vec()).map_err(|e| BackendError::other(path, e))
        }
    }

    /// Read a whole file unless it is larger than `limit` bytes (`TooLarge`). Costs one read of at
    /// most `limit + 1` bytes where ranges are supported.
    fn read_limited(
        &self,
        path: &VirtualPath,
        limit: u64,
    ) -> impl Future<Output = Result<ReadOutput>> + Send {
        async move {
            let out = self
                .read(path, Some(ByteRange::prefix(limit.saturating_add(1))))
                .await?;
            if out.size > limit {
                return Err(BackendError::TooLarge {
                    path: path.to_string(),
                    size: out.size,
                    limit,
                });
            }
            Ok(out)
        }
    }

    /// True when a file or directory exists at `path`.
    fn exists(&self, path: &VirtualPath) -> impl Future<Output = Result<bool>> + Send {
        async move {
            match self.stat(path).await {
                Ok(_) => Ok(true),
                Err(BackendError::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        }
    }

    /// Read-modify-write with optimistic concurrency: read the file (absent is `None`), let `change`
    /// compute the new content, write it only if nobody wrote in between, and start over on a
    /// conflict, at most `attempts` times. `change` returning `Err` aborts without writing. Returns
    /// the outcome of the write that landed.
    fn update<F>(
        &self,
        path: &VirtualPath,
        attempts: usize,
        mut change: F,
    ) -> impl Future<Output = Result<WriteOutcome>> + Send
    where
        F: FnMut(Option<&Bytes>) -> Result<Bytes> + Send,
    {
        async move {
            let mut last = None;
            for _ in 0..attempts.max(1) {
                let current = match self.read(path, None).await {
                    Ok(out) => Some(out),
                    Err(BackendError::NotFound { .. }) => None,
                    Err(e) => return Err(e),
                };
                let next = change(current.as_ref().map(|c| &c.bytes))?;
                let mode = match current.and_then(|c| c.version.map(Ok).or(Some(Err(())))) {
                    None => WriteMode::CreateNew,
                    Some(Ok(version)) => WriteMode::IfVersion(version),
                    // A store without versions cannot do this safely.
                    Some(Err(())) => {
                        return Err(BackendError::other(path, "this backend has no version tags"));
                    }
                };
                match self.write(path, next, mode).await {
                    Err(e @ BackendError::Conflict { .. }) => last = Some(e),
                    other => return other,
                }
            }
            Err(last.unwrap_or(BackendError::Conflict {
                path: path.to_string(),
                kind: ConflictKind::VersionMismatch,
            }))
        }
    }
}

impl<T: Backend + ?Sized> BackendExt for T {}
