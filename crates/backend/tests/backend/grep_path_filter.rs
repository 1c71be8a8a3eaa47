//! `GrepQuery::path_filter` on every local backend: files the filter refuses are never read, never
//! counted toward `max_matches` and never reported as skipped, and the filter sees the paths as the
//! backend searched names them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use trellis_backend::{
    Backend, ByteRange, Capabilities, CompositeBackend, Entry, FileListing, FilesystemBackend, GrepQuery,
    ObjectStoreBackend, PathFilter, ReadOutput, Result, StateBackend, StoreOptions, VirtualPath, WriteMode,
    WriteOutcome,
};

/// Records the paths it reads, batched reads included (and passed on as one batch). Also used by
/// the sandbox's folder cache tests.
#[derive(Debug)]
pub(crate) struct Reads {
    inner: Arc<dyn Backend>,
    paths: Mutex<Vec<String>>,
}

impl Reads {
    pub(crate) fn new(inner: Arc<dyn Backend>) -> Self {
        Self {
            inner,
            paths: Mutex::new(Vec::new()),
        }
    }

    /// How many file reads it has seen.
    pub(crate) fn count(&self) -> usize {
        self.paths.lock().unwrap().len()
    }
}

#[async_trait]
impl Backend for Reads {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.inner.ls(dir).await
    }
    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        self.inner.stat(path).await
    }
    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        self.paths.lock().unwrap().push(path.to_string());
        self.inner.read(path, range).await
    }
    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        self.paths
            .lock()
            .unwrap()
            .extend(paths.iter().map(ToString::to_string));
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

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

/// Below `base`: `deny/` holds ten matching lines, a large file and a binary one, all sorted before
/// `keep/`, which holds one matching line and one large file.
async fn fill(backend: &dyn Backend, base: &str) {
    let many: String = (1..=10).map(|i| format!("needle {i}\n")).collect();
    let large = format!("needle\n{}", "x".repeat(2_000));
    let files: [(&str, Bytes); 5] = [
        ("deny/many.txt", many.into()),
        ("deny/large.txt", large.clone().into()),
        ("deny/binary.bin", Bytes::from_static(b"needle\0")),
        ("keep/one.txt", "one needle\n".into()),
        ("keep/large.txt", large.into()),
    ];
    for (rel, data) in files {
        let path = p(&format!("{base}/{rel}"));
        backend.write(&path, data, WriteMode::Overwrite).await.unwrap();
    }
}

fn query(base: &str) -> GrepQuery {
    let mut query = GrepQuery::new("needle", p(base));
    query.max_matches = 3;
    query.max_file_bytes = 1_000;
    query
}

/// Without a filter the denied file fills the cap of three matches (so [`check`] is not vacuous).
async fn unfiltered_fills_the_cap(name: &str, backend: &dyn Backend, base: &str) {
    let out = backend.grep(&query(base)).await.unwrap();
    assert!(out.truncated, "{name}: {out:?}");
    assert_eq!(out.matches.len(), 3, "{name}: {out:?}");
    assert!(
        out.matches
            .iter()
            .all(|m| m.path.as_str().starts_with(&format!("{base}/deny/"))),
        "{name}: {out:?}"
    );
}

/// Greps `base` with at most three matches, files up to 1,000 bytes, and a filter refusing
/// `base/deny/**` that records every path it is asked about.
async fn check(name: &str, backend: &dyn Backend, base: &str) {
    let denied = format!("{base}/deny/");
    let asked = Arc::new(Mutex::new(Vec::new()));
    let mut query = query(base);
    query.path_filter = Some({
        let (denied, asked) = (denied.clone(), asked.clone());
        PathFilter::new(move |path| {
            asked.lock().unwrap().push(path.to_string());
            !path.as_str().starts_with(&denied)
        })
    });
    let out = backend.grep(&query).await.unwrap();
    let got: Vec<(String, u64)> = out.matches.iter().map(|m| (m.path.to_string(), m.line)).collect();
    assert_eq!(got, vec![(format!("{base}/keep/one.txt"), 1)], "{name}");
    assert!(!out.truncated, "{name}: refused matches counted toward the cap");
    assert_eq!(
        out.skipped,
        vec![p(&format!("{base}/keep/large.txt"))],
        "{name}: only allowed files are reported as skipped"
    );
    let mut asked = asked.lock().unwrap().clone();
    asked.sort();
    asked.dedup();
    let want: Vec<String> = [
        "deny/binary.bin",
        "deny/large.txt",
        "deny/many.txt",
        "keep/large.txt",
        "keep/one.txt",
    ]
    .iter()
    .map(|rel| format!("{base}/{rel}"))
    .collect();
    assert_eq!(
        asked, want,
        "{name}: the filter sees the paths as this backend names them"
    );
}

#[tokio::test]
async fn state() {
    let backend = StateBackend::new();
    fill(&backend, "/s").await;
    unfiltered_fills_the_cap("state", &backend, "/s").await;
    check("state", &backend, "/s").await;
}

#[tokio::test]
async fn local_disk() {
    let dir = tempfile::tempdir().unwrap();
    let backend = FilesystemBackend::new(dir.path()).unwrap();
    fill(&backend, "/s").await;
    unfiltered_fills_the_cap("local disk", &backend, "/s").await;
    check("local disk", &backend, "/s").await;
}

#[tokio::test]
async fn object_store_memory() {
    let backend = ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap();
    fill(&backend, "/s").await;
    unfiltered_fills_the_cap("memory://", &backend, "/s").await;
    check("memory://", &backend, "/s").await;
}

#[tokio::test]
async fn composite_never_reads_a_refused_file_in_any_member() {
    // The same files in the default backend and in a mount; the members record what they read.
    let default = Arc::new(Reads {
        inner: Arc::new(StateBackend::new()),
        paths: Mutex::new(Vec::new()),
    });
    let mounted = Arc::new(Reads {
        inner: Arc::new(ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap()),
        paths: Mutex::new(Vec::new()),
    });
    let composite = CompositeBackend::new(default.clone())
        .mount("/mnt", mounted.clone())
        .unwrap();
    fill(&composite, "/s").await;
    fill(&composite, "/mnt/s").await;
    for (base, member) in [("/s", &default), ("/mnt/s", &mounted)] {
        unfiltered_fills_the_cap("composite", &composite, base).await;
        default.paths.lock().unwrap().clear();
        mounted.paths.lock().unwrap().clear();
        check("composite", &composite, base).await;
        let read = member.paths.lock().unwrap().clone();
        assert_eq!(read, vec!["/s/keep/one.txt".to_owned()], "{base}");
    }
}
