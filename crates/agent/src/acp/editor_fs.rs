//! `trellis acp --editor-fs`: the session's `/workspace` read and written through the editor
//! ([`EditorFiles`]), so the model reads unsaved buffers and edits land in the editor (Zed's review
//! of agent edits), when the client advertised `fs.readTextFile` / `fs.writeTextFile`.
//!
//! [`EditorFiles`] wraps the backend of the editor's `cwd` (the `--workdir` mount). Only single-file
//! reads and writes of text go through the editor; everything else is the disk's:
//!
//! * `read` (what `read_file` and `edit_file` use): the disk is read first (a missing file stays
//!   missing, its version and time are the disk's), then, for a file of at most [`MAX_TEXT`] bytes,
//!   the editor's text replaces the bytes (`fs/read_text_file`: the buffer, unsaved edits included).
//!   If the editor fails, the disk's bytes are used (logged).
//! * `write` of UTF-8 text of at most [`MAX_TEXT`] bytes: the write's precondition (create only, or
//!   the version read) is checked on the disk, then the text goes to `fs/write_text_file`; the
//!   editor saves it (or keeps it for review: what the disk holds afterwards is up to the editor).
//!   An editor error is the write's error. Binary or larger writes go to the disk.
//! * `ls`, `glob`, `grep`, listings, deletes, many-file reads and `execute`'s view (the sandbox
//!   copies and writes back through the disk backend) never ask the editor.

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{ReadTextFileRequest, WriteTextFileRequest};
use async_trait::async_trait;
use bytes::Bytes;
use trellis_middleware::backend::{
    AppendMode, Backend, BackendError, ByteRange, Capabilities, ConflictKind, Entry, FileListing, GlobOutput,
    GrepOutput, GrepQuery, ReadOutput, Result, Sandbox, VirtualPath, WriteMode, WriteOutcome, WriteSource,
    read_source,
};

/// The largest file read or written through the editor.
pub const MAX_TEXT: u64 = 4 << 20;

/// What the client offered, from its `initialize`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EditorFs {
    /// `fs.readTextFile`.
    pub read: bool,
    /// `fs.writeTextFile`.
    pub write: bool,
}

/// The backend of the editor's `cwd`, reading and writing text through the editor (module docs).
pub struct EditorFiles {
    inner: Arc<dyn Backend>,
    cwd: PathBuf,
    session: String,
    fs: EditorFs,
    cx: ConnectionTo<Client>,
}

impl std::fmt::Debug for EditorFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EditorFiles")
            .field("inner", &self.inner)
            .field("cwd", &self.cwd)
            .field("fs", &self.fs)
            .finish_non_exhaustive()
    }
}

impl EditorFiles {
    /// `inner` (the backend rooted at `cwd`) with reads and writes through the editor on `cx`, for
    /// session `session`, as far as `fs` allows.
    pub fn new(
        inner: Arc<dyn Backend>,
        cwd: PathBuf,
        session: String,
        fs: EditorFs,
        cx: ConnectionTo<Client>,
    ) -> Self {
        Self {
            inner,
            cwd,
            session,
            fs,
            cx,
        }
    }

    fn host(&self, path: &VirtualPath) -> PathBuf {
        self.cwd.join(path.as_str().trim_start_matches('/'))
    }

    fn editor_error(path: &VirtualPath, e: impl std::fmt::Display) -> BackendError {
        BackendError::Other {
            path: path.as_str().to_owned(),
            source: format!("the editor refused: {e}").into(),
        }
    }
}

#[async_trait]
impl Backend for EditorFiles {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn sandbox(&self, cwd: &VirtualPath) -> Option<Arc<dyn Sandbox>> {
        self.inner.sandbox(cwd)
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.inner.ls(dir).await
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        self.inner.stat(path).await
    }

    async fn stat_many(&self, paths: &[VirtualPath]) -> Vec<Result<Entry>> {
        self.inner.stat_many(paths).await
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        let disk = self.inner.read(path, range).await?;
        if !self.fs.read || disk.size > MAX_TEXT {
            return Ok(disk);
        }
        let asked = ReadTextFileRequest::new(self.session.clone(), self.host(path));
        match self.cx.send_request(asked).block_task().await {
            Ok(answer) => {
                let text = Bytes::from(answer.content.into_bytes());
                let size = text.len() as u64;
                let bytes = match range {
                    Some(range) => {
                        let r = range.clamp(size);
                        text.slice(usize::try_from(r.start).unwrap_or(0)..usize::try_from(r.end).unwrap_or(0))
                    }
                    None => text,
                };
                Ok(ReadOutput { bytes, size, ..disk })
            }
            Err(e) => {
                tracing::warn!(
                    "fs/read_text_file {}: {e}; the disk's copy is used",
                    path.as_str()
                );
                Ok(disk)
            }
        }
    }

    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        self.inner.read_many(paths, range).await
    }

    /// What the editor may be given (text up to [`MAX_TEXT`]) is read whole and goes through
    /// [`EditorFiles::write`]; anything larger cannot be text for the editor and streams on to
    /// the backend below.
    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        if self.fs.write && len <= MAX_TEXT {
            let data = read_source(path, source, len).await?;
            return self.write(path, data, mode).await;
        }
        self.inner.write_stream(path, source, len, mode).await
    }

    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        let text = match std::str::from_utf8(&data) {
            Ok(text) if self.fs.write && data.len() as u64 <= MAX_TEXT => text.to_owned(),
            _ => return self.inner.write(path, data, mode).await,
        };
        let current = match self.inner.stat(path).await {
            Ok(entry) => Some(entry),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let conflict = |kind| BackendError::Conflict {
            path: path.as_str().to_owned(),
            kind,
        };
        match (&mode, &current) {
            (WriteMode::CreateNew, Some(_)) => return Err(conflict(ConflictKind::AlreadyExists)),
            (WriteMode::IfVersion(v), Some(entry)) if entry.version.as_ref() != Some(v) => {
                return Err(conflict(ConflictKind::VersionMismatch));
            }
            (WriteMode::IfVersion(_), None) => return Err(conflict(ConflictKind::VersionMismatch)),
            _ => {}
        }
        let asked = WriteTextFileRequest::new(self.session.clone(), self.host(path), text);
        self.cx
            .send_request(asked)
            .block_task()
            .await
            .map_err(|e| Self::editor_error(path, e))?;
        let version = self.inner.stat(path).await.ok().and_then(|e| e.version);
        Ok(WriteOutcome { version })
    }

    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        self.inner.delete(path).await
    }

    /// Where the editor takes writes, an append would change a file behind its back (its buffer
    /// would not see it): `None` then, and the caller writes the whole file, through the editor.
    async fn append(
        &self,
        path: &VirtualPath,
        data: Bytes,
        mode: AppendMode,
    ) -> Option<Result<WriteOutcome>> {
        if self.fs.write {
            return None;
        }
        self.inner.append(path, data, mode).await
    }

    async fn link(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        mode: WriteMode,
    ) -> Option<Result<WriteOutcome>> {
        self.inner.link(from, to, mode).await
    }

    async fn list_files_between(
        &self,
        base: &VirtualPath,
        after: Option<&VirtualPath>,
        until: Option<&VirtualPath>,
        limit: usize,
    ) -> Option<Result<FileListing>> {
        self.inner.list_files_between(base, after, until, limit).await
    }

    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        self.inner.list_files(base, limit).await
    }

    async fn glob(&self, pattern: &str, base: &VirtualPath) -> Result<GlobOutput> {
        self.inner.glob(pattern, base).await
    }

    async fn grep(&self, query: &GrepQuery) -> Result<GrepOutput> {
        self.inner.grep(query).await
    }
}
