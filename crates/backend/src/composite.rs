//! [`CompositeBackend`]: route paths to other backends by longest prefix.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::backend::{
    AppendMode, Backend, ByteRange, Capabilities, Entry, FileListing, ReadOutput, WriteMode, WriteOutcome,
};
use crate::error::{BackendError, Result};
use crate::path::VirtualPath;
use crate::reroot;
use crate::stream::WriteSource;

/// Routes every path to the backend mounted at its longest matching prefix, or to the default.
///
/// A backend mounted at `/memories` sees `/memories/a.md` as `/a.md`; every path it returns (from
/// `ls`, `stat`, `list_files`, `glob`, `grep`) is rewritten back to `/memories/…`. Mounts shadow the
/// default: files the default backend holds under a mount point are invisible. Listing a directory
/// above a mount point shows the mount as a directory, even when the default has nothing there.
#[derive(Debug, Clone)]
pub struct CompositeBackend {
    default: Arc<dyn Backend>,
    /// Longest prefix first.
    mounts: Vec<(VirtualPath, Arc<dyn Backend>)>,
}

/// Paths routed to one backend (see `CompositeBackend::by_backend`). One backend may be mounted at
/// several points and be the default too, so each path keeps its own mount point.
struct Routed<'a> {
    backend: &'a dyn Backend,
    /// Positions in the caller's list.
    index: Vec<usize>,
    /// The mount point each path went through (`None`: the default backend).
    mounts: Vec<Option<&'a VirtualPath>>,
    /// The same paths, inside `backend`.
    inner: Vec<VirtualPath>,
}

impl CompositeBackend {
    /// Everything goes to `default` until something is mounted.
    pub fn new(default: Arc<dyn Backend>) -> Self {
        Self {
            default,
            mounts: Vec::new(),
        }
    }

    /// Mount `backend` at `prefix` (`/memories` or `/memories/`; not `/`). A later mount at the same
    /// prefix replaces the earlier one.
    pub fn mount(mut self, prefix: &str, backend: Arc<dyn Backend>) -> Result<Self> {
        let at = VirtualPath::parse(prefix).map_err(|e| BackendError::invalid_path(prefix, e))?;
        if at.is_root() {
            return Err(BackendError::InvalidPath {
                path: prefix.to_owned(),
                reason: "cannot mount at the root; use it as the default backend".to_owned(),
            });
        }
        self.mounts.retain(|(p, _)| *p != at);
        self.mounts.push((at, backend));
        self.mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.depth()));
        Ok(self)
    }

    /// Mount points, longest first.
    pub fn mount_points(&self) -> impl Iterator<Item = &VirtualPath> {
        self.mounts.iter().map(|(p, _)| p)
    }

    /// The backend for `path`, the path it sees, and the mount point (if any).
    fn route<'a>(&'a self, path: &VirtualPath) -> (&'a dyn Backend, VirtualPath, Option<&'a VirtualPath>) {
        for (at, backend) in &self.mounts {
            if let Some(inner) = path.rebase(at, &VirtualPath::root()) {
                return (backend.as_ref(), inner, Some(at));
            }
        }
        (self.default.as_ref(), path.clone(), None)
    }

    fn outward(entry: Entry, mount: Option<&VirtualPath>) -> Option<Entry> {
        match mount {
            None => Some(entry),
            Some(at) => reroot::entry(entry, |p| p.rebase(&VirtualPath::root(), at)),
        }
    }

    /// A listing of one mount's backend, in this backend's paths.
    fn outward_listing(listing: FileListing, mount: Option<&VirtualPath>) -> FileListing {
        FileListing {
            files: listing
                .files
                .into_iter()
                .filter_map(|e| Self::outward(e, mount))
                .collect(),
            truncated: listing.truncated,
        }
    }

    fn in_mount(&self, path: &VirtualPath) -> bool {
        self.mounts.iter().any(|(at, _)| path.starts_with(at))
    }

    /// Mount points strictly below `dir`.
    fn mounts_below<'a>(
        &'a self,
        dir: &'a VirtualPath,
    ) -> impl Iterator<Item = &'a (VirtualPath, Arc<dyn Backend>)> {
        self.mounts
            .iter()
            .filter(move |(at, _)| at != dir && at.starts_with(dir))
    }

    /// `paths[i]` for each `i` in `index`, grouped by the backend they route to (in order of first
    /// appearance), with their paths inside that backend and the mount point each went through.
    fn by_backend<'a>(&'a self, paths: &[VirtualPath], index: &[usize]) -> Vec<Routed<'a>> {
        let mut groups: Vec<Routed<'a>> = Vec::new();
        for &i in index {
            let (backend, inner, mount) = self.route(&paths[i]);
            let same = |g: &&mut Routed<'a>| std::ptr::addr_eq(g.backend, backend);
            match groups.iter_mut().find(same) {
                Some(group) => {
                    group.index.push(i);
                    group.mounts.push(mount);
                    group.inner.push(inner);
                }
                None => groups.push(Routed {
                    backend,
                    index: vec![i],
                    mounts: vec![mount],
                    inner: vec![inner],
                }),
            }
        }
        groups
    }

    fn with_mount_path(err: BackendError, inner: &VirtualPath, outer: &VirtualPath) -> BackendError {
        // Errors name the caller's path, not the mounted backend's view of it.
        if err.path() != inner.as_str() {
            return err;
        }
        err.renamed(outer)
    }
}

#[async_trait]
impl Backend for CompositeBackend {
    fn capabilities(&self) -> Capabilities {
        self.mounts
            .iter()
            .map(|(_, b)| b.capabilities())
            .fold(self.default.capabilities(), |a, b| Capabilities {
                ranged_reads: a.ranged_reads && b.ranged_reads,
                versioned_writes: a.versioned_writes && b.versioned_writes,
                strict_hierarchy: a.strict_hierarchy && b.strict_hierarchy,
            })
    }

    fn sandbox(&self, cwd: &VirtualPath) -> Option<Arc<dyn crate::sandbox::Sandbox>> {
        let (backend, inner, _) = self.route(cwd);
        backend.sandbox(&inner)
    }

    /// Each mount's directories, moved below its mount point, and the default backend's that are
    /// neither at or below a mount point (shadowed) nor above one (the mount would be missing from
    /// the directory).
    fn local_dirs(&self) -> Vec<crate::backend::LocalDir> {
        let mut dirs: Vec<crate::backend::LocalDir> = self
            .default
            .local_dirs()
            .into_iter()
            .filter(|d| {
                !self
                    .mounts
                    .iter()
                    .any(|(at, _)| at.starts_with(&d.at) || d.at.starts_with(at))
            })
            .collect();
        for (at, backend) in &self.mounts {
            for dir in backend.local_dirs() {
                let Some(moved) = dir.at.rebase(&VirtualPath::root(), at) else {
                    continue;
                };
                // A deeper mount inside this directory would be missing from it.
                if self
                    .mounts
                    .iter()
                    .any(|(other, _)| other != at && other.starts_with(&moved))
                {
                    continue;
                }
                dirs.push(crate::backend::LocalDir {
                    at: moved,
                    host: dir.host,
                });
            }
        }
        dirs
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        let (backend, inner, mount) = self.route(dir);
        if mount.is_some() {
            let entries = backend
                .ls(&inner)
                .await
                .map_err(|e| Self::with_mount_path(e, &inner, dir))?;
            return Ok(entries
                .into_iter()
                .filter_map(|e| Self::outward(e, mount))
                .collect());
        }
        let mut synthetic: Vec<Entry> = Vec::new();
        for (at, _) in self.mounts_below(dir) {
            let rel = at.relative_to(dir).unwrap_or_default();
            let child = rel.split('/').next().unwrap_or(rel);
            if let Ok(path) = dir.join(child)
                && !synthetic.iter().any(|e| e.path == path)
            {
                synthetic.push(Entry::directory(path));
            }
        }
        let mut entries = match self.default.ls(dir).await {
            Ok(entries) => entries,
            Err(BackendError::NotFound { .. }) if !synthetic.is_empty() => Vec::new(),
            Err(e) => return Err(e),
        };
        entries.retain(|e| !synthetic.iter().any(|s| s.path == e.path));
        entries.extend(synthetic);
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(entries)
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        let (backend, inner, mount) = self.route(path);
        match backend.stat(&inner).await {
            Ok(entry) => Self::outward(entry, mount).ok_or_else(|| BackendError::not_found(path)),
            Err(BackendError::NotFound { .. })
                if mount.is_none() && self.mounts_below(path).next().is_some() =>
            {
                Ok(Entry::directory(path.clone()))
            }
            Err(e) => Err(Self::with_mount_path(e, &inner, path)),
        }
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        let (backend, inner, mount) = self.route(path);
        if mount.is_none() && self.mounts_below(path).next().is_some() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        backend
            .read(&inner, range)
            .await
            .map_err(|e| Self::with_mount_path(e, &inner, path))
    }

    async fn stat_many(&self, paths: &[VirtualPath]) -> Vec<Result<Entry>> {
        // Paths with mount points below them keep the composite's own answer (a missing one is a
        // synthetic directory); the rest go to their backend in one batch per backend.
        let (direct, routed): (Vec<usize>, Vec<usize>) =
            (0..paths.len()).partition(|&i| self.mounts_below(&paths[i]).next().is_some());
        let mut out: Vec<Option<Result<Entry>>> = paths.iter().map(|_| None).collect();
        for i in direct {
            out[i] = Some(self.stat(&paths[i]).await);
        }
        let groups = self.by_backend(paths, &routed);
        let results = futures::future::join_all(groups.iter().map(|g| g.backend.stat_many(&g.inner))).await;
        for (group, results) in groups.iter().zip(results) {
            let routed = group.index.iter().zip(&group.mounts).zip(&group.inner);
            for (((&i, &mount), inner), result) in routed.zip(results) {
                out[i] = Some(match result {
                    Ok(entry) => {
                        Self::outward(entry, mount).ok_or_else(|| BackendError::not_found(&paths[i]))
                    }
                    Err(e) => Err(Self::with_mount_path(e, inner, &paths[i])),
                });
            }
        }
        out.into_iter()
            .zip(paths)
            .map(|(r, p)| r.unwrap_or_else(|| Err(BackendError::not_found(p))))
            .collect()
    }

    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        // A path of the default backend with mount points below it is a directory here, as `read`
        // says; the rest get one batched read per backend, all backends at once. Results go back
        // in input order.
        let (directories, routed): (Vec<usize>, Vec<usize>) = (0..paths.len())
            .partition(|&i| !self.in_mount(&paths[i]) && self.mounts_below(&paths[i]).next().is_some());
        let mut out: Vec<Option<Result<ReadOutput>>> = paths.iter().map(|_| None).collect();
        for i in directories {
            out[i] = Some(Err(BackendError::IsADirectory {
                path: paths[i].to_string(),
            }));
        }
        let groups = self.by_backend(paths, &routed);
        let results =
            futures::future::join_all(groups.iter().map(|g| g.backend.read_many(&g.inner, range))).await;
        for (group, results) in groups.iter().zip(results) {
            for ((&i, inner), result) in group.index.iter().zip(&group.inner).zip(results) {
                out[i] = Some(result.map_err(|e| Self::with_mount_path(e, inner, &paths[i])));
            }
        }
        out.into_iter()
            .zip(paths)
            .map(|(r, p)| r.unwrap_or_else(|| Err(BackendError::not_found(p))))
            .collect()
    }

    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        let (backend, inner, mount) = self.route(path);
        if mount.is_none() && self.mounts_below(path).next().is_some() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        backend
            .write(&inner, data, mode)
            .await
            .map_err(|e| Self::with_mount_path(e, &inner, path))
    }

    async fn append(
        &self,
        path: &VirtualPath,
        data: Bytes,
        mode: AppendMode,
    ) -> Option<Result<WriteOutcome>> {
        let (backend, inner, mount) = self.route(path);
        if mount.is_none() && self.mounts_below(path).next().is_some() {
            return Some(Err(BackendError::IsADirectory {
                path: path.to_string(),
            }));
        }
        let appended = backend.append(&inner, data, mode).await?;
        Some(appended.map_err(|e| Self::with_mount_path(e, &inner, path)))
    }

    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        let (backend, inner, mount) = self.route(path);
        if mount.is_none() && self.mounts_below(path).next().is_some() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        backend
            .write_stream(&inner, source, len, mode)
            .await
            .map_err(|e| Self::with_mount_path(e, &inner, path))
    }

    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        let (backend, inner, mount) = self.route(path);
        if mount.is_none() && self.mounts_below(path).next().is_some() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        backend
            .delete(&inner)
            .await
            .map_err(|e| Self::with_mount_path(e, &inner, path))
    }

    async fn list_files_between(
        &self,
        base: &VirtualPath,
        after: Option<&VirtualPath>,
        until: Option<&VirtualPath>,
        limit: usize,
    ) -> Option<Result<FileListing>> {
        // Only a range inside one mount with no deeper mount below `base` is one store's range.
        let (backend, inner, mount) = self.route(base);
        let at = mount?;
        if self.mounts_below(base).next().is_some() {
            return None;
        }
        let inward = |p: Option<&VirtualPath>| match p {
            None => Some(None),
            Some(p) => p.rebase(at, &VirtualPath::root()).map(Some),
        };
        let (after, until) = (inward(after)?, inward(until)?);
        let listing = backend
            .list_files_between(&inner, after.as_ref(), until.as_ref(), limit)
            .await?;
        Some(listing.map(|listing| Self::outward_listing(listing, mount)))
    }

    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        let (backend, inner, mount) = self.route(base);
        if mount.is_some() {
            let listing = backend.list_files(&inner, limit).await?;
            return Ok(Self::outward_listing(listing, mount));
        }
        let own = self.default.list_files(base, limit).await?;
        let mut truncated = own.truncated;
        let mut files: Vec<Entry> = own
            .files
            .into_iter()
            .filter(|f| !self.in_mount(&f.path))
            .collect();
        for (at, backend) in self.mounts_below(base) {
            // A deeper mount inside this one is listed on its own.
            let listing = backend.list_files(&VirtualPath::root(), limit).await?;
            truncated |= listing.truncated;
            files.extend(listing.files.into_iter().filter_map(|e| {
                let outer = Self::outward(e, Some(at))?;
                let owner = self.route(&outer.path).2;
                (owner == Some(at)).then_some(outer)
            }));
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        if files.len() > limit {
            files.truncate(limit);
            truncated = true;
        }
        Ok(FileListing { files, truncated })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::state::StateBackend;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    /// One `StateBackend` mounted at `/a` and `/b` and used as the default, with `/x.txt` and
    /// `/d/y.txt` inside it.
    async fn one_backend_three_ways() -> CompositeBackend {
        let shared = Arc::new(StateBackend::new());
        for (path, text) in [("/x.txt", "x"), ("/d/y.txt", "yy")] {
            shared
                .write(&p(path), Bytes::from(text), WriteMode::CreateNew)
                .await
                .unwrap();
        }
        CompositeBackend::new(shared.clone())
            .mount("/a", shared.clone())
            .unwrap()
            .mount("/b", shared)
            .unwrap()
    }

    /// Paths under both mounts and the default, interleaved, with missing ones and a directory.
    fn mixed_paths() -> Vec<VirtualPath> {
        [
            "/b/x.txt",
            "/x.txt",
            "/a/d/y.txt",
            "/a/missing",
            "/b/d",
            "/d/y.txt",
            "/a/x.txt",
            "/missing",
            "/b/d/y.txt",
            "/b/gone/z",
        ]
        .into_iter()
        .map(p)
        .collect()
    }

    #[tokio::test]
    async fn stat_many_maps_each_result_with_its_own_mount() {
        let composite = one_backend_three_ways().await;
        let paths = mixed_paths();
        let mut one_by_one = Vec::new();
        for path in &paths {
            one_by_one.push(composite.stat(path).await.map_err(|e| e.to_string()));
        }
        let batched: Vec<_> = composite
            .stat_many(&paths)
            .await
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect();
        assert_eq!(batched, one_by_one);
        // And `stat` itself names every path as the caller did.
        for (path, result) in paths.iter().zip(&batched) {
            match result {
                Ok(entry) => assert_eq!(&entry.path, path),
                Err(e) => assert!(e.contains(path.as_str()), "{path}: {e}"),
            }
        }
        assert_eq!(batched.iter().filter(|r| r.is_ok()).count(), 7, "{batched:?}");
    }

    #[tokio::test]
    async fn read_many_maps_each_result_with_its_own_mount() {
        let composite = one_backend_three_ways().await;
        let paths = mixed_paths();
        let mut one_by_one = Vec::new();
        for path in &paths {
            one_by_one.push(composite.read(path, None).await.map_err(|e| e.to_string()));
        }
        let batched: Vec<_> = composite
            .read_many(&paths, None)
            .await
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect();
        assert_eq!(batched, one_by_one);
    }

    #[tokio::test]
    async fn read_many_answers_as_read_above_a_mount_point() {
        // `/m` exists only as the directory above the mount at `/m/n`; `/k/x` is a file of the
        // backend mounted at `/k`, whatever is mounted below it.
        let k = Arc::new(StateBackend::new());
        k.write(&p("/x"), Bytes::from("kx"), WriteMode::CreateNew)
            .await
            .unwrap();
        let composite = CompositeBackend::new(Arc::new(StateBackend::new()))
            .mount("/m/n", Arc::new(StateBackend::new()))
            .unwrap()
            .mount("/k", k)
            .unwrap()
            .mount("/k/x/y", Arc::new(StateBackend::new()))
            .unwrap();
        let paths = vec![p("/m"), p("/m/n"), p("/other"), p("/k/x"), p("/")];
        let mut one_by_one = Vec::new();
        for path in &paths {
            one_by_one.push(composite.read(path, None).await.map_err(|e| e.to_string()));
        }
        assert!(
            one_by_one[0]
                .as_ref()
                .is_err_and(|e| e.contains("is a directory")),
            "{one_by_one:?}"
        );
        assert!(one_by_one[3].is_ok(), "{one_by_one:?}");
        let batched: Vec<_> = composite
            .read_many(&paths, None)
            .await
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect();
        assert_eq!(batched, one_by_one);
    }
}
