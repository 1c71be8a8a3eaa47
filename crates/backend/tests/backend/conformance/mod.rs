//! The one conformance suite every [`Backend`] runs (in the style of object_store's `integration.rs`).
//!
//! [`run`] takes a factory that returns a fresh, empty backend and the directory the suite may use
//! (`/` for whole backends; a mount point for the composite), and runs every check against it.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use trellis_backend::{
    Backend, BackendError, BackendExt, ByteRange, ConflictKind, EntryKind, VirtualPath, WriteMode,
};

mod backends;
mod batch;
mod listing;
mod search;
mod streamed;

use batch::{read_many_keeps_order_and_isolates_failures, stat_many_matches_stat_in_order};
use listing::key_ranges_add_up_to_the_whole_listing;
use search::{glob_matrix, grep_literal};
use streamed::{
    a_source_of_the_wrong_length_writes_nothing, streamed_writes_conflict_like_write,
    streamed_writes_round_trip,
};

/// A backend under test and the directory the suite works in.
pub struct Target {
    pub backend: Arc<dyn Backend>,
    pub base: VirtualPath,
}

impl Target {
    pub fn whole(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            base: VirtualPath::root(),
        }
    }

    pub(super) fn path(&self, rel: &str) -> VirtualPath {
        self.base.join_relative(rel).unwrap()
    }
}

/// Run every check, each on a fresh target from `factory`. Prints one line per check.
pub async fn run<F, Fut>(name: &str, factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Target>,
{
    macro_rules! check {
        ($f:ident) => {{
            let started = std::time::Instant::now();
            $f(&factory().await).await;
            eprintln!(
                "conformance[{name}] {} ok ({:?})",
                stringify!($f),
                started.elapsed()
            );
        }};
    }
    check!(write_read_round_trip);
    check!(create_only_conflicts);
    check!(overwrite_replaces);
    check!(version_checked_writes);
    check!(streamed_writes_round_trip);
    check!(streamed_writes_conflict_like_write);
    check!(a_source_of_the_wrong_length_writes_nothing);
    check!(ls_lists_direct_children);
    check!(ranged_reads);
    check!(empty_large_and_binary_files);
    check!(read_many_keeps_order_and_isolates_failures);
    check!(stat_many_matches_stat_in_order);
    check!(error_kinds_name_their_path);
    check!(strict_hierarchy);
    check!(delete_removes_files_only);
    check!(glob_matrix);
    check!(grep_literal);
    check!(more_than_a_thousand_entries);
    check!(key_ranges_add_up_to_the_whole_listing);
    check!(no_lost_updates);
    check!(local_dirs_hold_the_backends_files);
    eprintln!("conformance[{name}]: all checks passed");
}

pub(super) async fn put(t: &Target, rel: &str, data: impl Into<Bytes>) {
    t.backend
        .write(&t.path(rel), data.into(), WriteMode::Overwrite)
        .await
        .unwrap_or_else(|e| panic!("write {rel}: {e}"));
}

async fn write_read_round_trip(t: &Target) {
    let path = t.path("notes/hello.txt");
    let written = t
        .backend
        .write(&path, Bytes::from_static(b"hello world"), WriteMode::CreateNew)
        .await
        .unwrap();
    let read = t.backend.read(&path, None).await.unwrap();
    assert_eq!(read.bytes.as_ref(), b"hello world");
    assert_eq!(read.size, 11);
    assert!(read.is_complete());
    assert!(read.version.is_some(), "reads carry a version");
    assert_eq!(
        read.version, written.version,
        "a read right after a write sees that write's version"
    );
    let stat = t.backend.stat(&path).await.unwrap();
    assert_eq!(stat.kind, EntryKind::File);
    assert_eq!(stat.size, 11);
    assert_eq!(stat.path, path);
    assert_eq!(stat.version, read.version);
    assert!(t.backend.exists(&path).await.unwrap());
    assert!(!t.backend.exists(&t.path("notes/nope.txt")).await.unwrap());
    let dir = t.backend.stat(&t.path("notes")).await.unwrap();
    assert_eq!(dir.kind, EntryKind::Directory);
}

async fn create_only_conflicts(t: &Target) {
    let path = t.path("once.txt");
    t.backend
        .write(&path, "first".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    let err = t
        .backend
        .write(&path, "second".into(), WriteMode::CreateNew)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            BackendError::Conflict {
                kind: ConflictKind::AlreadyExists,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.path(), path.as_str());
    assert_eq!(
        t.backend.read_to_string(&path).await.unwrap(),
        "first",
        "a refused write changes nothing"
    );
}

async fn overwrite_replaces(t: &Target) {
    let path = t.path("over.txt");
    let v1 = t
        .backend
        .write(&path, "one".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    let v2 = t
        .backend
        .write(&path, "two!".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    assert_ne!(v1.version, v2.version, "every write gives a new version");
    let read = t.backend.read(&path, None).await.unwrap();
    assert_eq!(read.bytes.as_ref(), b"two!");
    assert_eq!(read.size, 4);
}

async fn version_checked_writes(t: &Target) {
    let path = t.path("cas.txt");
    t.backend
        .write(&path, "v1".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    let v1 = t.backend.read(&path, None).await.unwrap().version.unwrap();
    let v2 = t
        .backend
        .write(&path, "v2".into(), WriteMode::IfVersion(v1.clone()))
        .await
        .unwrap()
        .version
        .unwrap();
    assert_ne!(v1, v2);
    let stale = t
        .backend
        .write(&path, "v3".into(), WriteMode::IfVersion(v1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            stale,
            BackendError::Conflict {
                kind: ConflictKind::VersionMismatch,
                ..
            }
        ),
        "{stale:?}"
    );
    assert_eq!(t.backend.read_to_string(&path).await.unwrap(), "v2");
    let missing = t
        .backend
        .write(&t.path("cas-missing.txt"), "x".into(), WriteMode::IfVersion(v2))
        .await
        .unwrap_err();
    assert!(
        matches!(
            missing,
            BackendError::Conflict {
                kind: ConflictKind::VersionMismatch,
                ..
            }
        ),
        "a version-checked write to a missing file conflicts: {missing:?}"
    );
    assert!(!t.backend.exists(&t.path("cas-missing.txt")).await.unwrap());
}

async fn ls_lists_direct_children(t: &Target) {
    put(t, "d/a.txt", "aaa").await;
    put(t, "d/b/c.txt", "c").await;
    put(t, "d/b/e.txt", "e").await;
    put(t, "d/b-side.txt", "side").await;
    put(t, "top.txt", "top").await;
    let listed = t.backend.ls(&t.path("d")).await.unwrap();
    let shown: Vec<(String, EntryKind, u64)> = listed
        .iter()
        .map(|e| (e.path.relative_to(&t.base).unwrap().to_owned(), e.kind, e.size))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("d/a.txt".to_owned(), EntryKind::File, 3),
            ("d/b".to_owned(), EntryKind::Directory, 0),
            ("d/b-side.txt".to_owned(), EntryKind::File, 4),
        ]
    );
    assert!(listed[0].version.is_some(), "listed files carry a version");
    let top = t.backend.ls(&t.base).await.unwrap();
    let names: Vec<&str> = top.iter().filter_map(|e| e.path.file_name()).collect();
    assert!(names.contains(&"d") && names.contains(&"top.txt"), "{names:?}");
    let err = t.backend.ls(&t.path("top.txt")).await.unwrap_err();
    assert!(matches!(err, BackendError::NotADirectory { .. }), "{err:?}");
    let err = t.backend.ls(&t.path("nowhere")).await.unwrap_err();
    assert!(matches!(err, BackendError::NotFound { .. }), "{err:?}");
}

async fn ranged_reads(t: &Target) {
    let path = t.path("digits.txt");
    put(t, "digits.txt", "0123456789").await;
    let cases: [(ByteRange, &[u8]); 8] = [
        (ByteRange::prefix(4), b"0123"),
        (ByteRange::bounded(3, 6), b"345"),
        (ByteRange::from_offset(7), b"789"),
        (ByteRange::bounded(8, 100), b"89"),
        (ByteRange::prefix(100), b"0123456789"),
        (ByteRange::from_offset(10), b""),
        (ByteRange::from_offset(50), b""),
        (ByteRange::prefix(0), b""),
    ];
    for (range, want) in cases {
        let out = t
            .backend
            .read(&path, Some(range))
            .await
            .unwrap_or_else(|e| panic!("{range:?}: {e}"));
        assert_eq!(out.bytes.as_ref(), want, "{range:?}");
        assert_eq!(out.size, 10, "{range:?} reports the whole size");
        assert!(out.version.is_some(), "{range:?}");
    }
}

async fn empty_large_and_binary_files(t: &Target) {
    put(t, "empty.txt", Bytes::new()).await;
    let empty = t.backend.read(&t.path("empty.txt"), None).await.unwrap();
    assert!(empty.bytes.is_empty());
    assert_eq!(empty.size, 0);
    let top = t
        .backend
        .read(&t.path("empty.txt"), Some(ByteRange::prefix(4096)))
        .await
        .unwrap();
    assert!(top.bytes.is_empty());
    assert_eq!(top.size, 0);

    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let big: Vec<u8> = (0..5 * 1024 * 1024)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    put(t, "big.bin", big.clone()).await;
    let read = t.backend.read(&t.path("big.bin"), None).await.unwrap();
    assert_eq!(read.size, big.len() as u64);
    assert!(
        read.bytes.as_ref() == big.as_slice(),
        "5 MiB round-trips byte for byte"
    );
    let tail = t
        .backend
        .read(
            &t.path("big.bin"),
            Some(ByteRange::from_offset(big.len() as u64 - 3)),
        )
        .await
        .unwrap();
    assert_eq!(tail.bytes.as_ref(), &big[big.len() - 3..]);

    let binary: &[u8] = &[0xff, 0xfe, 0x00, 0x80, b'\n', 0xc3, 0x28];
    put(t, "odd.bin", Bytes::from_static(binary)).await;
    assert_eq!(
        t.backend.read_bytes(&t.path("odd.bin")).await.unwrap().as_ref(),
        binary
    );
    assert!(t.backend.read_to_string(&t.path("odd.bin")).await.is_err());
    put(t, "ünïcødé 日本.md", "ok").await;
    assert_eq!(
        t.backend
            .read_to_string(&t.path("ünïcødé 日本.md"))
            .await
            .unwrap(),
        "ok"
    );
    let names: Vec<String> = t
        .backend
        .ls(&t.base)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| e.path.file_name().map(str::to_owned))
        .collect();
    assert!(names.contains(&"ünïcødé 日本.md".to_owned()), "{names:?}");
}

async fn error_kinds_name_their_path(t: &Target) {
    put(t, "err/file.txt", "0123456789").await;
    let missing = t.path("err/missing.txt");
    let err = t.backend.read(&missing, None).await.unwrap_err();
    assert!(matches!(err, BackendError::NotFound { .. }), "{err:?}");
    assert_eq!(err.path(), missing.as_str());
    assert!(err.to_string().contains(missing.as_str()));
    let err = t.backend.stat(&missing).await.unwrap_err();
    assert!(matches!(err, BackendError::NotFound { .. }), "{err:?}");
    let dir = t.path("err");
    let err = t.backend.read(&dir, None).await.unwrap_err();
    assert!(matches!(err, BackendError::IsADirectory { .. }), "{err:?}");
    assert_eq!(err.path(), dir.as_str());
    let err = t
        .backend
        .read_limited(&t.path("err/file.txt"), 4)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            BackendError::TooLarge {
                size: 10,
                limit: 4,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        t.backend
            .read_limited(&t.path("err/file.txt"), 10)
            .await
            .unwrap()
            .bytes
            .len(),
        10
    );
    let err = t.backend.glob("../*", &t.base).await.unwrap_err();
    assert!(matches!(err, BackendError::InvalidPath { .. }), "{err:?}");
    assert!(!err.is_transient());
}

async fn strict_hierarchy(t: &Target) {
    put(t, "h/file", "x").await;
    put(t, "h/dir/child", "y").await;
    if !t.backend.capabilities().strict_hierarchy {
        return;
    }
    let err = t
        .backend
        .write(&t.path("h/file/below"), "z".into(), WriteMode::Overwrite)
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::NotADirectory { .. }), "{err:?}");
    let err = t
        .backend
        .write(&t.path("h/dir"), "z".into(), WriteMode::Overwrite)
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::IsADirectory { .. }), "{err:?}");
    assert_eq!(
        t.backend.read_to_string(&t.path("h/dir/child")).await.unwrap(),
        "y"
    );
}

async fn delete_removes_files_only(t: &Target) {
    put(t, "del/a.txt", "a").await;
    put(t, "del/sub/b.txt", "b").await;
    t.backend.delete(&t.path("del/a.txt")).await.unwrap();
    let err = t.backend.read(&t.path("del/a.txt"), None).await.unwrap_err();
    assert!(matches!(err, BackendError::NotFound { .. }), "{err:?}");
    let err = t.backend.delete(&t.path("del/a.txt")).await.unwrap_err();
    assert!(
        matches!(err, BackendError::NotFound { .. }),
        "deleting twice: {err:?}"
    );
    let err = t.backend.delete(&t.path("del/sub")).await.unwrap_err();
    assert!(matches!(err, BackendError::IsADirectory { .. }), "{err:?}");
    assert_eq!(
        t.backend.read_to_string(&t.path("del/sub/b.txt")).await.unwrap(),
        "b"
    );
    let names: Vec<VirtualPath> = t
        .backend
        .ls(&t.path("del"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(names, vec![t.path("del/sub")]);
}

async fn more_than_a_thousand_entries(t: &Target) {
    const N: usize = 1_005;
    let results: Vec<()> = futures::stream::iter(0..N)
        .map(|i| async move { put(t, &format!("big-dir/f{i:04}.txt"), format!("{i}")).await })
        .buffer_unordered(32)
        .collect()
        .await;
    assert_eq!(results.len(), N);
    let listed = t.backend.ls(&t.path("big-dir")).await.unwrap();
    assert_eq!(listed.len(), N, "ls pages past 1,000 entries");
    assert!(listed.windows(2).all(|w| w[0].path < w[1].path), "ls is sorted");
    let all = t
        .backend
        .list_files(&t.path("big-dir"), usize::MAX)
        .await
        .unwrap();
    assert_eq!(all.files.len(), N);
    assert!(!all.truncated);
    let capped = t.backend.list_files(&t.path("big-dir"), 10).await.unwrap();
    assert_eq!(capped.files.len(), 10);
    assert!(capped.truncated);
    let globbed = t.backend.glob("f1*.txt", &t.path("big-dir")).await.unwrap();
    assert_eq!(globbed.matches.len(), 5, "f1000..f1004 and nothing else");
}

async fn no_lost_updates(t: &Target) {
    let path = t.path("counter.txt");
    t.backend
        .write(&path, "0".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    let tasks = (0..20).map(|_| {
        let backend = t.backend.clone();
        let path = path.clone();
        tokio::spawn(async move {
            for _ in 0..10 {
                backend
                    .update(&path, 10_000, |current| {
                        let text = std::str::from_utf8(current.map(|b| b.as_ref()).unwrap_or(b"0")).unwrap();
                        let n: u64 = text.parse().unwrap();
                        Ok(Bytes::from((n + 1).to_string()))
                    })
                    .await
                    .unwrap();
            }
        })
    });
    for task in futures::future::join_all(tasks).await {
        task.unwrap();
    }
    assert_eq!(
        t.backend.read_to_string(&path).await.unwrap(),
        "200",
        "20 tasks × 10 increments"
    );
}

/// [`Backend::local_dirs`]: every directory reported holds, at the same relative path, exactly
/// the file the backend wrote, and a file removed through the backend is gone from it. Vacuous
/// for a backend that reports none (the default).
async fn local_dirs_hold_the_backends_files(t: &Target) {
    put(t, "local/a.txt", "through the backend").await;
    let written = t.path("local/a.txt");
    for dir in t.backend.local_dirs() {
        assert!(dir.host.is_absolute(), "{dir:?}");
        let Some(rel) = written.relative_to(&dir.at) else {
            continue;
        };
        let host = dir.host.join(rel);
        assert_eq!(
            std::fs::read(&host).unwrap_or_else(|e| panic!("{}: {e}", host.display())),
            b"through the backend"
        );
        t.backend.delete(&written).await.unwrap();
        assert!(!host.exists(), "{} outlived its delete", host.display());
        return;
    }
}
