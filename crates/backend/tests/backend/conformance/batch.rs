//! Batched calls: `read_many` and `stat_many` answer per path, in order, like the single calls.

use trellis_backend::{BackendError, ByteRange, EntryKind};

use super::{Target, put};

pub(super) async fn read_many_keeps_order_and_isolates_failures(t: &Target) {
    put(t, "many/a.md", "alpha-content").await;
    put(t, "many/b.md", "beta-content").await;
    let paths = [
        t.path("many/a.md"),
        t.path("many/missing.md"),
        t.path("many/b.md"),
        t.path("many"),
    ];
    let results = t.backend.read_many(&paths, Some(ByteRange::prefix(5))).await;
    assert_eq!(results.len(), 4);
    let first = results[0].as_ref().unwrap();
    assert_eq!(first.bytes.as_ref(), b"alpha");
    assert_eq!(first.size, 13);
    assert!(!first.is_complete());
    assert!(
        matches!(results[1], Err(BackendError::NotFound { .. })),
        "{:?}",
        results[1]
    );
    assert_eq!(results[1].as_ref().unwrap_err().path(), paths[1].as_str());
    assert_eq!(results[2].as_ref().unwrap().bytes.as_ref(), b"beta-");
    assert!(
        matches!(results[3], Err(BackendError::IsADirectory { .. })),
        "{:?}",
        results[3]
    );
    let whole = t.backend.read_many(&paths[..1], None).await;
    assert_eq!(whole[0].as_ref().unwrap().bytes.as_ref(), b"alpha-content");
}

pub(super) async fn stat_many_matches_stat_in_order(t: &Target) {
    put(t, "stats/a.md", "alpha").await;
    put(t, "stats/sub/b.md", "beta-content").await;
    let paths = [
        t.path("stats/sub/b.md"),
        t.path("stats/missing.md"),
        t.path("stats/a.md"),
        t.path("stats/sub"),
        t.path("stats/a.md"),
    ];
    let many = t.backend.stat_many(&paths).await;
    assert_eq!(many.len(), paths.len());
    for (path, result) in paths.iter().zip(&many) {
        match (t.backend.stat(path).await, result) {
            (Ok(one), Ok(batched)) => assert_eq!(&one, batched, "{path}"),
            (Err(one), Err(batched)) => {
                assert_eq!(one.to_string(), batched.to_string(), "{path}");
            }
            (one, batched) => panic!("{path}: stat {one:?}, stat_many {batched:?}"),
        }
    }
    let b = many[0].as_ref().unwrap();
    assert_eq!((b.kind, b.size, &b.path), (EntryKind::File, 12, &paths[0]));
    assert!(b.version.is_some(), "files carry a version");
    assert!(
        matches!(&many[1], Err(BackendError::NotFound { path }) if path == paths[1].as_str()),
        "{:?}",
        many[1]
    );
    assert_eq!(many[2].as_ref().unwrap().size, 5);
    assert_eq!(many[3].as_ref().unwrap().kind, EntryKind::Directory);
    assert!(t.backend.stat_many(&[]).await.is_empty());
}
