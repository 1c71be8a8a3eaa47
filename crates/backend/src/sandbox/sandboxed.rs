//! [`SandboxedBackend`]: a backend that can also run commands.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::Sandbox;
use crate::backend::{
    AppendMode, Backend, ByteRange, Capabilities, Entry, FileListing, GlobOutput, GrepOutput, GrepQuery,
    ReadOutput, WriteMode, WriteOutcome,
};
use crate::error::Result;
use crate::path::VirtualPath;

/// `files`, with `sandbox` as the answer to [`Backend::sandbox`]: every other method goes to
/// `files` unchanged (`tests/backend/forwarding.rs` checks that none is left to its default). Mount one in a [`CompositeBackend`](crate::CompositeBackend) (or use it as the
/// default) and commands whose working directory it owns run in `sandbox`.
#[derive(Debug, Clone)]
pub struct SandboxedBackend {
    files: Arc<dyn Backend>,
    sandbox: Arc<dyn Sandbox>,
}

impl SandboxedBackend {
    /// `files` that can run commands in `sandbox`.
    pub fn new(files: Arc<dyn Backend>, sandbox: Arc<dyn Sandbox>) -> Self {
        Self { files, sandbox }
    }
}

#[async_trait]
impl Backend for SandboxedBackend {
    fn capabilities(&self) -> Capabilities {
        self.files.capabilities()
    }

    fn sandbox(&self, _cwd: &VirtualPath) -> Option<Arc<dyn Sandbox>> {
        Some(Arc::clone(&self.sandbox))
    }

    fn local_dirs(&self) -> Vec<crate::backend::LocalDir> {
        self.files.local_dirs()
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.files.ls(dir).await
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        self.files.stat(path).await
    }

    async fn stat_many(&self, paths: &[VirtualPath]) -> Vec<Result<Entry>> {
        self.files.stat_many(paths).await
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        self.files.read(path, range).await
    }

    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        self.files.read_many(paths, range).await
    }

    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        self.files.write(path, data, mode).await
    }

    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: crate::WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        self.files.write_stream(path, source, len, mode).await
    }

    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        self.files.delete(path).await
    }

    async fn append(
        &self,
        path: &VirtualPath,
        data: Bytes,
        mode: AppendMode,
    ) -> Option<Result<WriteOutcome>> {
        self.files.append(path, data, mode).await
    }

    async fn link(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        mode: WriteMode,
    ) -> Option<Result<WriteOutcome>> {
        self.files.link(from, to, mode).await
    }

    async fn list_files_between(
        &self,
        base: &VirtualPath,
        after: Option<&VirtualPath>,
        until: Option<&VirtualPath>,
        limit: usize,
    ) -> Option<Result<FileListing>> {
        self.files.list_files_between(base, after, until, limit).await
    }

    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        self.files.list_files(base, limit).await
    }

    async fn glob(&self, pattern: &str, base: &VirtualPath) -> Result<GlobOutput> {
        self.files.glob(pattern, base).await
    }

    async fn grep(&self, query: &GrepQuery) -> Result<GrepOutput> {
        self.files.grep(query).await
    }
}
