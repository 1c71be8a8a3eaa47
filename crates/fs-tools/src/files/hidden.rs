//! [`HiddenPaths`]: subtrees the file tools treat as absent for one run.
//!
//! A run extension. Every file tool wraps its backend with [`HiddenPaths::wrap`] (through
//! [`FileAccess::for_call`](crate::FileAccess::for_call)) when the run carries one, so `ls`,
//! `read_file`, `glob`, `grep`, `edit_file` and `delete` behave exactly as if nothing existed below
//! a hidden path (same answers, same wording), and `write_file` is refused. The
//! skills middleware adds the directories of skills the run's viewer may not see; a caller may add
//! its own. Subagents inherit the run's extensions, so they are hidden from a subagent's file tools
//! too.
//!
//! Limits: the hidden set is a list of virtual paths, compared segment-wise. A second name for the
//! same files (a symlink on local disk, another mount of the same store in a composite backend) is
//! not hidden. Writes are refused with "permission denied", which tells the caller that something
//! is protected there. Tools other than the file tools must apply [`HiddenPaths::wrap`] themselves.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use trellis_backend::{
    Backend, BackendError, ByteRange, Capabilities, Entry, FileListing, GlobOutput, GrepOutput, GrepQuery,
    ReadOutput, Result, VirtualPath, WriteMode, WriteOutcome, WriteSource,
};

/// Subtrees (a path and everything below it) the file tools treat as absent. Cheap to clone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HiddenPaths {
    paths: Arc<[VirtualPath]>,
}

impl HiddenPaths {
    /// Hide these paths and everything below them. The root cannot be hidden (it is ignored).
    pub fn new(paths: impl IntoIterator<Item = VirtualPath>) -> Self {
        let mut paths: Vec<VirtualPath> = paths.into_iter().filter(|p| !p.is_root()).collect();
        paths.sort();
        paths.dedup();
        // Drop paths already covered by an ancestor in the set.
        let covered: Vec<bool> = paths
            .iter()
            .map(|p| ancestors(p.as_str()).any(|a| sorted_contains(&paths, a)))
            .collect();
        let kept: Vec<VirtualPath> = paths
            .into_iter()
            .zip(covered)
            .filter_map(|(p, covered)| (!covered).then_some(p))
            .collect();
        Self { paths: kept.into() }
    }

    /// The hidden subtrees, sorted.
    pub fn paths(&self) -> &[VirtualPath] {
        &self.paths
    }

    /// True when nothing is hidden.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// True when `path` is a hidden path or lies below one. Costs one binary search per segment.
    pub fn hides(&self, path: &VirtualPath) -> bool {
        !self.paths.is_empty()
            && (sorted_contains(&self.paths, path.as_str())
                || ancestors(path.as_str()).any(|a| sorted_contains(&self.paths, a)))
    }

    /// True when some hidden path lies strictly below `base`.
    fn any_below(&self, base: &VirtualPath) -> bool {
        if base.is_root() {
            return !self.paths.is_empty();
        }
        // Paths below `base` start with `base/` and so sort together, right after it.
        let below = format!("{base}/");
        let start = self.paths.partition_point(|p| p.as_str() < below.as_str());
        self.paths
            .get(start)
            .is_some_and(|p| p.as_str().starts_with(&below))
    }

    /// Both sets.
    pub fn merged(&self, other: &HiddenPaths) -> Self {
        Self::new(self.paths.iter().chain(other.paths.iter()).cloned())
    }

    /// `backend` with these paths absent: reads, `stat`, `ls`, listings, `glob`, `grep` and deletes
    /// act as if nothing existed there, and writes are refused (`PermissionDenied`). Returns
    /// `backend` itself when nothing is hidden.
    pub fn wrap(&self, backend: Arc<dyn Backend>) -> Arc<dyn Backend> {
        if self.is_empty() {
            return backend;
        }
        Arc::new(Hiding {
            inner: backend,
            hidden: self.clone(),
        })
    }
}

/// The strict ancestors of an absolute path string, root excluded: `/a/b/c` gives `/a`, `/a/b`.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/')
        .map(|(i, _)| i)
        .skip(1)
        .map(move |end| &path[..end])
}

/// True when the sorted `paths` hold `path` (byte order, as [`VirtualPath`] sorts).
fn sorted_contains(paths: &[VirtualPath], path: &str) -> bool {
    paths.binary_search_by(|p| p.as_str().cmp(path)).is_ok()
}

/// The backend [`HiddenPaths::wrap`] returns.
struct Hiding {
    inner: Arc<dyn Backend>,
    hidden: HiddenPaths,
}

impl fmt::Debug for Hiding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hiding")
            .field("inner", &self.inner)
            .field("hidden", &self.hidden.paths.len())
            .finish()
    }
}

impl Hiding {
    fn absent(&self, path: &VirtualPath) -> Result<()> {
        if self.hidden.hides(path) {
            Err(BackendError::NotFound {
                path: path.to_string(),
            })
        } else {
            Ok(())
        }
    }

    fn keep(&self, entries: &mut Vec<Entry>) {
        entries.retain(|e| !self.hidden.hides(&e.path));
    }
}

#[async_trait]
impl Backend for Hiding {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn sandbox(&self, cwd: &VirtualPath) -> Option<Arc<dyn trellis_backend::Sandbox>> {
        self.inner.sandbox(cwd)
    }

    /// Inner's directories, less any that is hidden or holds a hidden path (a mount of it would
    /// show what is hidden).
    fn local_dirs(&self) -> Vec<trellis_backend::LocalDir> {
        let mut dirs = self.inner.local_dirs();
        dirs.retain(|d| !self.hidden.hides(&d.at) && !self.hidden.any_below(&d.at));
        dirs
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.absent(dir)?;
        let mut entries = self.inner.ls(dir).await?;
        self.keep(&mut entries);
        Ok(entries)
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        self.absent(path)?;
        self.inner.stat(path).await
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        self.absent(path)?;
        self.inner.read(path, range).await
    }

    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        let shown: Vec<VirtualPath> = paths.iter().filter(|p| !self.hidden.hides(p)).cloned().collect();
        let mut results = self.inner.read_many(&shown, range).await.into_iter();
        paths
            .iter()
            .map(|p| match self.absent(p) {
                Err(e) => Err(e),
                Ok(()) => results
                    .next()
                    .unwrap_or_else(|| Err(BackendError::NotFound { path: p.to_string() })),
            })
            .collect()
    }

    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        if self.hidden.hides(path) {
            return Err(BackendError::PermissionDenied {
                path: path.to_string(),
                source: None,
            });
        }
        self.inner.write(path, data, mode).await
    }

    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        if self.hidden.hides(path) {
            return Err(BackendError::PermissionDenied {
                path: path.to_string(),
                source: None,
            });
        }
        self.inner.write_stream(path, source, len, mode).await
    }

    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        self.absent(path)?;
        self.inner.delete(path).await
    }

    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        if self.hidden.hides(base) {
            // What the trait promises for a missing base.
            return Ok(FileListing::default());
        }
        let mut listing = self.inner.list_files(base, limit).await?;
        if self.hidden.any_below(base) {
            self.keep(&mut listing.files);
        }
        Ok(listing)
    }

    async fn glob(&self, pattern: &str, base: &VirtualPath) -> Result<GlobOutput> {
        if self.hidden.hides(base) || self.hidden.any_below(base) {
            // The trait's listing-based glob over this backend never sees a hidden file (so hidden
            // matches cannot use up the match limit), and finds nothing in a hidden base, as in a
            // missing one.
            return Walk(self).glob(pattern, base).await;
        }
        self.inner.glob(pattern, base).await
    }

    async fn grep(&self, query: &GrepQuery) -> Result<GrepOutput> {
        // Either way the query goes on whole, so its path filter (the caller's permission rules)
        // still leaves files out before they are read.
        if self.hidden.hides(&query.base) || self.hidden.any_below(&query.base) {
            return Walk(self).grep(query).await;
        }
        self.inner.grep(query).await
    }
}

/// [`Hiding`] with the trait's default `glob` and `grep`, which work from `list_files` and
/// `read_many`: a search that never reads a hidden file.
#[derive(Debug)]
struct Walk<'a>(&'a Hiding);

#[async_trait]
impl Backend for Walk<'_> {
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.0.ls(dir).await
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        self.0.stat(path).await
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        self.0.read(path, range).await
    }

    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        self.0.read_many(paths, range).await
    }

    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        self.0.write(path, data, mode).await
    }

    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        self.0.delete(path).await
    }

    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        self.0.list_files(base, limit).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    #[test]
    fn hides_subtrees_segment_wise() {
        let hidden = HiddenPaths::new([
            p("/skills/b"),
            p("/skills/a"),
            p("/skills/a/x"),
            VirtualPath::root(),
        ]);
        assert_eq!(hidden.paths(), &[p("/skills/a"), p("/skills/b")]);
        assert!(hidden.hides(&p("/skills/a")));
        assert!(hidden.hides(&p("/skills/a/SKILL.md")));
        assert!(hidden.hides(&p("/skills/b/deep/x")));
        assert!(
            !hidden.hides(&p("/skills/a-b")),
            "a sibling with the same prefix is not hidden"
        );
        assert!(!hidden.hides(&p("/skills/ab/SKILL.md")));
        assert!(!hidden.hides(&p("/skills")));
        assert!(hidden.any_below(&p("/skills")) && hidden.any_below(&VirtualPath::root()));
        assert!(!hidden.any_below(&p("/skills/a")));
        // `/skills/a-b` sorts between `/skills/a` and `/skills/a/...`: the lookup still finds `/skills/a`.
        let hidden = HiddenPaths::new([p("/s/a"), p("/s/a-b"), p("/s/a/x")]);
        assert_eq!(
            hidden.paths(),
            &[p("/s/a"), p("/s/a-b")],
            "a covered path is dropped"
        );
        assert!(hidden.hides(&p("/s/a/x")) && hidden.hides(&p("/s/a-b/y")) && !hidden.hides(&p("/s/a.c")));
        assert!(HiddenPaths::default().is_empty());
    }
}
