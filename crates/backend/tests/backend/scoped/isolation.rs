//! Scopes over one backend: what one thread can reach of another's (nothing), what `delete_all`
//! removes (exactly one scope), what errors name (the view's paths), what the view's root is.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use trellis_backend::{
    Backend, BackendError, BackendExt, ByteRange, Capabilities, ConflictKind, Entry, EntryKind, GrepQuery,
    ObjectStoreBackend, ReadOutput, ScopeId, ScopedBackend, StateBackend, StoreOptions, Version, VirtualPath,
    WriteMode, WriteOutcome,
};

use super::{OUTSIDE, content_of, disk, p, plant, s3, thread};

fn view(inner: &Arc<dyn Backend>, id: &str) -> ScopedBackend {
    ScopedBackend::new(inner.clone(), thread(id))
}

/// A whole file of `scope`, as text.
async fn text(scope: &ScopedBackend, path: &str) -> String {
    scope.read_to_string(&p(path)).await.unwrap()
}

fn paths(entries: Vec<Entry>) -> Vec<String> {
    entries.into_iter().map(|e| e.path.to_string()).collect()
}

/// Threads `a`, `b` and `ab` (whose prefix starts like `a`'s) each write `notes/<id>-only.txt` and
/// `shared.txt`; none of them can reach another's through any call.
async fn threads_cannot_reach_each_other(inner: Arc<dyn Backend>) {
    let (a, b, ab) = (view(&inner, "a"), view(&inner, "b"), view(&inner, "ab"));
    for (scope, id) in [(&a, "a"), (&b, "b"), (&ab, "ab")] {
        let own = p(&format!("/notes/{id}-only.txt"));
        scope
            .write(&own, format!("only {id}").into(), WriteMode::CreateNew)
            .await
            .unwrap();
        // Create-only succeeds in each scope: the same name is a different file in each.
        let shared = format!("{id}'s shared line\n");
        scope
            .write(&p("/shared.txt"), shared.into(), WriteMode::CreateNew)
            .await
            .unwrap();
    }
    assert_eq!(paths(a.ls(&p("/notes")).await.unwrap()), ["/notes/a-only.txt"]);
    assert_eq!(paths(b.ls(&p("/notes")).await.unwrap()), ["/notes/b-only.txt"]);
    assert_eq!(
        paths(a.ls(&VirtualPath::root()).await.unwrap()),
        ["/notes", "/shared.txt"]
    );
    for (scope, other) in [(&a, "b"), (&b, "a"), (&a, "ab"), (&ab, "a")] {
        let theirs = p(&format!("/notes/{other}-only.txt"));
        let errors = [
            scope.read(&theirs, None).await.unwrap_err(),
            scope.stat(&theirs).await.unwrap_err(),
            scope
                .read_many(std::slice::from_ref(&theirs), None)
                .await
                .pop()
                .unwrap()
                .unwrap_err(),
            scope
                .stat_many(std::slice::from_ref(&theirs))
                .await
                .pop()
                .unwrap()
                .unwrap_err(),
            scope.delete(&theirs).await.unwrap_err(),
        ];
        for err in errors {
            assert!(
                matches!(&err, BackendError::NotFound { path } if *path == theirs.as_str()),
                "{err:?}"
            );
        }
    }
    assert_eq!(text(&a, "/shared.txt").await, "a's shared line\n");
    assert_eq!(text(&b, "/shared.txt").await, "b's shared line\n");
    let root = VirtualPath::root();
    let listed = paths(a.list_files(&root, usize::MAX).await.unwrap().files);
    assert_eq!(listed, ["/notes/a-only.txt", "/shared.txt"]);
    assert_eq!(paths(a.glob("*.txt", &root).await.unwrap().matches), listed);
    assert_eq!(
        paths(b.glob("**/*-only.txt", &root).await.unwrap().matches),
        ["/notes/b-only.txt"]
    );
    let found = a
        .grep(&GrepQuery::new("shared line", root.clone()))
        .await
        .unwrap();
    let found: Vec<(String, u64, String)> = found
        .matches
        .into_iter()
        .map(|m| (m.path.to_string(), m.line, m.text))
        .collect();
    assert_eq!(
        found,
        [("/shared.txt".to_owned(), 1, "a's shared line".to_owned())]
    );
    assert!(
        a.grep(&GrepQuery::new("only b", root.clone()))
            .await
            .unwrap()
            .matches
            .is_empty()
    );

    // Writing and deleting a name another thread uses touches only one's own file.
    let b_only = p("/notes/b-only.txt");
    a.write(&b_only, "a's own".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    a.write(&p("/shared.txt"), "a again".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    a.delete(&p("/shared.txt")).await.unwrap();
    assert_eq!(b.read_to_string(&b_only).await.unwrap(), "only b");
    assert_eq!(text(&b, "/shared.txt").await, "b's shared line\n");
    assert_eq!(text(&ab, "/shared.txt").await, "ab's shared line\n");
    assert_eq!(a.read_to_string(&b_only).await.unwrap(), "a's own");

    let stored = paths(inner.list_files(&p("/threads"), usize::MAX).await.unwrap().files);
    let want = [
        "/threads/a/notes/a-only.txt",
        "/threads/a/notes/b-only.txt",
        "/threads/ab/notes/ab-only.txt",
        "/threads/ab/shared.txt",
        "/threads/b/notes/b-only.txt",
        "/threads/b/shared.txt",
    ];
    assert_eq!(stored, want, "each thread's files lie below its own prefix");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_threads_over_state_cannot_reach_each_other() {
    threads_cannot_reach_each_other(Arc::new(StateBackend::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_threads_over_local_disk_cannot_reach_each_other() {
    let (inner, _dir) = disk();
    threads_cannot_reach_each_other(inner).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_threads_over_s3_cannot_reach_each_other() {
    if let Some(inner) = s3("scoped S3 isolation") {
        threads_cannot_reach_each_other(inner).await;
    }
}

/// `n` files (more than one page of `delete_all`'s listing) in thread `a`, among the planted files:
/// `delete_all` deletes exactly those, and then finds nothing more to delete.
async fn delete_all_removes_exactly_one_scope(inner: Arc<dyn Backend>, n: usize) {
    plant(inner.as_ref()).await;
    let a = view(&inner, "a");
    let mut names: Vec<String> = (0..n).map(|i| format!("/many/f{i:05}.txt")).collect();
    names.extend(["/.hidden/x".to_owned(), "/deep/er/y.md".to_owned()]);
    let written: Vec<WriteOutcome> = futures::stream::iter(&names)
        .map(|name| {
            let a = &a;
            async move { a.write(&p(name), "x".into(), WriteMode::CreateNew).await.unwrap() }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert_eq!(written.len(), n + 2);
    assert_eq!(a.delete_all().await.unwrap(), n + 2);
    let root = VirtualPath::root();
    assert!(a.list_files(&root, usize::MAX).await.unwrap().files.is_empty());
    assert_eq!(
        a.delete_all().await.unwrap(),
        0,
        "an emptied scope has nothing left"
    );
    assert_eq!(
        view(&inner, "never-used").delete_all().await.unwrap(),
        0,
        "a missing scope is Ok(0)"
    );
    let mut planted: Vec<&str> = OUTSIDE.to_vec();
    planted.sort_unstable();
    assert_eq!(
        paths(inner.list_files(&root, usize::MAX).await.unwrap().files),
        planted
    );
    for path in OUTSIDE {
        assert_eq!(inner.read_to_string(&p(path)).await.unwrap(), content_of(path));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_all_over_state_removes_exactly_the_scope() {
    delete_all_removes_exactly_one_scope(Arc::new(StateBackend::new()), 2_500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_all_over_local_disk_removes_exactly_the_scope() {
    let (inner, _dir) = disk();
    delete_all_removes_exactly_one_scope(inner, 2_500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_all_over_s3_removes_exactly_the_scope() {
    if let Some(inner) = s3("scoped S3 delete_all") {
        delete_all_removes_exactly_one_scope(inner, 1_100).await;
    }
}

#[tokio::test]
async fn errors_name_the_paths_of_the_view() {
    let inner: Arc<dyn Backend> = Arc::new(StateBackend::new());
    let a = view(&inner, "a");
    a.write(&p("/f"), "0123456789".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    a.write(&p("/d/x"), "x".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    let (missing, f, d) = (p("/missing"), p("/f"), p("/d"));
    let stale = WriteMode::IfVersion(Version::new("r999"));
    let cases = [
        (a.read(&missing, None).await.unwrap_err(), "/missing"),
        (a.stat(&missing).await.unwrap_err(), "/missing"),
        (a.ls(&missing).await.unwrap_err(), "/missing"),
        (a.delete(&missing).await.unwrap_err(), "/missing"),
        (
            a.read_many(std::slice::from_ref(&missing), None)
                .await
                .remove(0)
                .unwrap_err(),
            "/missing",
        ),
        (
            a.stat_many(std::slice::from_ref(&missing))
                .await
                .remove(0)
                .unwrap_err(),
            "/missing",
        ),
        (a.read(&d, None).await.unwrap_err(), "/d"),
        (a.delete(&d).await.unwrap_err(), "/d"),
        (
            a.write(&d, "y".into(), WriteMode::Overwrite).await.unwrap_err(),
            "/d",
        ),
        (a.ls(&f).await.unwrap_err(), "/f"),
        (
            a.write(&p("/f/below"), "y".into(), WriteMode::Overwrite)
                .await
                .unwrap_err(),
            "/f/below",
        ),
        (
            a.write(&f, "y".into(), WriteMode::CreateNew).await.unwrap_err(),
            "/f",
        ),
        (a.write(&f, "y".into(), stale).await.unwrap_err(), "/f"),
        (a.read_limited(&f, 4).await.unwrap_err(), "/f"),
        (a.grep(&GrepQuery::new("", d.clone())).await.unwrap_err(), "/d"),
    ];
    for (err, want) in &cases {
        assert_eq!(err.path(), *want, "{err:?}");
        assert!(!err.to_string().contains("threads"), "{err}");
    }
    assert!(matches!(cases[6].0, BackendError::IsADirectory { .. }));
    assert!(matches!(cases[10].0, BackendError::NotADirectory { .. }));
    assert!(matches!(
        cases[11].0,
        BackendError::Conflict {
            kind: ConflictKind::AlreadyExists,
            ..
        }
    ));
    assert!(matches!(
        cases[13].0,
        BackendError::TooLarge {
            size: 10,
            limit: 4,
            ..
        }
    ));
    // A pattern is not a path: it is named as written, even one that looks like an inner path.
    let too_broad = format!("/threads/a/{}", "{x,y}".repeat(10));
    for pattern in ["../*", too_broad.as_str()] {
        let err = a.glob(pattern, &VirtualPath::root()).await.unwrap_err();
        assert!(
            matches!(&err, BackendError::InvalidPath { path, .. } if path == pattern),
            "{err:?}"
        );
        let mut query = GrepQuery::new("x", VirtualPath::root());
        query.file_glob = Some(pattern.to_owned());
        let err = a.grep(&query).await.unwrap_err();
        assert!(
            matches!(&err, BackendError::InvalidPath { path, .. } if path == pattern),
            "{err:?}"
        );
    }
}

/// Refuses every call with an error naming one fixed path.
#[derive(Debug)]
struct Refusing(&'static str);

impl Refusing {
    fn refuse<T>(&self) -> trellis_backend::Result<T> {
        Err(BackendError::PermissionDenied {
            path: self.0.to_owned(),
            source: None,
        })
    }
}

#[async_trait]
impl Backend for Refusing {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranged_reads: false,
            versioned_writes: false,
            strict_hierarchy: false,
        }
    }
    async fn ls(&self, _: &VirtualPath) -> trellis_backend::Result<Vec<Entry>> {
        self.refuse()
    }
    async fn stat(&self, _: &VirtualPath) -> trellis_backend::Result<Entry> {
        self.refuse()
    }
    async fn read(&self, _: &VirtualPath, _: Option<ByteRange>) -> trellis_backend::Result<ReadOutput> {
        self.refuse()
    }
    async fn write(&self, _: &VirtualPath, _: Bytes, _: WriteMode) -> trellis_backend::Result<WriteOutcome> {
        self.refuse()
    }
    async fn delete(&self, _: &VirtualPath) -> trellis_backend::Result<()> {
        self.refuse()
    }
}

#[tokio::test]
async fn an_inner_error_naming_a_path_outside_the_scope_names_the_asked_path() {
    let asked = p("/q/file.txt");
    let cases = [
        ("/threads/a/deep/x.txt", "/deep/x.txt"),
        ("/threads/a", "/"),
        ("/threads/ab/x", "/q/file.txt"),
        ("/threads", "/q/file.txt"),
        ("/elsewhere/secret.txt", "/q/file.txt"),
        ("/", "/q/file.txt"),
        ("not even a path \0", "/q/file.txt"),
    ];
    for (named, want) in cases {
        let scoped = ScopedBackend::new(Arc::new(Refusing(named)), thread("a"));
        let errors = [
            scoped.ls(&asked).await.unwrap_err(),
            scoped.stat(&asked).await.unwrap_err(),
            scoped.read(&asked, None).await.unwrap_err(),
            scoped
                .write(&asked, "x".into(), WriteMode::Overwrite)
                .await
                .unwrap_err(),
            scoped.delete(&asked).await.unwrap_err(),
            scoped.list_files(&asked, 10).await.unwrap_err(),
            scoped.glob("*", &asked).await.unwrap_err(),
            scoped
                .grep(&GrepQuery::new("x", asked.clone()))
                .await
                .unwrap_err(),
            scoped
                .stat_many(std::slice::from_ref(&asked))
                .await
                .remove(0)
                .unwrap_err(),
            scoped
                .read_many(std::slice::from_ref(&asked), None)
                .await
                .remove(0)
                .unwrap_err(),
        ];
        for err in errors {
            assert!(matches!(err, BackendError::PermissionDenied { .. }), "{err:?}");
            assert_eq!(err.path(), want, "inner named {named:?}");
        }
    }
}

/// The view's root exists and is a directory whatever the inner backend holds at the prefix:
/// nothing, or a file (which stays outside the view).
async fn the_root_is_a_directory(inner: Arc<dyn Backend>) {
    let a = view(&inner, "a");
    let root = VirtualPath::root();
    for file_at_prefix in [false, true] {
        if file_at_prefix {
            inner
                .write(&thread("a"), "not a scope".into(), WriteMode::CreateNew)
                .await
                .unwrap();
        }
        assert!(a.ls(&root).await.unwrap().is_empty());
        assert_eq!(a.stat(&root).await.unwrap(), Entry::directory(root.clone()));
        assert_eq!(
            a.stat_many(std::slice::from_ref(&root))
                .await
                .remove(0)
                .unwrap()
                .kind,
            EntryKind::Directory
        );
        let refused = [
            a.read(&root, None).await.unwrap_err(),
            a.read_many(std::slice::from_ref(&root), None)
                .await
                .remove(0)
                .unwrap_err(),
            a.write(&root, "x".into(), WriteMode::Overwrite)
                .await
                .unwrap_err(),
            a.delete(&root).await.unwrap_err(),
        ];
        for err in refused {
            assert!(
                matches!(&err, BackendError::IsADirectory { path } if path == "/"),
                "{err:?}"
            );
        }
        assert!(a.list_files(&root, usize::MAX).await.unwrap().files.is_empty());
        assert!(a.glob("*", &root).await.unwrap().matches.is_empty());
        assert!(
            a.grep(&GrepQuery::new("scope", root.clone()))
                .await
                .unwrap()
                .matches
                .is_empty()
        );
        assert_eq!(a.delete_all().await.unwrap(), 0);
    }
    assert_eq!(inner.read_to_string(&thread("a")).await.unwrap(), "not a scope");
    let err = a
        .write(&p("/x"), "x".into(), WriteMode::Overwrite)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::NotADirectory { path } if path == "/x"),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_root_of_a_view_over_state_is_a_directory() {
    the_root_is_a_directory(Arc::new(StateBackend::new())).await;
}

#[tokio::test]
async fn the_root_of_a_view_over_local_disk_is_a_directory() {
    let (inner, _dir) = disk();
    the_root_is_a_directory(inner).await;
}

#[tokio::test]
async fn a_path_too_long_for_the_scope_is_refused_before_the_inner_backend() {
    let inner = StateBackend::new();
    let long_base = p(&vec!["s".repeat(255); 15].join("/"));
    let prefix = ScopeId::thread("x".repeat(128)).unwrap().under(&long_base);
    let scoped = ScopedBackend::new(Arc::new(inner.clone()), prefix.clone());
    let too_long = p(&"y".repeat(200));
    assert!(too_long.as_str().len() + prefix.as_str().len() > trellis_backend::path::MAX_PATH_BYTES);
    let err = scoped
        .write(&too_long, "x".into(), WriteMode::Overwrite)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::InvalidPath { path, .. } if path == too_long.as_str()),
        "{err:?}"
    );
    assert!(!err.to_string().contains("sss"), "the prefix is not shown: {err}");
    assert!(inner.is_empty());
    scoped
        .write(&p("/ok.txt"), "ok".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    assert_eq!(scoped.read_to_string(&p("/ok.txt")).await.unwrap(), "ok");
    assert!(inner.stat(&prefix.join("ok.txt").unwrap()).await.is_ok());
}

#[tokio::test]
async fn versions_and_capabilities_are_the_inner_backends() {
    let stores: [Arc<dyn Backend>; 2] = [
        Arc::new(StateBackend::new()),
        Arc::new(ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap()),
    ];
    for inner in stores {
        let a = view(&inner, "a");
        assert_eq!(a.capabilities(), inner.capabilities());
        let (outer, stored) = (p("/v.txt"), thread("a").join("v.txt").unwrap());
        let written = a
            .write(&outer, "1".into(), WriteMode::CreateNew)
            .await
            .unwrap()
            .version;
        let inner_version = inner.read(&stored, None).await.unwrap().version;
        assert!(written.is_some());
        assert_eq!(written, inner_version);
        assert_eq!(
            a.stat(&outer).await.unwrap().version,
            inner.stat(&stored).await.unwrap().version
        );
        let next = WriteMode::IfVersion(inner_version.unwrap());
        let second = a.write(&outer, "2".into(), next).await.unwrap().version;
        assert_eq!(inner.read(&stored, None).await.unwrap().version, second);
        assert_eq!(inner.read_to_string(&stored).await.unwrap(), "2");
    }
}
