//! The fast path of [`FilesystemBackend`](super::FilesystemBackend): operations through
//! `openat2(RESOLVE_BENEATH)` ([`Beneath`]), where the kernel keeps every path inside the root, so
//! nothing is canonicalized first. Each helper answers `None` when it cannot decide (a symlink to
//! resolve), for the caller's checked path.

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;

use super::beneath::{Beneath, Opened, read_range, read_range_of};
use super::{READ_BATCH, offload, version_of};
use crate::backend::{ByteRange, ReadOutput};
use crate::error::{BackendError, Result};
use crate::path::VirtualPath;

pub(super) fn output(bytes: Vec<u8>, meta: &std::fs::Metadata) -> ReadOutput {
    ReadOutput {
        size: meta.len(),
        bytes: Bytes::from(bytes),
        version: Some(version_of(meta)),
        modified: meta.modified().ok().map(DateTime::<Utc>::from),
    }
}

/// `relative` opened beneath the root for reading; `None` when the slow path must decide.
fn open(beneath: &Beneath, relative: &str, shown: &VirtualPath) -> Option<Result<std::fs::File>> {
    match beneath.open(relative) {
        Ok(Opened::File(file)) => Some(Ok(file)),
        Ok(Opened::Undecided) => None,
        Err(e) => Some(Err(BackendError::from_io(shown, e))),
    }
}

/// One fast-path read on the blocking pool's thread; `None` when the slow path must decide.
pub(super) fn fast_read(
    beneath: &Beneath,
    relative: &str,
    range: Option<ByteRange>,
    shown: &VirtualPath,
) -> Option<Result<ReadOutput>> {
    Some(open(beneath, relative, shown)?.and_then(|file| {
        read_range(file, range)
            .map(|(bytes, meta)| output(bytes, &meta))
            .map_err(|e| BackendError::from_io(shown, e))
    }))
}

/// One fast-path read from an async task: the open (a bounded path walk) on the calling task, then
/// the read there too when `inline_small` and the file holds at most [`offload::INLINE_MAX`]
/// bytes, else on the blocking pool ([`offload`] says why).
pub(super) async fn read(
    beneath: &Arc<Beneath>,
    relative: String,
    range: Option<ByteRange>,
    shown: VirtualPath,
    inline_small: bool,
) -> Option<Result<ReadOutput>> {
    if !inline_small {
        let beneath = beneath.clone();
        return offload::run(false, move || fast_read(&beneath, &relative, range, &shown))
            .await
            .ok()
            .flatten();
    }
    let file = match open(beneath, &relative, &shown)? {
        Ok(file) => file,
        Err(e) => return Some(Err(e)),
    };
    let meta = match file.metadata() {
        Ok(meta) => meta,
        Err(e) => return Some(Err(BackendError::from_io(&shown, e))),
    };
    let small = meta.len() <= offload::INLINE_MAX as u64;
    offload::run(small, move || {
        read_range_of(file, meta, range)
            .map(|(bytes, meta)| output(bytes, &meta))
            .map_err(|e| BackendError::from_io(&shown, e))
    })
    .await
    .ok()
}

/// `op` on every path beneath the root, in batches of [`READ_BATCH`] per blocking task with two in
/// flight: far fewer hops to the blocking pool than one per path, and the kernel checks containment
/// on every open. One answer per path, in order; `None` where `op` cannot decide (or its task
/// panicked), for the caller to settle the checked way.
pub(super) async fn in_batches<T: Send + 'static>(
    beneath: &Arc<Beneath>,
    paths: &[VirtualPath],
    op: impl Fn(&Beneath, &VirtualPath) -> Option<T> + Clone + Send + 'static,
) -> Vec<Option<T>> {
    let chunks: Vec<Vec<VirtualPath>> = paths.chunks(READ_BATCH).map(<[VirtualPath]>::to_vec).collect();
    let batches: Vec<Vec<Option<T>>> = futures::stream::iter(chunks)
        .map(|chunk| {
            let (beneath, op) = (beneath.clone(), op.clone());
            async move {
                let len = chunk.len();
                tokio::task::spawn_blocking(move || chunk.iter().map(|p| op(&beneath, p)).collect())
                    .await
                    .unwrap_or_else(|_| (0..len).map(|_| None).collect())
            }
        })
        .buffered(2)
        .collect()
        .await;
    batches.into_iter().flatten().collect()
}

/// Metadata of a path opened beneath the root as a path only (`O_PATH`: no read permission
/// needed, nothing opened for reading, so a FIFO does not block), or `None` when the fast path
/// cannot decide (a symlink to resolve the checked way).
pub(super) fn fast_metadata(beneath: &Beneath, relative: &str) -> Option<std::io::Result<std::fs::Metadata>> {
    match beneath.open_path(relative) {
        Ok(Opened::File(file)) => Some(file.metadata()),
        Ok(Opened::Undecided) => None,
        Err(e) => Some(Err(e)),
    }
}
