//! `Backend::append` on local disk: bytes added to a file in place (the same inode, no directory
//! change), version-checked like a write and serialized between backends as between processes,
//! a half-written tail cut by `keep`, never through a link out of the root; a scoped backend
//! forwards it within its scope; stores that cannot append say so with `None`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use trellis_backend::{
    AppendMode, Backend, BackendError, BackendExt, ConflictKind, FilesystemBackend, ScopedBackend,
    StateBackend, Version, VirtualPath,
};

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

async fn append(
    backend: &dyn Backend,
    path: &str,
    data: &'static str,
    mode: AppendMode,
) -> trellis_backend::Result<Version> {
    let out = backend
        .append(&p(path), data.into(), mode)
        .await
        .expect("local disk appends")?;
    Ok(out.version.expect("local disk has versions"))
}

fn at(version: &Version, keep: u64) -> AppendMode {
    AppendMode::IfVersion {
        version: version.clone(),
        keep,
    }
}

fn mismatch<T: std::fmt::Debug>(r: trellis_backend::Result<T>) -> bool {
    matches!(
        r,
        Err(BackendError::Conflict {
            kind: ConflictKind::VersionMismatch,
            ..
        })
    )
}

#[tokio::test]
async fn an_append_adds_in_place_version_checked_like_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let backend = FilesystemBackend::new(dir.path()).unwrap();

    // CreateNew makes the file, parents included, and refuses an existing one.
    let v1 = append(&backend, "/t/log", "one\n", AppendMode::CreateNew)
        .await
        .unwrap();
    let again = append(&backend, "/t/log", "two\n", AppendMode::CreateNew).await;
    assert!(
        matches!(
            again,
            Err(BackendError::Conflict {
                kind: ConflictKind::AlreadyExists,
                ..
            })
        ),
        "{again:?}"
    );
    let ino = || std::fs::metadata(dir.path().join("t/log")).unwrap().ino();
    let first_ino = ino();
    let dir_mtime = || {
        std::fs::metadata(dir.path().join("t"))
            .unwrap()
            .modified()
            .unwrap()
    };
    let dir_before = dir_mtime();

    // At the version read: added after it, the same file, the directory untouched.
    let v2 = append(&backend, "/t/log", "two\n", at(&v1, 4)).await.unwrap();
    assert_ne!(v2, v1);
    assert_eq!(backend.read_bytes(&p("/t/log")).await.unwrap(), "one\ntwo\n");
    assert_eq!(ino(), first_ino, "an append makes no new file");
    assert_eq!(dir_mtime(), dir_before, "an append changes no directory");
    let read = backend.read(&p("/t/log"), None).await.unwrap();
    assert_eq!(
        read.version.as_ref(),
        Some(&v2),
        "the version returned is the one a read gives"
    );

    // A stale version: refused, the file as it was.
    assert!(mismatch(append(&backend, "/t/log", "late\n", at(&v1, 4)).await));
    assert_eq!(backend.read_bytes(&p("/t/log")).await.unwrap(), "one\ntwo\n");

    // A missing file is a version mismatch too (it went since it was read), and creates nothing.
    assert!(mismatch(append(&backend, "/t/gone", "x", at(&v2, 0)).await));
    assert!(!dir.path().join("t/gone").exists());

    // A directory is not appended to.
    let on_dir = append(&backend, "/t", "x", at(&v2, 0)).await;
    assert!(
        matches!(on_dir, Err(BackendError::IsADirectory { .. })),
        "{on_dir:?}"
    );
}

#[tokio::test]
async fn keep_cuts_a_half_written_tail_and_the_version_still_moves() {
    let dir = tempfile::tempdir().unwrap();
    let backend = FilesystemBackend::new(dir.path()).unwrap();
    let v1 = append(&backend, "/log", "whole\n", AppendMode::CreateNew)
        .await
        .unwrap();
    // What a killed append leaves: part of a record after the whole ones.
    let v2 = append(&backend, "/log", "hal", at(&v1, 6)).await.unwrap();

    // Keeping the whole part, then adding as many bytes as were cut: same size, maybe the same
    // clock tick, yet a new version.
    let v3 = append(&backend, "/log", "new", at(&v2, 6)).await.unwrap();
    assert_ne!(v3, v2);
    assert_eq!(backend.read_bytes(&p("/log")).await.unwrap(), "whole\nnew");

    // Keeping more than the file holds: the caller read another file.
    assert!(mismatch(append(&backend, "/log", "x", at(&v3, 100)).await));
    assert_eq!(backend.read_bytes(&p("/log")).await.unwrap(), "whole\nnew");

    // Keeping nothing empties it first.
    let v4 = append(&backend, "/log", "fresh", at(&v3, 0)).await.unwrap();
    assert_ne!(v4, v3);
    assert_eq!(backend.read_bytes(&p("/log")).await.unwrap(), "fresh");
}

#[tokio::test]
async fn racing_appends_at_one_version_from_two_backends_add_exactly_one() {
    // Two backends on one root share no in-process lock: only the file lock orders them, as it
    // orders two processes.
    let dir = tempfile::tempdir().unwrap();
    let a = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
    let b = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
    let v = append(a.as_ref(), "/log", "base\n", AppendMode::CreateNew)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let backend = if i % 2 == 0 { a.clone() } else { b.clone() };
        let mode = at(&v, 5);
        tasks.push(tokio::spawn(async move {
            let data = format!("record {i:02}\n");
            backend.append(&p("/log"), data.into(), mode).await.unwrap()
        }));
    }
    let mut won = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            Ok(_) => won.push(i),
            Err(e) => assert!(mismatch::<()>(Err(e))),
        }
    }
    assert_eq!(won.len(), 1, "exactly one append wins: {won:?}");
    assert_eq!(
        a.read_bytes(&p("/log")).await.unwrap(),
        format!("base\nrecord {:02}\n", won[0])
    );
}

#[tokio::test]
async fn an_append_never_follows_a_link_out_of_the_root() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    let outside = outer.path().join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("log"), "theirs\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
    std::os::unix::fs::symlink(outside.join("log"), root.join("log")).unwrap();
    let backend = FilesystemBackend::new(&root).unwrap();
    let version = Version::new("anything");
    for path in ["/out/log", "/log"] {
        let r = append(&backend, path, "planted\n", at(&version, 7)).await;
        assert!(r.is_err(), "{path}: {r:?}");
    }
    assert!(
        append(&backend, "/out/new", "planted\n", AppendMode::CreateNew)
            .await
            .is_err()
    );
    assert_eq!(std::fs::read_to_string(outside.join("log")).unwrap(), "theirs\n");
    assert!(!outside.join("new").exists());
}

#[tokio::test]
async fn a_scope_forwards_appends_within_it_and_memory_cannot_append() {
    let dir = tempfile::tempdir().unwrap();
    let disk: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
    let scoped = ScopedBackend::new(disk.clone(), p("/threads/t1"));
    let v = append(&scoped, "/log", "a", AppendMode::CreateNew).await.unwrap();
    append(&scoped, "/log", "b", at(&v, 1)).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("threads/t1/log")).unwrap(),
        "ab"
    );

    let memory = StateBackend::new();
    assert!(
        memory
            .append(&p("/log"), "a".into(), AppendMode::CreateNew)
            .await
            .is_none()
    );
}
