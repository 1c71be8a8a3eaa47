//! Wrappers forward every [`Backend`] method to the backend they wrap: a counting inner backend
//! records which methods reach it, and each method is called once through the wrapper.
//!
//! The list of methods is checked against the trait's source, so a method added to `Backend`
//! fails here until it is added to the list and to the counting backend, and from then on every
//! wrapper that does not forward it fails. A method a wrapper answers itself on purpose is named,
//! with the reason, in that wrapper's test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use trellis_backend::sandbox::{
    ExecFiles, ExecOutput, ExecRequest, Sandbox, SandboxError, SandboxReport, SandboxedBackend,
};
use trellis_backend::{
    AppendMode, Backend, ByteRange, Capabilities, CompositeBackend, Entry, FileListing, GlobOutput,
    GrepOutput, GrepQuery, LocalDir, ReadOutput, Result, ScopedBackend, StateBackend, VirtualPath, WriteMode,
    WriteOutcome, WriteSource,
};

/// Every method of the `Backend` trait.
const METHODS: [&str; 17] = [
    "capabilities",
    "sandbox",
    "local_dirs",
    "ls",
    "stat",
    "stat_many",
    "read",
    "read_many",
    "write",
    "write_stream",
    "delete",
    "append",
    "link",
    "list_files_between",
    "list_files",
    "glob",
    "grep",
];

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

/// A state backend that counts the calls of each method; it overrides every one.
#[derive(Debug, Default)]
struct Counting {
    inner: StateBackend,
    calls: Mutex<BTreeMap<&'static str, usize>>,
}

impl Counting {
    fn count(&self, method: &'static str) {
        *self.calls.lock().unwrap().entry(method).or_default() += 1;
    }

    fn take(&self) -> BTreeMap<&'static str, usize> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

#[async_trait]
impl Backend for Counting {
    fn capabilities(&self) -> Capabilities {
        self.count("capabilities");
        self.inner.capabilities()
    }
    fn sandbox(&self, cwd: &VirtualPath) -> Option<Arc<dyn Sandbox>> {
        self.count("sandbox");
        self.inner.sandbox(cwd)
    }
    fn local_dirs(&self) -> Vec<LocalDir> {
        self.count("local_dirs");
        self.inner.local_dirs()
    }
    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.count("ls");
        self.inner.ls(dir).await
    }
    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        self.count("stat");
        self.inner.stat(path).await
    }
    async fn stat_many(&self, paths: &[VirtualPath]) -> Vec<Result<Entry>> {
        self.count("stat_many");
        self.inner.stat_many(paths).await
    }
    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        self.count("read");
        self.inner.read(path, range).await
    }
    async fn read_many(&self, paths: &[VirtualPath], range: Option<ByteRange>) -> Vec<Result<ReadOutput>> {
        self.count("read_many");
        self.inner.read_many(paths, range).await
    }
    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        self.count("write");
        self.inner.write(path, data, mode).await
    }
    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome> {
        self.count("write_stream");
        self.inner.write_stream(path, source, len, mode).await
    }
    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        self.count("delete");
        self.inner.delete(path).await
    }
    async fn append(
        &self,
        path: &VirtualPath,
        data: Bytes,
        mode: AppendMode,
    ) -> Option<Result<WriteOutcome>> {
        self.count("append");
        self.inner.append(path, data, mode).await
    }
    async fn link(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        mode: WriteMode,
    ) -> Option<Result<WriteOutcome>> {
        self.count("link");
        self.inner.link(from, to, mode).await
    }
    async fn list_files_between(
        &self,
        base: &VirtualPath,
        after: Option<&VirtualPath>,
        until: Option<&VirtualPath>,
        limit: usize,
    ) -> Option<Result<FileListing>> {
        self.count("list_files_between");
        self.inner.list_files_between(base, after, until, limit).await
    }
    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        self.count("list_files");
        self.inner.list_files(base, limit).await
    }
    async fn glob(&self, pattern: &str, base: &VirtualPath) -> Result<GlobOutput> {
        self.count("glob");
        self.inner.glob(pattern, base).await
    }
    async fn grep(&self, query: &GrepQuery) -> Result<GrepOutput> {
        self.count("grep");
        self.inner.grep(query).await
    }
}

/// Call `method` once through `backend`, on paths below `/d` (every wrapper here routes them to
/// the counting backend).
async fn call(backend: &dyn Backend, method: &str) {
    let (a, b) = (p("/d/a.txt"), p("/d/b.txt"));
    match method {
        "capabilities" => drop(backend.capabilities()),
        "sandbox" => drop(backend.sandbox(&p("/d"))),
        "local_dirs" => drop(backend.local_dirs()),
        "ls" => drop(backend.ls(&p("/d")).await),
        "stat" => drop(backend.stat(&a).await),
        "stat_many" => drop(backend.stat_many(&[a, b]).await),
        "read" => drop(backend.read(&a, None).await),
        "read_many" => drop(backend.read_many(&[a, b], None).await),
        "write" => drop(backend.write(&b, "b".into(), WriteMode::Overwrite).await),
        "write_stream" => drop(
            backend
                .write_stream(&b, Box::new(&b"b"[..]), 1, WriteMode::Overwrite)
                .await,
        ),
        "delete" => drop(backend.delete(&b).await),
        "append" => drop(backend.append(&b, "b".into(), AppendMode::CreateNew).await),
        "link" => drop(backend.link(&a, &b, WriteMode::Overwrite).await),
        "list_files_between" => drop(backend.list_files_between(&p("/d"), None, None, 10).await),
        "list_files" => drop(backend.list_files(&p("/d"), 10).await),
        "glob" => drop(backend.glob("*.txt", &p("/d")).await),
        "grep" => drop(backend.grep(&GrepQuery::new("a", p("/d"))).await),
        other => panic!("no call for the Backend method {other}: add one"),
    }
}

/// The methods that, called through `wrapper`, never reached `counting`.
async fn not_forwarded(wrapper: &dyn Backend, counting: &Counting) -> Vec<&'static str> {
    wrapper
        .write(&p("/d/a.txt"), "a".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    let mut missing = Vec::new();
    for method in METHODS {
        counting.take();
        call(wrapper, method).await;
        if !counting.take().contains_key(method) {
            missing.push(method);
        }
    }
    missing
}

#[test]
fn the_method_list_is_every_method_of_the_trait() {
    let source = include_str!("../../src/backend.rs");
    let start = source.find("pub trait Backend").unwrap();
    let body = &source[start..start + source[start..].find("\n}").unwrap()];
    let mut declared: Vec<&str> = body
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix("async fn ").or_else(|| l.strip_prefix("fn "))
        })
        .map(|l| &l[..l.find(['(', '<']).unwrap()])
        .collect();
    declared.sort_unstable();
    let mut listed = METHODS.to_vec();
    listed.sort_unstable();
    assert_eq!(
        declared, listed,
        "Backend's methods changed: update METHODS, Counting and `call`, then forward the new method in every wrapper"
    );
}

#[tokio::test]
async fn the_counting_backend_counts_every_method() {
    let counting = Counting::default();
    assert_eq!(not_forwarded(&counting, &counting).await, Vec::<&str>::new());
}

/// A sandbox that runs nothing: `SandboxedBackend` needs one.
#[derive(Debug)]
struct NoSandbox;

#[async_trait]
impl Sandbox for NoSandbox {
    fn name(&self) -> &str {
        "none"
    }
    fn report(&self) -> SandboxReport {
        SandboxReport {
            sandbox: "none".into(),
            limits: Vec::new(),
        }
    }
    async fn execute(&self, _: &ExecFiles, _: &ExecRequest) -> std::result::Result<ExecOutput, SandboxError> {
        Err(SandboxError::InvalidRequest("runs nothing".into()))
    }
}

#[tokio::test]
async fn a_sandboxed_backend_forwards_every_method_but_sandbox() {
    let counting = Arc::new(Counting::default());
    let wrapper = SandboxedBackend::new(counting.clone(), Arc::new(NoSandbox));
    // `sandbox` is its own answer: that is what it is for.
    assert_eq!(not_forwarded(&wrapper, &counting).await, vec!["sandbox"]);
    assert_eq!(
        wrapper.sandbox(&p("/d")).map(|s| s.name().to_owned()).as_deref(),
        Some("none")
    );
}

#[tokio::test]
async fn a_scoped_backend_forwards_every_method() {
    let counting = Arc::new(Counting::default());
    let wrapper = ScopedBackend::new(counting.clone(), VirtualPath::root());
    assert_eq!(not_forwarded(&wrapper, &counting).await, Vec::<&str>::new());
}

#[tokio::test]
async fn a_composite_forwards_every_method_but_link_and_the_searches() {
    let counting = Arc::new(Counting::default());
    // Mounted (a range listing is forwarded only inside a mount), beside a default backend.
    let wrapper = CompositeBackend::new(Arc::new(StateBackend::new()))
        .mount("/d", counting.clone())
        .unwrap();
    // `glob` and `grep` run over the composite's own listing and reads, so that they span every
    // member below the base; `link` is answered `None` (the caller writes instead), since the
    // two names may belong to different members.
    assert_eq!(
        not_forwarded(&wrapper, &counting).await,
        vec!["link", "glob", "grep"]
    );
}
