//! `ScopedBackend`: the conformance suite through a scope of a state, a local-disk and an S3 (moto)
//! backend, each holding files planted outside the scope that must never show; and isolation: two
//! threads' scopes over one backend never see each other, `delete_all` removes exactly one scope,
//! errors name the view's paths; a grep's path filter judges the view's paths.
//!
//! The S3 tests need the emulator (`cargo xtask emulators start`, then
//! `eval "$(cargo xtask emulators env)"`); without it they say they were skipped, and with
//! `TRELLIS_EMULATORS=required` a missing one fails them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod grep_filter;
mod isolation;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::conformance::Target;
use trellis_backend::testing::{bucket, emulator};
use trellis_backend::{
    Backend, BackendExt, FilesystemBackend, GrepQuery, ObjectStoreBackend, ScopeId, ScopedBackend,
    StateBackend, StoreOptions, VirtualPath, WriteMode,
};

/// In every planted file: text the view must never show.
pub const MARKER: &str = "planted-outside-the-scope";

/// Files planted in the inner backend around the scope of thread `a` (`/threads/a`): other threads,
/// siblings whose names start like it (`a.md`, `a-x`, `a0`, `ab`), and the inner root, with the
/// names the conformance suite itself uses, so a view that leaked or wrote through to the wrong
/// place would collide with them.
pub const OUTSIDE: &[&str] = &[
    "/once.txt",
    "/notes/hello.txt",
    "/counter.txt",
    "/g/a.py",
    "/s/a.md",
    "/big-dir/f1000.txt",
    "/threads/a.md",
    "/threads/a-x/s/a.md",
    "/threads/a0/g/sub/b.py",
    "/threads/ab/notes/hello.txt",
    "/threads/b/s/a.md",
    "/users/a/s/a.md",
];

pub fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

/// Where thread `id`'s files live in the inner backend.
pub fn thread(id: &str) -> VirtualPath {
    ScopeId::thread(id).unwrap().under(&p("/threads"))
}

pub fn content_of(path: &str) -> String {
    format!("{MARKER} needle\n{path}\n")
}

pub async fn plant(inner: &dyn Backend) {
    for path in OUTSIDE {
        inner
            .write(&p(path), content_of(path).into(), WriteMode::Overwrite)
            .await
            .unwrap_or_else(|e| panic!("plant {path}: {e}"));
    }
}

fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("scoped-{tag}-{}-{nanos}-{n}", std::process::id())
}

/// A fresh S3 backend (under a prefix of its own) on the moto emulator, or `None` after saying the
/// test was skipped (a panic when `TRELLIS_EMULATORS=required`).
pub fn s3(test: &str) -> Option<Arc<dyn Backend>> {
    let endpoint = emulator("TRELLIS_S3_ENDPOINT", test)?;
    let bucket = bucket();
    let tag: String = test
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let url = format!("s3://{bucket}/{}", unique(&tag));
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    Some(Arc::new(ObjectStoreBackend::from_url(&url, &options).unwrap()))
}

/// A fresh local-disk backend and the directory that must outlive it.
pub fn disk() -> (Arc<dyn Backend>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (Arc::new(FilesystemBackend::new(dir.path()).unwrap()), dir)
}

/// Every planted file is still there, unchanged, and the view shows exactly what lies below its
/// prefix in the inner backend: no planted file through ls, list_files, glob, grep or read.
async fn assert_planted_files_unseen(view: &ScopedBackend) {
    let (inner, prefix, root) = (view.inner(), view.prefix(), VirtualPath::root());
    for path in OUTSIDE {
        assert_eq!(
            inner.read_to_string(&p(path)).await.unwrap(),
            content_of(path),
            "{path}"
        );
    }
    let below_prefix: Vec<VirtualPath> = inner
        .list_files(prefix, usize::MAX)
        .await
        .unwrap()
        .files
        .iter()
        .map(|e| e.path.rebase(prefix, &root).unwrap())
        .collect();
    let listed: Vec<VirtualPath> = view
        .list_files(&root, usize::MAX)
        .await
        .unwrap()
        .files
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(
        listed, below_prefix,
        "the view lists exactly the files below its prefix"
    );
    let shown: BTreeSet<&VirtualPath> = listed.iter().collect();
    let top: Vec<VirtualPath> = view
        .ls(&root)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    let inner_top = match inner.ls(prefix).await {
        Ok(entries) => entries
            .into_iter()
            .map(|e| e.path.rebase(prefix, &root).unwrap())
            .collect(),
        Err(_) => Vec::new(),
    };
    assert_eq!(top, inner_top, "ls of the view's root is ls of the prefix");
    for pattern in ["*", "**/*", "*.md", "a.py", "hello.txt", "once.txt", "f1000.txt"] {
        for found in view.glob(pattern, &root).await.unwrap().matches {
            assert!(
                shown.contains(&found.path),
                "glob {pattern:?} found {}",
                found.path
            );
        }
    }
    let grep = view.grep(&GrepQuery::new(MARKER, root.clone())).await.unwrap();
    assert!(
        grep.matches.is_empty(),
        "grep found planted text: {:?}",
        grep.matches
    );
    for (path, read) in listed.iter().zip(view.read_many(&listed, None).await) {
        let bytes = read.unwrap_or_else(|e| panic!("{path}: {e}")).bytes;
        assert!(
            memfind(&bytes, MARKER.as_bytes()).is_none(),
            "{path} holds planted text"
        );
    }
}

fn memfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Run the suite on the scope of thread `a` of fresh inner backends from `make` (planted first),
/// then check every one of them with [`assert_planted_files_unseen`].
async fn suite<K: Send + 'static>(name: &str, make: impl Fn() -> (Arc<dyn Backend>, K)) {
    let made = std::sync::Mutex::new(Vec::new());
    crate::conformance::run(name, || {
        let (inner, keep) = make();
        let view = Arc::new(ScopedBackend::new(inner.clone(), thread("a")));
        made.lock().unwrap().push((view.clone(), keep));
        async move {
            plant(inner.as_ref()).await;
            Target::whole(view)
        }
    })
    .await;
    for (view, _keep) in made.into_inner().unwrap() {
        assert_planted_files_unseen(&view).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_scoped_state() {
    suite("scoped state", || {
        (Arc::new(StateBackend::new()) as Arc<dyn Backend>, ())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_scoped_local_disk() {
    suite("scoped local disk", disk).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_scoped_s3() {
    if s3("scoped S3 conformance").is_none() {
        return;
    }
    suite("scoped s3", || (s3("scoped s3").unwrap(), ())).await;
}
