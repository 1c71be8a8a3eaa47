//! [`ScopedBackend`]: another backend seen from below a prefix, with nothing else in reach.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use crate::backend::{
    AppendMode, Backend, ByteRange, Capabilities, Entry, FileListing, GlobOutput, GrepOutput, GrepQuery,
    PathFilter, ReadOutput, WriteMode, WriteOutcome,
};
use crate::error::{BackendError, Result};
use crate::path::{MAX_PATH_BYTES, VirtualPath};
use crate::reroot;
use crate::stream::WriteSource;

/// Files [`ScopedBackend::delete_all`] lists per round.
const DELETE_PAGE: usize = 1_000;
/// Deletes [`ScopedBackend::delete_all`] keeps in flight.
const DELETE_CONCURRENCY: usize = 16;
/// Rounds in a row that may delete nothing (every listed file already gone) before `delete_all`
/// gives up on a store whose listing keeps showing deleted files.
const IDLE_ROUNDS: usize = 3;

/// A view of `inner` below `prefix`: `/a.txt` in the view is `{prefix}/a.txt` in `inner`; every path
/// the view returns (ls, stat, stat_many, list_files, glob, grep, errors) is rewritten back; nothing
/// outside the prefix is reachable.
///
/// This is how a thread or a user gets a file space of its own on any backend: put each one below
/// its own [`ScopeId::under`](crate::ScopeId::under) prefix. Every path the view takes is a parsed
/// [`VirtualPath`] (no `..`), so `{prefix}/…` is all it can name; everything it returns is filtered to
/// paths *strictly* below the prefix before it is rewritten, so even an inner backend that answered
/// with a sibling (`/threads/ab` next to `/threads/a`) or the prefix itself could not show it.
///
/// * **The root.** The view's `/` is `prefix` and always exists, as a backend's root does: `ls("/")`
///   of a prefix with no files (missing, or a file in `inner`) is empty, `stat("/")` is a directory
///   without asking `inner`, and `read`, `write` and `delete` of `/` are `IsADirectory`. A file stored
///   *at* the prefix in `inner` is outside the view: never listed, read or deleted through it (on a
///   store with a strict hierarchy it makes every write below fail with `NotADirectory`).
/// * **Errors** name the view's paths: an error whose path lies below the prefix names the same
///   file in the view (as `CompositeBackend` does for its mounts), and one that names anything else
///   (which no conforming inner backend returns) names the path the caller asked about, so no inner
///   path is shown. An `InvalidPath` naming a glob pattern (of `glob`, or a grep's
///   `file_glob`) keeps the pattern. Only the path is rewritten: a store's own message carried as
///   the error's `source` (an S3 reply, an I/O error) is passed on as it is and may spell its key.
/// * **glob and grep** run in `inner` (with its own fast paths) from the base moved below the prefix.
///   Patterns match paths relative to that base, which are the same in both, so a pattern means the
///   same in the view as in a whole backend; `/`-anchored patterns anchor at the base, not at the
///   inner root, and dot-segments of the prefix itself never count against `**`. A grep's
///   [`path_filter`](GrepQuery::path_filter) is asked about view paths, as the caller wrote it:
///   inner applies it to its own paths moved back, so a file it refuses is still never read nor
///   counted. Matches, skipped files and listings keep inner's order and its `truncated` flag.
/// * **Versions** are inner's, unchanged: a [`Version`](crate::Version) read through the view is
///   good for `IfVersion` writes through the view and in `inner` at the corresponding path.
/// * **Capabilities** are inner's.
/// * **Length.** A view path whose inner path would be longer than [`MAX_PATH_BYTES`] is refused with
///   `InvalidPath` naming the view path (no call reaches `inner`).
///
/// Cloning shares `inner`. A view at `/` shows the whole of `inner`.
#[derive(Debug, Clone)]
pub struct ScopedBackend {
    inner: Arc<dyn Backend>,
    prefix: VirtualPath,
}

impl ScopedBackend {
    /// The part of `inner` below `prefix`; nothing needs to exist there yet.
    pub fn new(inner: Arc<dyn Backend>, prefix: VirtualPath) -> Self {
        Self { inner, prefix }
    }

    /// Where the view's root lies in [`inner`](Self::inner).
    pub fn prefix(&self) -> &VirtualPath {
        &self.prefix
    }

    /// The backend the view looks into.
    pub fn inner(&self) -> &Arc<dyn Backend> {
        &self.inner
    }

    /// Delete every file in the view (paging through list_files); returns how many were deleted.
    /// Deleting an empty or missing scope is Ok(0).
    ///
    /// Lists up to 1,000 files at a time, deletes them (16 at once) and lists again until a listing
    /// is complete, so any number of files goes. Files that vanish meanwhile (another deleter) are
    /// not counted; a file written meanwhile may survive. On an error, what was deleted stays
    /// deleted and a second call resumes. Only files are deleted: on local disk the emptied
    /// directories stay (and `ls` of the view still shows them); the prefix itself, or a file stored
    /// at it, is not touched.
    pub async fn delete_all(&self) -> Result<usize> {
        self.delete_in_pages(DELETE_PAGE).await
    }

    async fn delete_in_pages(&self, page: usize) -> Result<usize> {
        let root = VirtualPath::root();
        let (mut deleted, mut idle) = (0, 0);
        loop {
            let listing = self.list_files(&root, page.max(1)).await?;
            // Owned paths: a closure over borrowed entries makes the future not `Send` for every
            // lifetime, and callers inside `#[async_trait]` methods need it to be.
            let paths: Vec<VirtualPath> = listing.files.iter().map(|f| f.path.clone()).collect();
            let results: Vec<Result<()>> = futures::stream::iter(paths)
                .map(|path| async move { self.delete(&path).await })
                .buffer_unordered(DELETE_CONCURRENCY)
                .collect()
                .await;
            let mut round = 0;
            for result in results {
                match result {
                    Ok(()) => round += 1,
                    Err(BackendError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            deleted += round;
            if !listing.truncated || listing.files.is_empty() {
                return Ok(deleted);
            }
            idle = if round == 0 { idle + 1 } else { 0 };
            if idle >= IDLE_ROUNDS {
                return Err(BackendError::other(
                    &root,
                    "the listing keeps showing files that are already deleted",
                ));
            }
        }
    }

    /// Where a view path lies in `inner`.
    fn inward(&self, path: &VirtualPath) -> Result<VirtualPath> {
        let inner = path
            .rebase(&VirtualPath::root(), &self.prefix)
            .filter(|p| p.as_str().len() <= MAX_PATH_BYTES);
        inner.ok_or_else(|| BackendError::InvalidPath {
            path: path.to_string(),
            reason: "the path is too long for this scope".to_owned(),
        })
    }

    /// The view path of an inner path strictly below the prefix.
    fn outward(&self, inner: &VirtualPath) -> Option<VirtualPath> {
        view_path(&self.prefix, inner)
    }

    /// An inner listing in view paths.
    fn outward_listing(&self, listing: FileListing) -> FileListing {
        FileListing {
            files: reroot::entries(listing.files, |p| self.outward(p)),
            truncated: listing.truncated,
        }
    }

    /// `err` naming the view's path: the same file when it named one in the scope (the prefix
    /// itself is the view's root), else `asked`.
    fn outward_error(&self, err: BackendError, asked: &VirtualPath) -> BackendError {
        let named = VirtualPath::parse(err.path())
            .ok()
            .and_then(|p| p.rebase(&self.prefix, &VirtualPath::root()));
        let path = named.unwrap_or_else(|| asked.clone());
        err.renamed(path)
    }

    /// [`outward_error`](Self::outward_error), except that an `InvalidPath` naming `pattern` (a
    /// glob the caller wrote, not a path) is left as it is.
    fn outward_search_error(
        &self,
        err: BackendError,
        asked: &VirtualPath,
        pattern: Option<&str>,
    ) -> BackendError {
        match &err {
            BackendError::InvalidPath { path, .. } if Some(path.as_str()) == pattern => err,
            _ => self.outward_error(err, asked),
        }
    }

    /// Split a batch: paths the view answers itself (the root, via `at_root`, and paths too long
    /// for the scope) and the inner paths of the rest.
    fn batch<T>(&self, paths: &[VirtualPath], at_root: impl Fn(&VirtualPath) -> Result<T>) -> Batch<T> {
        let mut batch = Batch {
            out: Vec::with_capacity(paths.len()),
            index: Vec::new(),
            inner: Vec::new(),
        };
        for (i, path) in paths.iter().enumerate() {
            let answer = match self.inward(path) {
                Ok(_) if path.is_root() => Some(at_root(path)),
                Ok(inner) => {
                    batch.index.push(i);
                    batch.inner.push(inner);
                    None
                }
                Err(e) => Some(Err(e)),
            };
            batch.out.push(answer);
        }
        batch
    }
}

/// A batched call split by [`ScopedBackend::batch`].
struct Batch<T> {
    /// One slot per path, in order; filled for the paths answered without `inner`.
    out: Vec<Option<Result<T>>>,
    /// Positions of the paths sent to `inner`.
    index: Vec<usize>,
    /// Their inner paths.
    inner: Vec<VirtualPath>,
}

impl<T> Batch<T> {
    /// Put `inner`'s results (for [`Batch::inner`], in order) in place, each through `map`.
    fn finish(
        mut self,
        paths: &[VirtualPath],
        results: Vec<Result<T>>,
        map: impl Fn(&VirtualPath, Result<T>) -> Result<T>,
    ) -> Vec<Result<T>> {
        for (&i, result) in self.index.iter().zip(results) {
            self.out[i] = Some(map(&paths[i], result));
        }
        self.out
            .into_iter()
            .zip(paths)
            .map(|(r, p)| r.unwrap_or_else(|| Err(BackendError::not_found(p))))
            .collect()
    }
}

/// The view path of `inner` in a view at `prefix`, when `inner` lies strictly below `prefix`.
fn view_path(prefix: &VirtualPath, inner: &VirtualPath) -> Option<VirtualPath> {
    inner
        .rebase(prefix, &VirtualPath::root())
        .filter(|p| !p.is_root())
}

fn is_a_directory(path: &VirtualPath) -> BackendError {
    BackendError::IsADirectory {
        path: path.to_string(),
    }
}

#[async_trait]
impl Backend for ScopedBackend {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn sandbox(&self, cwd: &VirtualPath) -> Option<Arc<dyn crate::sandbox::Sandbox>> {
        self.inward(cwd).ok().and_then(|inner| self.inner.sandbox(&inner))
    }

    /// Inner's directories seen from the prefix: one that holds the prefix becomes the view's root
    /// (its host directory followed down to the prefix), one below the prefix moves up with it.
    fn local_dirs(&self) -> Vec<crate::backend::LocalDir> {
        self.inner
            .local_dirs()
            .into_iter()
            .filter_map(|dir| {
                if let Some(rel) = self.prefix.relative_to(&dir.at) {
                    let mut host = dir.host;
                    host.extend(rel.split('/').filter(|s| !s.is_empty()));
                    Some(crate::backend::LocalDir {
                        at: VirtualPath::root(),
                        host,
                    })
                } else {
                    view_path(&self.prefix, &dir.at).map(|at| crate::backend::LocalDir { at, host: dir.host })
                }
            })
            .collect()
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        let inner = self.inward(dir)?;
        match self.inner.ls(&inner).await {
            Ok(entries) => Ok(reroot::entries(entries, |p| self.outward(p))),
            Err(BackendError::NotFound { .. } | BackendError::NotADirectory { .. }) if dir.is_root() => {
                Ok(Vec::new())
            }
            Err(e) => Err(self.outward_error(e, dir)),
        }
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        let inner = self.inward(path)?;
        if path.is_root() {
            return Ok(Entry::directory(path.clone()));
        }
        match self.inner.stat(&inner).await {
            Ok(entry) => {
                reroot::entry(entry, |p| self.outward(p)).ok_or_else(|| BackendError::not_found(path))
            }
            Err(e) => Err(self.outward_error(e, path)),
        }
    }

    async fn stat_many(&self, paths: &[VirtualPath]) -> Vec<Result<Entry>> {
        let batch = self.batch(paths, |root| Ok(Entry::directory(root.clone())));
        let results = self.inner.stat_many(&batch.inner).await;
        batch.finish(paths, results, |path, result| match result {
            Ok(entry) => {
                reroot::entry(entry, |p| self.outward(p)).ok_or_else(|| BackendError::not_found(path))
            }
            Err(e) => Err(self.outward_error(e, path)),
        })
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        let inner = self.inward(path)?;
        if path.is_root() {
            return Err(is_a_directory(path));
        }
        self.inner
            .read(&inner, range)
            .await
            .map_err(|e| self.outward_error(e, path))
    }

    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        let batch = self.batch(paths, |root| Err(is_a_directory(root)));
        let results = self.inner.read_many(&batch.inner, range).await;
        batch.finish(paths, results, |path, result| {
            result.map_err(|e| self.outward_error(e, path))
        })
    }

    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        let inner = self.inward(path)?;
        if path.is_root() {
            return Err(is_a_directory(path));
        }
        self.inner
            .write(&inner, data, mode)
            .await
            .map_err(|e| self.outward_error(e, path))
    }

    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        let inner = self.inward(path)?;
        if path.is_root() {
            return Err(is_a_directory(path));
        }
        self.inner
            .write_stream(&inner, source, len, mode)
            .await
            .map_err(|e| self.outward_error(e, path))
    }

    async fn link(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        mode: WriteMode,
    ) -> Option<Result<WriteOutcome>> {
        let (inner_from, inner_to) = match (self.inward(from), self.inward(to)) {
            (Ok(f), Ok(t)) => (f, t),
            (Err(e), _) | (_, Err(e)) => return Some(Err(e)),
        };
        if from.is_root() || to.is_root() {
            return Some(Err(is_a_directory(if from.is_root() { from } else { to })));
        }
        let linked = self.inner.link(&inner_from, &inner_to, mode).await?;
        Some(linked.map_err(|e| self.outward_error(e, to)))
    }

    async fn append(
        &self,
        path: &VirtualPath,
        data: Bytes,
        mode: AppendMode,
    ) -> Option<Result<WriteOutcome>> {
        let inner = match self.inward(path) {
            Ok(inner) => inner,
            Err(e) => return Some(Err(e)),
        };
        if path.is_root() {
            return Some(Err(is_a_directory(path)));
        }
        let appended = self.inner.append(&inner, data, mode).await?;
        Some(appended.map_err(|e| self.outward_error(e, path)))
    }

    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        let inner = self.inward(path)?;
        if path.is_root() {
            return Err(is_a_directory(path));
        }
        self.inner
            .delete(&inner)
            .await
            .map_err(|e| self.outward_error(e, path))
    }

    async fn list_files_between(
        &self,
        base: &VirtualPath,
        after: Option<&VirtualPath>,
        until: Option<&VirtualPath>,
        limit: usize,
    ) -> Option<Result<FileListing>> {
        let inward = |p: Option<&VirtualPath>| p.map(|p| self.inward(p)).transpose();
        let (inner, after, until) = match (self.inward(base), inward(after), inward(until)) {
            (Ok(inner), Ok(after), Ok(until)) => (inner, after, until),
            (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => return Some(Err(e)),
        };
        let listing = self
            .inner
            .list_files_between(&inner, after.as_ref(), until.as_ref(), limit)
            .await?;
        Some(
            listing
                .map_err(|e| self.outward_error(e, base))
                .map(|listing| self.outward_listing(listing)),
        )
    }

    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        let inner = self.inward(base)?;
        let listing = self
            .inner
            .list_files(&inner, limit)
            .await
            .map_err(|e| self.outward_error(e, base))?;
        Ok(self.outward_listing(listing))
    }

    async fn glob(&self, pattern: &str, base: &VirtualPath) -> Result<GlobOutput> {
        let inner = self.inward(base)?;
        let out = self
            .inner
            .glob(pattern, &inner)
            .await
            .map_err(|e| self.outward_search_error(e, base, Some(pattern)))?;
        Ok(GlobOutput {
            matches: reroot::entries(out.matches, |p| self.outward(p)),
            truncated: out.truncated,
        })
    }

    async fn grep(&self, query: &GrepQuery) -> Result<GrepOutput> {
        // The caller's filter judges view paths: `inner` asks it about its own paths, moved back
        // (and refuses anything not strictly below the prefix without asking).
        let path_filter = query.path_filter.clone().map(|allows| {
            let prefix = self.prefix.clone();
            PathFilter::new(move |inner| view_path(&prefix, inner).is_some_and(|p| allows.allows(&p)))
        });
        let inner = GrepQuery {
            base: self.inward(&query.base)?,
            path_filter,
            ..query.clone()
        };
        let out = self
            .inner
            .grep(&inner)
            .await
            .map_err(|e| self.outward_search_error(e, &query.base, query.file_glob.as_deref()))?;
        Ok(reroot::grep_output(out, |p| self.outward(p)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::state::StateBackend;

    #[tokio::test]
    async fn delete_all_pages_through_listings_smaller_than_the_scope() {
        let inner = Arc::new(StateBackend::new());
        let scope = |at: &str| ScopedBackend::new(inner.clone(), VirtualPath::parse(at).unwrap());
        let (a, b) = (scope("/t/a"), scope("/t/b"));
        for i in 0..10 {
            let path = VirtualPath::parse(&format!("/d{}/f{i}", i % 3)).unwrap();
            a.write(&path, "a".into(), WriteMode::CreateNew).await.unwrap();
            b.write(&path, "b".into(), WriteMode::CreateNew).await.unwrap();
        }
        assert_eq!(
            a.delete_in_pages(3).await.unwrap(),
            10,
            "four rounds of at most three"
        );
        assert!(
            a.list_files(&VirtualPath::root(), usize::MAX)
                .await
                .unwrap()
                .files
                .is_empty()
        );
        assert_eq!(inner.len(), 10, "the other scope is whole");
        assert_eq!(a.delete_in_pages(3).await.unwrap(), 0);
    }
}
