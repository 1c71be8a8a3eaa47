//! `Backend::link` on local disk: a second name for a file without copying it, under every write
//! mode, version-checked like a write, never through a link out of the root; a scoped backend
//! forwards it within its scope; stores that cannot link say so with `None`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use trellis_backend::{
    Backend, BackendError, BackendExt, ConflictKind, FilesystemBackend, ScopedBackend, StateBackend,
    VirtualPath, WriteMode,
};

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

#[tokio::test]
async fn a_link_is_a_second_name_version_checked_like_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let backend = FilesystemBackend::new(dir.path()).unwrap();
    backend
        .write(&p("/log/1.json"), "one".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    backend
        .write(&p("/log/2.json"), "two".into(), WriteMode::CreateNew)
        .await
        .unwrap();

    // CreateNew: a new name, the same file (no copy).
    let first = backend
        .link(&p("/log/1.json"), &p("/head.json"), WriteMode::CreateNew)
        .await
        .unwrap()
        .unwrap();
    let ino = |rel: &str| std::fs::metadata(dir.path().join(rel)).unwrap().ino();
    assert_eq!(ino("head.json"), ino("log/1.json"));
    assert_eq!(backend.read_bytes(&p("/head.json")).await.unwrap(), "one");
    let again = backend
        .link(&p("/log/2.json"), &p("/head.json"), WriteMode::CreateNew)
        .await
        .unwrap();
    assert!(matches!(
        again,
        Err(BackendError::Conflict {
            kind: ConflictKind::AlreadyExists,
            ..
        })
    ));

    // IfVersion: only from the version read, and the version always changes.
    let seen = backend.stat(&p("/head.json")).await.unwrap().version.unwrap();
    assert_eq!(Some(&seen), first.version.as_ref());
    let moved = backend
        .link(
            &p("/log/2.json"),
            &p("/head.json"),
            WriteMode::IfVersion(seen.clone()),
        )
        .await
        .unwrap()
        .unwrap();
    assert_ne!(moved.version.as_ref(), Some(&seen));
    assert_eq!(backend.read_bytes(&p("/head.json")).await.unwrap(), "two");
    assert_eq!(ino("head.json"), ino("log/2.json"));
    // The replaced name's file keeps its other name, whole.
    assert_eq!(backend.read_bytes(&p("/log/1.json")).await.unwrap(), "one");
    let stale = backend
        .link(&p("/log/1.json"), &p("/head.json"), WriteMode::IfVersion(seen))
        .await
        .unwrap();
    assert!(matches!(
        stale,
        Err(BackendError::Conflict {
            kind: ConflictKind::VersionMismatch,
            ..
        })
    ));
    assert_eq!(backend.read_bytes(&p("/head.json")).await.unwrap(), "two");

    // Writing through one name replaces that name's file only.
    backend
        .write(&p("/head.json"), "three".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(backend.read_bytes(&p("/log/2.json")).await.unwrap(), "two");
    // Linking over a file that has no other name frees it: nothing keeps its bytes.
    backend
        .link(&p("/log/1.json"), &p("/head.json"), WriteMode::Overwrite)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(backend.read_bytes(&p("/head.json")).await.unwrap(), "one");
    assert_eq!(
        std::fs::metadata(dir.path().join("log/1.json")).unwrap().nlink(),
        2
    );

    // No temporary names are left behind.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["head.json", "log"]);

    // Missing sources, directories and paths out of the root are refused.
    let missing = backend
        .link(&p("/log/9.json"), &p("/x.json"), WriteMode::Overwrite)
        .await
        .unwrap();
    assert!(
        matches!(missing, Err(BackendError::NotFound { .. })),
        "{missing:?}"
    );
    let directory = backend
        .link(&p("/log"), &p("/x.json"), WriteMode::Overwrite)
        .await
        .unwrap();
    assert!(
        matches!(directory, Err(BackendError::IsADirectory { .. })),
        "{directory:?}"
    );
    assert!(!dir.path().join("x.json").exists());
}

#[tokio::test]
async fn a_link_never_leaves_the_root_and_scopes_forward_it_inside_their_scope() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    let outside = outer.path().join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "outside").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
    let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(&root).unwrap());
    let from_outside = backend
        .link(&p("/out/secret"), &p("/stolen"), WriteMode::Overwrite)
        .await
        .unwrap();
    assert!(from_outside.is_err(), "{from_outside:?}");
    backend
        .write(&p("/mine"), "mine".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    let into_outside = backend
        .link(&p("/mine"), &p("/out/planted"), WriteMode::Overwrite)
        .await
        .unwrap();
    assert!(into_outside.is_err(), "{into_outside:?}");
    assert!(!root.join("stolen").exists() && !outside.join("planted").exists());

    let scoped = ScopedBackend::new(backend.clone(), p("/threads/t1"));
    scoped
        .write(&p("/log/a"), "a".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    scoped
        .link(&p("/log/a"), &p("/head"), WriteMode::CreateNew)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("threads/t1/head")).unwrap(),
        "a"
    );
    // Inside the scope only: the root's /mine is not reachable from it.
    let beyond = scoped
        .link(&p("/mine"), &p("/head2"), WriteMode::Overwrite)
        .await
        .unwrap();
    assert!(matches!(beyond, Err(BackendError::NotFound { .. })), "{beyond:?}");

    // A store without links says so.
    let state = StateBackend::new();
    state
        .write(&p("/a"), "a".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    assert!(
        state
            .link(&p("/a"), &p("/b"), WriteMode::Overwrite)
            .await
            .is_none()
    );
}
