//! Test support shared by the test suites of this crate and of the crates above it: a
//! [`RecordingBackend`] that records which paths it is asked to read or stat.
//!
//! Hidden from the docs and outside the stability promise. It is always compiled rather than put
//! behind a `test-support` feature because this crate's own integration test binary uses it: a
//! feature would need the crate to dev-depend on itself (or `required-features`, which makes plain
//! `cargo test` skip the binary). It is small and has no dependencies of its own.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;

use crate::backend::{
    Backend, ByteRange, Capabilities, Entry, FileListing, ReadOutput, WriteMode, WriteOutcome,
};
use crate::error::Result;
use crate::path::VirtualPath;

/// What a [`RecordingBackend`] was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touch {
    Stat,
    Read,
}

/// A backend over `inner` that records every path it is asked to read (`read`, and each path of a
/// `read_many`, which is passed on as one batch) or to stat. It keeps the trait's defaults for
/// `glob`, `grep` and the rest, so a search's reads all pass through it and are recorded.
#[derive(Debug)]
pub struct RecordingBackend {
    inner: Arc<dyn Backend>,
    log: Mutex<Vec<(Touch, String)>>,
}

impl RecordingBackend {
    /// Records what is asked of `inner`.
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        Self {
            inner,
            log: Mutex::new(Vec::new()),
        }
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Vec<(Touch, String)>> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, touch: Touch, paths: impl IntoIterator<Item = String>) {
        self.log().extend(paths.into_iter().map(|p| (touch, p)));
    }

    /// The paths read so far, in order.
    pub fn reads(&self) -> Vec<String> {
        self.log()
            .iter()
            .filter(|(t, _)| *t == Touch::Read)
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// How many file reads it has seen.
    pub fn read_count(&self) -> usize {
        self.log().iter().filter(|(t, _)| *t == Touch::Read).count()
    }

    /// Every path whose content or metadata it was asked for so far, in order.
    pub fn touched(&self) -> Vec<String> {
        self.log().iter().map(|(_, p)| p.clone()).collect()
    }

    /// Forget what was recorded.
    pub fn clear(&self) {
        self.log().clear();
    }
}

#[async_trait]
impl Backend for RecordingBackend {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.inner.ls(dir).await
    }
    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        self.record(Touch::Stat, [path.to_string()]);
        self.inner.stat(path).await
    }
    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        self.record(Touch::Read, [path.to_string()]);
        self.inner.read(path, range).await
    }
    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        self.record(Touch::Read, paths.iter().map(ToString::to_string));
        self.inner.read_many(paths, range).await
    }
    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        self.inner.write(path, data, mode).await
    }
    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        self.inner.delete(path).await
    }
    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        self.inner.list_files(base, limit).await
    }
}
