//! Test support shared by the test suites of this crate and of the crates above it: a
//! [`RecordingBackend`] that records which paths it is asked to read or stat, and the one emulator
//! guard ([`emulator`]) with which a test asks for a storage emulator.
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
use crate::object::ObjectStoreBackend;
use crate::object_config::StoreOptions;
use crate::path::VirtualPath;

/// The value of the emulator variable `var` (`TRELLIS_S3_ENDPOINT`, …) for the test or suite
/// `suite`. Unset, it says the suite was skipped and gives `None`; under
/// `TRELLIS_EMULATORS=required` (set by `cargo xtask test` and CI) it fails instead, naming the
/// variable.
pub fn emulator(var: &str, suite: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") => {
            panic!("{suite}: {var} is not set but TRELLIS_EMULATORS=required; is the emulator running?")
        }
        _ => {
            eprintln!("skipped: {suite} (set {var} or run `cargo xtask test`)");
            None
        }
    }
}

/// The emulators' test bucket: `TRELLIS_TEST_BUCKET`, default `trellis-test`.
pub fn bucket() -> String {
    std::env::var("TRELLIS_TEST_BUCKET").unwrap_or_else(|_| "trellis-test".to_owned())
}

/// An S3 backend on the emulator at `endpoint`, below `prefix` of the test [`bucket`].
pub fn s3_backend(endpoint: &str, prefix: &str) -> ObjectStoreBackend {
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    ObjectStoreBackend::from_url(&format!("s3://{}/{prefix}", bucket()), &options)
        .unwrap_or_else(|e| panic!("an S3 backend on {endpoint}: {e}"))
}

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
    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: crate::WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        self.inner.write_stream(path, source, len, mode).await
    }
    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        self.inner.delete(path).await
    }
    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        self.inner.list_files(base, limit).await
    }
}
