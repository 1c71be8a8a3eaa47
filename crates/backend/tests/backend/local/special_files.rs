//! Special files on local disk: a named pipe (FIFO) under the root is never opened for reading
//! in a way that waits for a writer. `stat` answers from an `O_PATH` open, reads refuse it with
//! an error, and listings leave it out, so a stray FIFO named `SKILL.md` cannot hang a skills scan.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use trellis_backend::{Backend, FilesystemBackend, VirtualPath};

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}

/// `op` must finish well within a generous bound: an open that waits for a writer never does.
async fn promptly<T>(what: &str, op: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), op)
        .await
        .unwrap_or_else(|_| panic!("{what} waited for a writer on a FIFO"))
}

#[tokio::test]
async fn a_named_pipe_is_stated_refused_by_reads_and_left_out_of_listings_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("skills/pipe")).unwrap();
    std::fs::write(dir.path().join("skills/plain.md"), "plain").unwrap();
    mkfifo(&dir.path().join("skills/pipe/SKILL.md"));
    let backend = FilesystemBackend::new(dir.path()).unwrap();
    let fifo = p("/skills/pipe/SKILL.md");

    let entry = promptly("stat", backend.stat(&fifo)).await.unwrap();
    assert!(!entry.is_dir());
    let many = promptly(
        "stat_many",
        backend.stat_many(&[fifo.clone(), p("/skills/plain.md")]),
    )
    .await;
    assert!(many.iter().all(Result::is_ok), "{many:?}");

    let err = promptly("read", backend.read(&fifo, None)).await.unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let reads = promptly(
        "read_many",
        backend.read_many(&[fifo.clone(), p("/skills/plain.md")], None),
    )
    .await;
    assert!(reads[0].is_err(), "{:?}", reads[0]);
    assert_eq!(reads[1].as_ref().unwrap().bytes, "plain");

    let listed = promptly("ls", backend.ls(&p("/skills/pipe"))).await.unwrap();
    assert!(listed.is_empty(), "{listed:?}");
}
