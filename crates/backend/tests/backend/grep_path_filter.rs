//! `GrepQuery::path_filter` on every local backend: files the filter refuses are never read, never
//! counted toward `max_matches` and never reported as skipped, and the filter sees the paths as the
//! backend searched names them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use trellis_backend::testing::RecordingBackend;
use trellis_backend::{
    Backend, CompositeBackend, FilesystemBackend, GrepQuery, ObjectStoreBackend, PathFilter, StateBackend,
    StoreOptions, VirtualPath, WriteMode,
};

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
    let default = Arc::new(RecordingBackend::new(Arc::new(StateBackend::new())));
    let mounted = Arc::new(RecordingBackend::new(Arc::new(
        ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap(),
    )));
    let composite = CompositeBackend::new(default.clone())
        .mount("/mnt", mounted.clone())
        .unwrap();
    fill(&composite, "/s").await;
    fill(&composite, "/mnt/s").await;
    for (base, member) in [("/s", &default), ("/mnt/s", &mounted)] {
        unfiltered_fills_the_cap("composite", &composite, base).await;
        default.clear();
        mounted.clear();
        check("composite", &composite, base).await;
        let read = member.reads();
        assert_eq!(read, vec!["/s/keep/one.txt".to_owned()], "{base}");
    }
}
