//! Where local disk operations run (`crates/backend/src/local/offload.rs`): small writes, links,
//! `stat`s and reads of small files on the calling task, the rest on tokio's blocking pool, and
//! everything on the pool with `offload_all`. Told apart by a runtime whose only blocking thread is
//! kept busy: an operation that needs the pool cannot finish until it is freed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use trellis_backend::{Backend, BackendExt, FilesystemBackend, VirtualPath, WriteMode};

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

/// A runtime with one blocking thread, and a guard that keeps it busy until dropped.
fn runtime_with_busy_pool() -> (tokio::runtime::Runtime, std::sync::mpsc::Sender<()>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .unwrap();
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let (started, running) = std::sync::mpsc::channel::<()>();
    rt.spawn_blocking(move || {
        started.send(()).unwrap();
        let _ = wait.recv();
    });
    running.recv().unwrap();
    (rt, release)
}

/// Whether `op` finishes within a second while the pool is busy.
async fn finishes<T>(op: impl std::future::Future<Output = T>) -> bool {
    tokio::time::timeout(Duration::from_secs(1), op).await.is_ok()
}

#[test]
fn small_operations_need_no_blocking_thread_and_large_ones_do() {
    // The system's temporary directory is on a local file system here (ext4 or tmpfs).
    let dir = tempfile::tempdir().unwrap();
    let (rt, release) = runtime_with_busy_pool();
    rt.block_on(async {
        let backend = FilesystemBackend::new(dir.path()).unwrap();
        assert!(backend.runs_small_operations_inline());
        assert!(matches!(backend.local_file_system(), Some("ext4" | "tmpfs")));
        let small = bytes::Bytes::from(vec![b'a'; 64 * 1024]);
        assert!(finishes(backend.write(&p("/a/small.txt"), small.clone(), WriteMode::Overwrite)).await);
        assert!(finishes(backend.link(&p("/a/small.txt"), &p("/a/head.txt"), WriteMode::Overwrite)).await);
        assert!(finishes(backend.stat(&p("/a/head.txt"))).await);
        let read = tokio::time::timeout(Duration::from_secs(1), backend.read_bytes(&p("/a/head.txt")))
            .await
            .expect("a small read runs on the calling task")
            .unwrap();
        assert_eq!(read, small);

        // Over 64 KiB, a write waits for the pool; it completes once the pool is free.
        let large = bytes::Bytes::from(vec![b'b'; 64 * 1024 + 1]);
        let path = p("/a/large.bin");
        let write = backend.write(&path, large.clone(), WriteMode::Overwrite);
        tokio::pin!(write);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut write)
                .await
                .is_err(),
            "a large write must not run on the calling task"
        );
        release.send(()).unwrap();
        write.await.unwrap();
        assert_eq!(backend.read_bytes(&p("/a/large.bin")).await.unwrap(), large);
    });
}

#[test]
fn with_offload_all_even_a_small_write_waits_for_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (rt, release) = runtime_with_busy_pool();
    rt.block_on(async {
        let backend = FilesystemBackend::new(dir.path()).unwrap().offload_all();
        assert!(!backend.runs_small_operations_inline());
        // Still named: offloading is a choice, not a different file system.
        assert!(backend.local_file_system().is_some());
        let path = p("/note.txt");
        let write = backend.write(&path, "hi".into(), WriteMode::Overwrite);
        tokio::pin!(write);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut write)
                .await
                .is_err()
        );
        release.send(()).unwrap();
        write.await.unwrap();
        assert_eq!(backend.read_bytes(&p("/note.txt")).await.unwrap(), "hi");
    });
}
