//! [`FilesystemBackend`]'s streamed write goes to disk as its source is read (it never holds the
//! file in memory), readers see the old file until it is renamed into place, and a write dropped
//! halfway leaves nothing behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use trellis_backend::{Backend, BackendExt, FilesystemBackend, VirtualPath, WriteMode};

const MIB: usize = 1 << 20;

/// The sizes of the temporary files beside `f` in `dir`.
fn temporaries(dir: &Path) -> Vec<u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".f.trellis-tmp"))
        .map(|e| e.metadata().unwrap().len())
        .collect()
}

/// Wait (at most a minute: a bound, not a measurement) until a temporary file holds `at_least`
/// bytes.
async fn until_on_disk(dir: &Path, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !temporaries(dir).iter().any(|&n| n >= at_least) {
        assert!(
            Instant::now() < deadline,
            "no temporary file reached {at_least} bytes while the source was still open: {:?}",
            temporaries(dir)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a listing of the root shows.
async fn listed(backend: &FilesystemBackend) -> Vec<String> {
    let entries = backend.ls(&VirtualPath::root()).await.unwrap();
    entries.into_iter().map(|e| e.path.to_string()).collect()
}

fn setup() -> (tempfile::TempDir, Arc<FilesystemBackend>, VirtualPath) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), "old").unwrap();
    let backend = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
    (dir, backend, VirtualPath::parse("/f").unwrap())
}

/// A streamed overwrite of `path` with 4 MiB, running: the pipe that feeds it, and its task.
fn start(
    backend: &Arc<FilesystemBackend>,
    path: &VirtualPath,
) -> (
    tokio::io::DuplexStream,
    tokio::task::JoinHandle<trellis_backend::Result<trellis_backend::WriteOutcome>>,
) {
    let (tx, rx) = tokio::io::duplex(64 * 1024);
    let (backend, path) = (backend.clone(), path.clone());
    let writer = tokio::spawn(async move {
        backend
            .write_stream(&path, Box::new(rx), 4 * MIB as u64, WriteMode::Overwrite)
            .await
    });
    (tx, writer)
}

/// Half of a 4 MiB source is on disk, in the temporary file, while the rest is not yet written
/// (the default `write_stream`, which reads the source whole first, leaves no temporary file
/// until the source ends); the old file is what a reader sees until the write completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_write_reaches_disk_before_its_source_ends() {
    let (dir, backend, path) = setup();
    let (mut tx, writer) = start(&backend, &path);
    tx.write_all(&vec![b'a'; 2 * MIB]).await.unwrap();
    until_on_disk(dir.path(), MIB as u64).await;
    assert_eq!(backend.read_to_string(&path).await.unwrap(), "old");
    // The temporary file is no file of the store's: a listing meanwhile shows only `/f`.
    assert_eq!(listed(&backend).await, ["/f"]);
    tx.write_all(&vec![b'b'; 2 * MIB]).await.unwrap();
    drop(tx);
    writer.await.unwrap().unwrap();
    let read = backend.read(&path, None).await.unwrap();
    assert_eq!(read.size, 4 * MIB as u64);
    assert!(read.bytes[..2 * MIB].iter().all(|&b| b == b'a'));
    assert!(read.bytes[2 * MIB..].iter().all(|&b| b == b'b'));
    assert_eq!(temporaries(dir.path()), Vec::<u64>::new());
}

/// A streamed write dropped halfway (its task aborted) removes its temporary file and leaves the
/// old file as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_write_dropped_halfway_leaves_nothing() {
    let (dir, backend, path) = setup();
    let (mut tx, writer) = start(&backend, &path);
    tx.write_all(&vec![b'a'; MIB]).await.unwrap();
    until_on_disk(dir.path(), 1).await;
    writer.abort();
    assert!(writer.await.unwrap_err().is_cancelled());
    assert_eq!(temporaries(dir.path()), Vec::<u64>::new());
    assert_eq!(backend.read_to_string(&path).await.unwrap(), "old");
}

/// What a killed write left (a temporary file a day old) is removed by the next listing of its
/// directory; a younger one, possibly a write in progress, stays on disk. Neither is listed.
#[tokio::test]
async fn a_listing_removes_a_temporary_file_a_killed_write_left() {
    let (dir, backend, _) = setup();
    let old = dir.path().join(".f.trellis-tmp-999999-0");
    let young = dir.path().join(".f.trellis-tmp-999999-1");
    for temp in [&old, &young] {
        std::fs::write(temp, "half a write").unwrap();
    }
    let two_days_ago = std::time::SystemTime::now() - Duration::from_secs(48 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(two_days_ago)
        .unwrap();
    assert_eq!(listed(&backend).await, ["/f"]);
    assert!(!old.exists(), "the abandoned temporary file is removed");
    assert!(young.exists(), "a recent one may be a write in progress: kept");
}
