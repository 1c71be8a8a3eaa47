//! [`Backend::write_stream`]: the same file, modes and conflicts as [`Backend::write`], from a
//! source read in chunks; a source of the wrong length writes nothing.

use bytes::Bytes;
use trellis_backend::{
    BackendError, BackendExt, ConflictKind, MULTIPART_THRESHOLD, VirtualPath, WRITE_CHUNK, WriteMode,
    WriteOutcome, WriteSource,
};

use super::{Target, put};

/// `len` bytes that differ from chunk to chunk (a chunk written twice or out of order shows).
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ (i / 4096) as u8).collect()
}

fn source(data: Vec<u8>) -> WriteSource {
    Box::new(std::io::Cursor::new(data))
}

async fn stream(
    t: &Target,
    path: &VirtualPath,
    data: &[u8],
    mode: WriteMode,
) -> Result<WriteOutcome, BackendError> {
    t.backend
        .write_stream(path, source(data.to_vec()), data.len() as u64, mode)
        .await
}

/// The names `ls` lists in `dir`: what a refused write must not have added to.
async fn names(t: &Target, dir: &str) -> Vec<String> {
    let entries = t.backend.ls(&t.path(dir)).await.unwrap();
    entries.iter().map(|e| e.path.to_string()).collect()
}

fn conflict(err: &BackendError, want: ConflictKind) -> bool {
    matches!(err, BackendError::Conflict { kind, .. } if *kind == want)
}

/// Multi-chunk sources in every mode read back byte for byte, with the version the write
/// returned; the large one is over the object stores' multipart threshold (two 5 MiB parts).
pub(super) async fn streamed_writes_round_trip(t: &Target) {
    let small = pattern(3 * WRITE_CHUNK + 17);
    let path = t.path("s/new.bin");
    let created = stream(t, &path, &small, WriteMode::CreateNew).await.unwrap();
    let read = t.backend.read(&path, None).await.unwrap();
    assert!(read.bytes == small, "a create-only streamed write reads back");
    assert_eq!(read.version, created.version, "the write's version is the file's");

    let large = pattern(usize::try_from(MULTIPART_THRESHOLD).unwrap() + 2 * WRITE_CHUNK + 5);
    let over = stream(t, &path, &large, WriteMode::Overwrite).await.unwrap();
    assert_ne!(over.version, created.version, "every write gives a new version");
    let read = t.backend.read(&path, None).await.unwrap();
    assert_eq!(read.size, large.len() as u64);
    assert!(read.bytes == large, "a large streamed overwrite reads back");
    assert_eq!(read.version, over.version);

    let checked = stream(t, &path, &small, WriteMode::IfVersion(over.version.unwrap()))
        .await
        .unwrap();
    let read = t.backend.read(&path, None).await.unwrap();
    assert!(read.bytes == small, "a version-checked streamed write reads back");
    assert_eq!(read.version, checked.version);

    let empty = t.path("s/empty");
    stream(t, &empty, b"", WriteMode::CreateNew).await.unwrap();
    assert_eq!(t.backend.read(&empty, None).await.unwrap().size, 0);
    assert_eq!(
        names(t, "s").await,
        [t.path("s/empty").to_string(), path.to_string()]
    );
}

/// Create-only on an existing file and a stale or missing version conflict exactly as `write`
/// does, and nothing is written: the old content stays, no file is added.
pub(super) async fn streamed_writes_conflict_like_write(t: &Target) {
    let path = t.path("c/file.txt");
    put(t, "c/file.txt", "old").await;
    let old = t.backend.stat(&path).await.unwrap().version.unwrap();
    let data = pattern(2 * WRITE_CHUNK + 1);

    let err = stream(t, &path, &data, WriteMode::CreateNew).await.unwrap_err();
    assert!(conflict(&err, ConflictKind::AlreadyExists), "{err:?}");
    assert_eq!(err.path(), path.as_str());

    let now = stream(t, &path, b"new", WriteMode::IfVersion(old.clone()))
        .await
        .unwrap();
    let err = stream(t, &path, &data, WriteMode::IfVersion(old.clone()))
        .await
        .unwrap_err();
    assert!(
        conflict(&err, ConflictKind::VersionMismatch),
        "a stale version: {err:?}"
    );
    assert_eq!(t.backend.read_to_string(&path).await.unwrap(), "new");
    assert_eq!(t.backend.stat(&path).await.unwrap().version, now.version);

    let missing = t.path("c/missing.txt");
    let err = stream(t, &missing, &data, WriteMode::IfVersion(old))
        .await
        .unwrap_err();
    assert!(
        conflict(&err, ConflictKind::VersionMismatch),
        "a missing file: {err:?}"
    );
    assert_eq!(names(t, "c").await, [path.to_string()], "nothing was added");
}

/// A source shorter or longer than announced is `LengthMismatch` in every mode (above the
/// multipart threshold too), and writes nothing: the old content stays, no file is added.
pub(super) async fn a_source_of_the_wrong_length_writes_nothing(t: &Target) {
    let path = t.path("l/file.txt");
    put(t, "l/file.txt", "old").await;
    let version = t.backend.stat(&path).await.unwrap().version.unwrap();
    let large = usize::try_from(MULTIPART_THRESHOLD).unwrap() + WRITE_CHUNK;
    let cases = [
        (WriteMode::Overwrite, 2 * WRITE_CHUNK, 2 * WRITE_CHUNK + 1),
        (WriteMode::Overwrite, 2 * WRITE_CHUNK + 1, 2 * WRITE_CHUNK),
        (WriteMode::Overwrite, large, large + 1),
        (WriteMode::Overwrite, large + 1, large),
        (WriteMode::IfVersion(version.clone()), 10, 11),
        (WriteMode::IfVersion(version), 11, 10),
    ];
    for (mode, held, announced) in cases {
        let err = t
            .backend
            .write_stream(&path, source(pattern(held)), announced as u64, mode.clone())
            .await
            .unwrap_err();
        let found = (held < announced).then_some(held as u64);
        assert!(
            matches!(&err, BackendError::LengthMismatch { expected, found: f, .. }
                if *expected == announced as u64 && *f == found),
            "{mode:?}, {held} bytes announced as {announced}: {err:?}"
        );
        assert_eq!(err.path(), path.as_str());
        assert_eq!(t.backend.read_to_string(&path).await.unwrap(), "old");
    }
    let new = t.path("l/new.txt");
    for (held, announced) in [(5, 6), (6, 5)] {
        let err = t
            .backend
            .write_stream(&new, source(pattern(held)), announced, WriteMode::CreateNew)
            .await
            .unwrap_err();
        assert!(matches!(err, BackendError::LengthMismatch { .. }), "{err:?}");
    }
    assert_eq!(names(t, "l").await, [path.to_string()], "nothing was added");
    // Nothing of the refused writes is in the way of the next one.
    stream(t, &new, b"fine", WriteMode::CreateNew).await.unwrap();
    assert_eq!(
        t.backend.read(&new, None).await.unwrap().bytes,
        Bytes::from_static(b"fine")
    );
}
