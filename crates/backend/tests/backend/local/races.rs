//! `FilesystemBackend` never resolves a path through a symlink that leads out of its root, at any
//! step of `ls`, `write` or `delete`, even while another process swaps directories for symlinks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use trellis_backend::{Backend, BackendError, FilesystemBackend, VirtualPath, WriteMode};

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_parent_that_is_a_link_out_of_the_root_is_refused_for_every_mutation_and_listing() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    let outside = outer.path().join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("x"), "outside").unwrap();
    // One absolute and one relative link, both to the same outside directory.
    std::os::unix::fs::symlink(&outside, root.join("a")).unwrap();
    std::os::unix::fs::symlink("../outside", root.join("r")).unwrap();
    let backend = FilesystemBackend::new(&root).unwrap();

    for dir in ["/a", "/r"] {
        for mode in [WriteMode::Overwrite, WriteMode::CreateNew] {
            for file in ["x", "new", "sub/deeper/new"] {
                let r = backend
                    .write(&p(&format!("{dir}/{file}")), "inside".into(), mode.clone())
                    .await;
                assert!(
                    matches!(r, Err(BackendError::InvalidPath { .. })),
                    "write {dir}/{file}: {r:?}"
                );
            }
        }
        let r = backend.delete(&p(&format!("{dir}/x"))).await;
        assert!(
            matches!(r, Err(BackendError::InvalidPath { .. })),
            "delete {dir}/x: {r:?}"
        );
        let r = backend.ls(&p(dir)).await;
        assert!(
            matches!(r, Err(BackendError::InvalidPath { .. })),
            "ls {dir}: {r:?}"
        );
    }
    assert_eq!(
        names_in(&outside),
        vec!["x"],
        "nothing created or removed outside"
    );
    assert_eq!(std::fs::read_to_string(outside.join("x")).unwrap(), "outside");
    assert_eq!(
        names_in(&root),
        vec!["a", "r"],
        "no temporary files left in the root"
    );
}

#[tokio::test]
async fn links_that_stay_inside_the_root_still_work_for_writes_listings_and_deletes() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    std::fs::create_dir_all(root.join("inner")).unwrap();
    std::os::unix::fs::symlink(root.join("inner"), root.join("abs")).unwrap();
    std::os::unix::fs::symlink("inner", root.join("rel")).unwrap();
    let backend = FilesystemBackend::new(&root).unwrap();

    let v1 = backend
        .write(&p("/abs/a.txt"), "one".into(), WriteMode::CreateNew)
        .await
        .unwrap()
        .version
        .unwrap();
    backend
        .write(&p("/rel/sub/b.txt"), "two".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    let stale = backend
        .write(&p("/rel/a.txt"), "three".into(), WriteMode::IfVersion(v1.clone()))
        .await
        .unwrap();
    let r = backend
        .write(&p("/abs/a.txt"), "four".into(), WriteMode::IfVersion(v1))
        .await;
    assert!(matches!(r, Err(BackendError::Conflict { .. })), "{r:?}");
    assert_ne!(stale.version, None);
    assert_eq!(
        std::fs::read_to_string(root.join("inner/a.txt")).unwrap(),
        "three"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("inner/sub/b.txt")).unwrap(),
        "two"
    );
    let listed: Vec<String> = backend
        .ls(&p("/abs"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path.to_string())
        .collect();
    assert_eq!(listed, vec!["/abs/a.txt", "/abs/sub"]);
    backend.delete(&p("/rel/a.txt")).await.unwrap();
    assert!(!root.join("inner/a.txt").exists());
    assert!(root.join("abs").is_symlink() && root.join("rel").is_symlink());
}

/// A thread flips `root/d` between a real directory and a symlink to a directory outside the
/// root while writes and deletes of `/d/f` run. A check-then-use implementation lets some of
/// them land outside; a descriptor-relative one never does. This test is a race, so passing it
/// once proves little about a broken implementation, but any file outside is a real escape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipping_a_directory_to_a_symlink_never_lets_a_write_or_delete_out() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    let outside = outer.path().join("outside");
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("keep"), "keep").unwrap();
    let backend = FilesystemBackend::new(&root).unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (done, d, outside) = (done.clone(), root.join("d"), outside.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !done.load(Ordering::Relaxed) {
                let _ = std::fs::remove_dir_all(&d);
                let _ = std::fs::remove_file(&d);
                let _ = std::os::unix::fs::symlink(&outside, &d);
                let _ = std::fs::remove_file(&d);
                let _ = std::fs::create_dir(&d);
                flips += 1;
            }
            flips
        })
    };
    let mut written = 0;
    for i in 0..2_000 {
        if backend
            .write(&p("/d/f"), format!("{i}").into(), WriteMode::Overwrite)
            .await
            .is_ok()
        {
            written += 1;
        }
        if i % 10 == 0 {
            let _ = backend.delete(&p("/d/keep")).await;
            let _ = backend.ls(&p("/d")).await;
        }
    }
    done.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 0, "the flipper ran");
    eprintln!("{written} of 2000 writes succeeded, {flips} flips");
    assert_eq!(
        names_in(&outside),
        vec!["keep"],
        "nothing written to or deleted from outside"
    );
    assert_eq!(std::fs::read_to_string(outside.join("keep")).unwrap(), "keep");
}

#[tokio::test]
async fn a_broken_link_as_a_parent_is_not_a_directory() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(root.join("missing"), root.join("abs")).unwrap();
    std::os::unix::fs::symlink("missing", root.join("rel")).unwrap();
    let backend = FilesystemBackend::new(&root).unwrap();
    for path in ["/abs/x", "/rel/x", "/rel/sub/x"] {
        let r = backend.write(&p(path), "x".into(), WriteMode::Overwrite).await;
        assert!(
            matches!(r, Err(BackendError::NotADirectory { .. })),
            "{path}: {r:?}"
        );
    }
    assert!(!root.join("missing").exists(), "a broken link is never completed");
}
