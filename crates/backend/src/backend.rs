//! The [`Backend`] trait and the values it speaks in.

use std::fmt::{self, Debug};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::path::VirtualPath;
use crate::search;

/// How many reads [`Backend::read_many`] keeps in flight by default.
pub const DEFAULT_READ_CONCURRENCY: usize = 64;
/// Most files [`Backend::list_files`] returns before it reports truncation.
pub const DEFAULT_LIST_LIMIT: usize = 200_000;
/// Most matches [`Backend::glob`] returns before it reports truncation.
pub const DEFAULT_GLOB_LIMIT: usize = 10_000;

/// An opaque version tag (an ETag, a generation, a revision counter). Two reads of an unchanged file
/// give equal tags; any successful write gives a new one. Only meaningful to the backend that made it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Version(String);

impl Version {
    /// Wrap a backend-specific tag.
    pub fn new(tag: impl Into<String>) -> Self {
        Self(tag.into())
    }

    /// The tag as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// File or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file (or object).
    File,
    /// A directory (or common prefix).
    Directory,
}

/// One listed file or directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Full virtual path.
    pub path: VirtualPath,
    /// File or directory.
    pub kind: EntryKind,
    /// Size in bytes (0 for directories).
    pub size: u64,
    /// Last modification, where the store knows it.
    pub modified: Option<DateTime<Utc>>,
    /// Version tag of a file, where the store has one.
    pub version: Option<Version>,
}

impl Entry {
    /// True for directories.
    pub fn is_dir(&self) -> bool {
        self.kind == EntryKind::Directory
    }

    /// A directory entry with no metadata.
    pub fn directory(path: VirtualPath) -> Self {
        Self {
            path,
            kind: EntryKind::Directory,
            size: 0,
            modified: None,
            version: None,
        }
    }
}

/// A byte range of a read: `[start, end)`, with `end` open when `None`. Ranges past the end of the
/// file are clamped: a range that starts at or after the end reads zero bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// One past the last byte, or `None` for "to the end".
    pub end: Option<u64>,
}

impl ByteRange {
    /// The first `len` bytes.
    pub fn prefix(len: u64) -> Self {
        Self {
            start: 0,
            end: Some(len),
        }
    }

    /// Everything from `start` on.
    pub fn from_offset(start: u64) -> Self {
        Self { start, end: None }
    }

    /// `[start, end)`.
    pub fn bounded(start: u64, end: u64) -> Self {
        Self {
            start,
            end: Some(end.max(start)),
        }
    }

    /// The clamped `[start, end)` for a file of `size` bytes.
    pub fn clamp(&self, size: u64) -> std::ops::Range<u64> {
        let start = self.start.min(size);
        let end = self.end.unwrap_or(size).min(size).max(start);
        start..end
    }
}

/// What a read returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOutput {
    /// The bytes read (the requested range, or the whole file).
    pub bytes: Bytes,
    /// The file's whole size, whatever range was read.
    pub size: u64,
    /// The version tag of the file that was read, where the store has one.
    pub version: Option<Version>,
    /// Last modification, where the store knows it.
    pub modified: Option<DateTime<Utc>>,
}

impl ReadOutput {
    /// True when `bytes` is the whole file.
    pub fn is_complete(&self) -> bool {
        self.bytes.len() as u64 == self.size
    }
}

/// How a write treats an existing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteMode {
    /// Fail with [`ConflictKind::AlreadyExists`](crate::ConflictKind) if the file exists.
    CreateNew,
    /// Replace whatever is there.
    Overwrite,
    /// Replace the file only if its current version is this one; otherwise (changed or gone) fail
    /// with [`ConflictKind::VersionMismatch`](crate::ConflictKind).
    IfVersion(Version),
}

/// How [`Backend::append`] treats the file it adds to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendMode {
    /// Create the file holding just the bytes, as [`WriteMode::CreateNew`] does (atomically:
    /// readers see no file or the whole of it); `Conflict` with
    /// [`ConflictKind::AlreadyExists`](crate::ConflictKind) if it exists.
    CreateNew,
    /// The file must still be at `version` (else, or when it is gone, `Conflict` with
    /// [`ConflictKind::VersionMismatch`](crate::ConflictKind)). Its first `keep` bytes stay,
    /// anything after them is cut, and the bytes are written after them. `keep` is normally the
    /// file's size; a smaller one cuts what a killed append left half-written, which the caller
    /// found by reading the file at `version`. A `keep` past the file's end is refused
    /// (`Conflict` with [`ConflictKind::VersionMismatch`](crate::ConflictKind)): the caller read
    /// another file than this one.
    IfVersion {
        /// The version the caller read.
        version: Version,
        /// How many of the file's bytes stay.
        keep: u64,
    },
}

/// What a successful write returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    /// The new version tag, where the store has one.
    pub version: Option<Version>,
}

/// Files under a directory, recursively.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileListing {
    /// Files (never directories), sorted by path.
    pub files: Vec<Entry>,
    /// True when the listing stopped at its limit.
    pub truncated: bool,
}

/// The result of [`Backend::glob`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobOutput {
    /// Matching files, sorted by path.
    pub matches: Vec<Entry>,
    /// True when more files matched (or would have been walked) than were returned.
    pub truncated: bool,
}

/// Which files a search may look at: a predicate on paths, as the backend searched names them. See
/// [`GrepQuery::path_filter`]. Cheap to clone (clones share the predicate).
#[derive(Clone)]
pub struct PathFilter(Arc<dyn Fn(&VirtualPath) -> bool + Send + Sync>);

impl PathFilter {
    /// A filter that allows the paths for which `allows` returns true.
    pub fn new(allows: impl Fn(&VirtualPath) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(allows))
    }

    /// True when the search may look at `path`.
    pub fn allows(&self, path: &VirtualPath) -> bool {
        (self.0)(path)
    }
}

impl Debug for PathFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PathFilter(..)")
    }
}

/// Filters are equal when they share one predicate (one is a clone of the other).
impl PartialEq for PathFilter {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PathFilter {}

/// A literal-text search; see [`Backend::grep`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepQuery {
    /// The text to find (a literal, not a regex). Must not be empty.
    pub literal: String,
    /// Where to search: a directory (recursively) or one file.
    pub base: VirtualPath,
    /// Only files whose path below `base` matches this glob.
    pub file_glob: Option<String>,
    /// Stop after this many matching lines.
    pub max_matches: usize,
    /// Skip files larger than this many bytes.
    pub max_file_bytes: u64,
    /// Only files this filter allows are searched. Every other file is left out before it is read:
    /// it is never read, its matches never count toward `max_matches`, and it is never listed in
    /// [`GrepOutput::skipped`]. `None` searches every file.
    pub path_filter: Option<PathFilter>,
}

impl GrepQuery {
    /// A query with default limits (1,000 matches, files up to 10 MiB).
    pub fn new(literal: impl Into<String>, base: VirtualPath) -> Self {
        Self {
            literal: literal.into(),
            base,
            file_glob: None,
            max_matches: 1_000,
            max_file_bytes: 10 * 1024 * 1024,
            path_filter: None,
        }
    }
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepMatch {
    /// The file.
    pub path: VirtualPath,
    /// 1-based line number.
    pub line: u64,
    /// The line's text, without its line ending.
    pub text: String,
}

/// The result of [`Backend::grep`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrepOutput {
    /// Matches in path order, then line order.
    pub matches: Vec<GrepMatch>,
    /// True when more lines matched than were returned.
    pub truncated: bool,
    /// Files skipped because they are too large or not text (not UTF-8, or holding a NUL byte).
    pub skipped: Vec<VirtualPath>,
}

/// What a backend can do, declared rather than guessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Ranged reads fetch only the range (rather than the whole file, then slicing).
    pub ranged_reads: bool,
    /// [`Entry::version`] and [`ReadOutput::version`] are set, and [`WriteMode::IfVersion`] is atomic.
    pub versioned_writes: bool,
    /// Writing a file where a directory stands (or under a file) is refused. Object stores do not
    /// enforce this: a key `a` and a key `a/b` may coexist there.
    pub strict_hierarchy: bool,
}

/// A part of a backend that is a directory on local disk; see [`Backend::local_dirs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDir {
    /// Where it is, in the paths of the backend that answered.
    pub at: VirtualPath,
    /// The directory on local disk (absolute).
    pub host: PathBuf,
}

/// Storage for everything an agent reads and writes.
///
/// Object-safe (`Arc<dyn Backend>`); conveniences live on [`BackendExt`](crate::BackendExt). Every
/// path is a parsed [`VirtualPath`], so implementations only need to keep it inside their root. The
/// contract below holds for every implementation and is checked by one conformance suite
/// (`crates/backend/tests/backend/conformance`).
#[async_trait]
pub trait Backend: Send + Sync + Debug {
    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;

    /// The sandbox that runs commands whose working directory is `cwd`, when this backend can run
    /// commands (see [`sandbox`](crate::sandbox)). `None` (the default): it cannot, and no
    /// `execute` tool is offered over it. A wrapper forwards this; a
    /// [`CompositeBackend`](crate::CompositeBackend) asks the backend that owns `cwd`.
    fn sandbox(&self, cwd: &VirtualPath) -> Option<Arc<dyn crate::sandbox::Sandbox>> {
        let _ = cwd;
        None
    }

    /// The parts of this backend that are directories on local disk, so that a sandbox can mount
    /// them instead of copying their files (see `docs/sandbox.md`). For each [`LocalDir`]: every
    /// file of this backend at or below `at` is the file at the same relative path below `host`,
    /// and every regular file below `host` is such a file (symbolic links below `host` are the
    /// mounting sandbox's concern; this backend's own rules for them still hold for its own
    /// calls). Nothing else of the backend is below `at`: no other backend mounted there, no path
    /// hidden there. Writes still go through the backend, which owns the versions; the directory is
    /// only what the files look like right now.
    ///
    /// Cheap and synchronous: no I/O. `[]` (the default) is always a correct answer, and the
    /// safe one for a wrapper that cannot keep the promise: a sandbox then copies. A wrapper that
    /// moves paths moves `at`; one that hides, adds or reroutes paths below a directory leaves that
    /// directory out.
    fn local_dirs(&self) -> Vec<LocalDir> {
        Vec::new()
    }

    /// Direct children of `dir`, sorted by path. Errors: `NotFound` when `dir` does not exist (the
    /// root always exists), `NotADirectory` when it is a file.
    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>>;

    /// Metadata of one file or directory. Errors: `NotFound`.
    async fn stat(&self, path: &VirtualPath) -> Result<Entry>;

    /// Metadata of many paths: one result per path, in the order given, as [`Backend::stat`] would
    /// give it. Like [`Backend::read_many`], the stats run concurrently (at most
    /// [`DEFAULT_READ_CONCURRENCY`] at once by default) and one failure never fails the others;
    /// local disk batches them in the blocking pool.
    async fn stat_many(&self, paths: &[VirtualPath]) -> Vec<Result<Entry>> {
        futures::stream::iter(paths.iter().cloned())
            .map(|p| async move { self.stat(&p).await })
            .buffered(DEFAULT_READ_CONCURRENCY)
            .collect()
            .await
    }

    /// Read a file, or a byte range of it. Errors: `NotFound`, `IsADirectory`.
    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput>;

    /// Read many files: one result per path, in the order given. Reads run concurrently (at most
    /// [`DEFAULT_READ_CONCURRENCY`] at once by default), so N files cost about one round trip of
    /// latency; one failure never fails the others.
    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        futures::stream::iter(paths.iter().cloned())
            .map(|p| async move { self.read(&p, range).await })
            .buffered(DEFAULT_READ_CONCURRENCY)
            .collect()
            .await
    }

    /// Write a whole file, creating parent directories as needed. Errors: `Conflict` when `mode`'s
    /// precondition fails, `IsADirectory` / `NotADirectory` where the hierarchy is strict.
    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome>;

    /// Write a whole file whose `len` bytes come from `source`, under `mode`, exactly as
    /// [`Backend::write`] of those bytes would: the same creation of parents, the same
    /// preconditions and conflicts, the same atomicity (a reader sees the old file or the new one,
    /// never part of it). It exists so that a large file (an `execute` command's output written
    /// back, say) need not be held in memory whole.
    ///
    /// `source` must hold exactly `len` bytes: one that ends early or holds more fails with
    /// [`BackendError::LengthMismatch`](crate::BackendError::LengthMismatch) and writes nothing
    /// (the old file, if any, is left as it was). The length is announced because a store needs
    /// it up front (to choose between one request and a multipart upload, to bound what it
    /// buffers), and because a caller that knows it (a file it checked with `fstat`) should have a
    /// file that grew or shrank meanwhile refused rather than half-written. The source is an
    /// [`AsyncRead`](tokio::io::AsyncRead) rather than a stream of byte chunks: a file is one, a
    /// backend reads it into one reused buffer of [`WRITE_CHUNK`](crate::WRITE_CHUNK) bytes, and a
    /// chunk stream turns into one with `tokio_util::io::StreamReader`.
    ///
    /// The default reads `source` into memory and calls [`Backend::write`]: right for stores that
    /// hold files in memory anyway, and the fallback everywhere else. A wrapper must forward this
    /// (not inherit the default), or it buffers what the backend it wraps would have streamed.
    /// Local disk streams into its temporary file; object stores stream overwrites above a
    /// threshold as multipart uploads and buffer create-only and version-checked writes, which
    /// multipart uploads cannot make conditional (see `docs/sandbox.md`).
    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: crate::stream::WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        let data = crate::stream::read_source(path, source, len).await?;
        self.write(path, data, mode).await
    }

    /// Delete one file. Errors: `NotFound`, `IsADirectory` (directories are not deleted by this call).
    async fn delete(&self, path: &VirtualPath) -> Result<()>;

    /// Give the file `from` a second name `to` under `mode`, as [`Backend::write`] of its bytes
    /// would, without copying them: the two names are one file from then on, so writing through
    /// either (a write replaces the file a name leads to, it never edits it) leaves the other as
    /// it was. Local disk does this with hard links, which create and free no file; a store that
    /// cannot returns `None` (the default), and the caller writes instead. Errors: those of
    /// [`Backend::write`] for `to`, `NotFound` when `from` is missing, `IsADirectory` when it is
    /// not a regular file.
    async fn link(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        mode: WriteMode,
    ) -> Option<Result<WriteOutcome>> {
        let _ = (from, to, mode);
        None
    }

    /// Add `data` at the end of the file `path` under `mode`, without rewriting what is there:
    /// a log that grows by appends changes one file in place, and creates and frees no file (a
    /// write replaces the file, so each one makes a new file and frees the old). Version-checked
    /// appends are serialized between processes as version-checked writes are, and the file's
    /// version always changes.
    ///
    /// Unlike a write, an append is not atomic for readers: a read while it runs, or after a
    /// process was killed in the middle of one, may find part of `data` at the end (never
    /// anything else). A reader that needs whole records frames them itself, and the next
    /// append passes the size of what it found whole as `keep`.
    ///
    /// `None` (the default) means the store cannot append; the caller then writes whole files.
    /// Local disk appends (a write at the end under an advisory lock on the file); object stores
    /// do not. Errors: those of [`Backend::write`], and `NotFound` never (a missing file is a
    /// version mismatch).
    async fn append(
        &self,
        path: &VirtualPath,
        data: Bytes,
        mode: AppendMode,
    ) -> Option<Result<WriteOutcome>> {
        let _ = (path, data, mode);
        None
    }

    /// [`Backend::list_files`] of one range of `base`'s key space: only the files whose path
    /// comes after `after` (exclusive) and not after `until` (inclusive), comparing paths as
    /// strings byte by byte (the order object stores list keys in), sorted by path, at most
    /// `limit`. It lets a caller that knows roughly what is there (a previous listing) list one
    /// large prefix in several ranges at once: on a store that pages 1,000 keys per request, 20,000
    /// keys are 20 requests one after another, or 4 ranges of 5 requests side by side.
    ///
    /// `None` (the default) means the store cannot start a listing at a key without reading every
    /// key before it; the caller then lists `base` whole with [`Backend::list_files`]. Stores that
    /// start at a key server-side override it (S3's `start-after`, GCS's `startOffset`), and a
    /// range's listing stops at the first key past `until`. Unlike `list_files`, a `base` that is
    /// itself a file is not special: only keys below `base` are listed.
    async fn list_files_between(
        &self,
        base: &VirtualPath,
        after: Option<&VirtualPath>,
        until: Option<&VirtualPath>,
        limit: usize,
    ) -> Option<Result<FileListing>> {
        let _ = (base, after, until, limit);
        None
    }

    /// Every file below `base` (recursively, dot-directories included), sorted by path; at most
    /// `limit` files. `base` may be a file, which lists just that file. A missing `base` lists
    /// nothing. The default walks [`Backend::ls`] level by level; stores with a flat listing
    /// override it with one paged listing.
    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        search::walk_with_ls(self, base, limit).await
    }

    /// Files below `base` matching a glob `pattern`, with the reference semantics: a pattern without
    /// `/` matches base names at any depth; with `/` it matches the path relative to `base`; `**`
    /// spans directories but does not enter dot-directories unless the pattern names a dot segment;
    /// `{a,b}` braces nest; only files match. An unusable pattern is `InvalidPath`.
    async fn glob(&self, pattern: &str, base: &VirtualPath) -> Result<GlobOutput> {
        search::glob_via_listing(self, pattern, base, DEFAULT_GLOB_LIMIT).await
    }

    /// Lines containing a literal string, in files below `query.base`. A file that
    /// `query.path_filter` does not allow is left out before its content is read, so it is never
    /// read and never counted toward `query.max_matches`. An implementation that overrides this
    /// must keep that: apply the filter to every candidate before reading it, with the paths as
    /// this backend names them (a wrapper that passes the query on to a backend with the same
    /// paths keeps it; one that rewrites paths must rewrite them for the filter too).
    async fn grep(&self, query: &GrepQuery) -> Result<GrepOutput> {
        search::grep_via_reads(self, query).await
    }
}
