//! The persisted skills catalog (`skills::persist`): a warm cache reads nothing, every change is
//! seen on the next load, stale, corrupt and foreign caches are never trusted over the source, and
//! concurrent writers leave a valid cache — on local disk and on the S3 emulator.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bytes::Bytes;
use trellis_middleware::backend::{FilesystemBackend, VirtualPath, WriteMode};
use trellis_middleware::skills::persist::{INDEX_FILE, cache_key};
use trellis_middleware::skills::{
    BucketIndex, CacheError, CatalogStore, DiscoveryOptions, LocalCatalogDir, Persisted, SkillSource,
    discover, discover_persisted,
};

use crate::skills::common::*;

const LIB: &str = "/lib";

async fn library(b: &Shared, n: usize) {
    for i in 0..n {
        put(
            b,
            &format!("{LIB}/skill-{i:02}/SKILL.md"),
            skill_md(&format!("skill-{i:02}"), &format!("Skill number {i}")),
        )
        .await;
    }
    put(
        b,
        &format!("{LIB}/broken/SKILL.md"),
        "---\nname: [unclosed\n---\n",
    )
    .await;
}

fn sources(b: &Shared) -> Vec<SkillSource> {
    vec![source(b, LIB)]
}

fn persisted(origin: &str, store: &Arc<dyn CatalogStore>) -> Vec<Option<Persisted>> {
    vec![Some(Persisted::new(origin, store.clone()))]
}

/// One load: the catalog must equal a scan from scratch; returns (files read, reused, report).
async fn load(
    b: &Shared,
    p: &[Option<Persisted>],
) -> (usize, usize, trellis_middleware::skills::CacheReport) {
    let s = sources(b);
    let found = discover_persisted(&s, p, &DiscoveryOptions::default()).await;
    let fresh = discover(&s, &DiscoveryOptions::default()).await;
    assert_eq!(
        found.discovery.catalog, fresh.catalog,
        "a persisted load equals a fresh scan"
    );
    let stats = &found.discovery.stats;
    (stats.read + stats.read_on, stats.reused, found.reports[0].clone())
}

async fn warm_then_changes(b: Shared) {
    library(&b, 10).await;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn CatalogStore> = Arc::new(LocalCatalogDir::new(dir.path()));
    let p = persisted("test://lib", &store);

    let (read, _, report) = load(&b, &p).await;
    assert_eq!(
        (read, report.seeded_from, report.saved),
        (11, None, 1),
        "cold: all read, saved"
    );
    let (read, reused, report) = load(&b, &p).await;
    assert_eq!(
        (read, reused, report.seeded_from, report.saved),
        (0, 11, Some(0), 0),
        "warm: nothing read or rewritten"
    );
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);

    // A changed, an added and a deleted SKILL.md are each seen on the next load.
    put(
        &b,
        &format!("{LIB}/skill-03/SKILL.md"),
        skill_md("skill-03", "Changed, and longer than before"),
    )
    .await;
    put(
        &b,
        &format!("{LIB}/skill-new/SKILL.md"),
        skill_md("skill-new", "Added"),
    )
    .await;
    b.delete(&vp(&format!("{LIB}/skill-07/SKILL.md"))).await.unwrap();
    let s = sources(&b);
    let found = discover_persisted(&s, &p, &DiscoveryOptions::default()).await;
    let catalog = &found.discovery.catalog;
    assert_eq!(
        catalog.get("skill-03").unwrap().description,
        "Changed, and longer than before"
    );
    assert!(catalog.get("skill-new").is_some());
    assert!(catalog.get("skill-07").is_none(), "a deleted skill is gone");
    assert_eq!(
        found.discovery.stats.read, 2,
        "only the changed and the added file are read"
    );
    assert_eq!(found.reports[0].saved, 1, "the cache follows the change");
    let (read, ..) = load(&b, &p).await;
    assert_eq!(read, 0, "the rewritten cache is warm");

    // A deletion alone reads nothing, yet the catalog changed: the cache must still follow it
    // (a load that reads nothing skips re-encoding only when every entry was reused).
    b.delete(&vp(&format!("{LIB}/skill-05/SKILL.md"))).await.unwrap();
    let (read, _, report) = load(&b, &p).await;
    assert_eq!(
        (read, report.saved),
        (0, 1),
        "a deletion alone rewrites the cache"
    );
    let s = sources(&b);
    let found = discover_persisted(&s, &p, &DiscoveryOptions::default()).await;
    assert!(found.discovery.catalog.get("skill-05").is_none());
    assert_eq!(
        (found.discovery.stats.read, found.reports[0].saved),
        (0, 0),
        "and is warm again"
    );
}

async fn corrupt_and_foreign_caches_are_ignored(b: Shared) {
    library(&b, 4).await;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn CatalogStore> = Arc::new(LocalCatalogDir::new(dir.path()));
    let p = persisted("test://org", &store);
    load(&b, &p).await;
    let file = dir.path().join(format!("{}.catalog", cache_key("test://org")));
    let good = std::fs::read(&file).unwrap();

    let mut flipped = good.clone();
    let last = flipped.len() - 2;
    flipped[last] ^= 0x01;
    let truncated = good[..good.len() / 2].to_vec();
    let other_version =
        String::from_utf8(good.clone())
            .unwrap()
            .replacen("\"version\":1", "\"version\":99", 1);
    for (what, bytes) in [
        ("garbage", b"not a catalog at all".to_vec()),
        ("a flipped byte", flipped),
        ("truncated", truncated),
        ("another format version", other_version.into_bytes()),
    ] {
        std::fs::write(&file, &bytes).unwrap();
        let (read, _, report) = load(&b, &p).await;
        assert_eq!(read, 5, "{what}: the source is scanned from scratch");
        assert_eq!(report.seeded_from, None, "{what}");
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("corrupt catalog cache")),
            "{what}: {:?}",
            report.warnings
        );
        assert_eq!(report.saved, 1, "{what}: rewritten");
        assert_eq!(
            std::fs::read(&file).unwrap(),
            good,
            "{what}: the rewrite is the good catalog"
        );
    }

    // Another origin's file (the org catalog, copied to the key of a user's personal source) is
    // not used for that source: keys differ and the origin in the header is checked.
    assert_ne!(
        cache_key("test://org"),
        cache_key("user:alice:/workspace/agents/skills")
    );
    let personal = dir.path().join(format!(
        "{}.catalog",
        cache_key("user:alice:/workspace/agents/skills")
    ));
    std::fs::write(&personal, &good).unwrap();
    let (read, _, report) = load(&b, &persisted("user:alice:/workspace/agents/skills", &store)).await;
    assert_eq!(
        (read, report.seeded_from),
        (5, None),
        "a foreign cache is ignored"
    );
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("written for \"test://org\"")),
        "{:?}",
        report.warnings
    );
}

/// A stale cache (made before the source changed, the writer never saw the change) is never
/// trusted over the source: it only saves reads of files whose version tag still matches.
async fn stale_cache_is_revalidated(b: Shared) {
    library(&b, 4).await;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn CatalogStore> = Arc::new(LocalCatalogDir::new(dir.path()));
    let p = persisted("test://stale", &store);
    load(&b, &p).await;
    let file = dir.path().join(format!("{}.catalog", cache_key("test://stale")));
    let stale = std::fs::read(&file).unwrap();
    // Every file changes while the cache is kept aside, then the old cache comes back.
    for i in 0..4 {
        put(
            &b,
            &format!("{LIB}/skill-{i:02}/SKILL.md"),
            skill_md(&format!("skill-{i:02}"), &format!("Version two of skill {i}")),
        )
        .await;
    }
    load(&b, &p).await;
    std::fs::write(&file, &stale).unwrap();
    let (read, reused, _) = load(&b, &p).await;
    assert_eq!(
        (read, reused),
        (4, 1),
        "the four changed files are read, the broken one reused"
    );
}

/// Writers racing on one cache directory never leave a torn file.
async fn concurrent_local_writers(b: Shared) {
    library(&b, 6).await;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn CatalogStore> = Arc::new(LocalCatalogDir::new(dir.path()));
    let p = persisted("test://race", &store);
    let s = sources(&b);
    let options = DiscoveryOptions::default();
    let runs = (0..8).map(|_| discover_persisted(&s, &p, &options));
    for found in futures::future::join_all(runs).await {
        assert!(
            found.reports[0].warnings.is_empty(),
            "{:?}",
            found.reports[0].warnings
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "no temporary file left behind: {leftovers:?}");
    let (read, _, report) = load(&b, &p).await;
    assert_eq!(
        (read, report.seeded_from),
        (0, Some(0)),
        "the surviving file is whole"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_disk_cache_contract() {
    for case in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let b: Shared = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
        match case {
            0 => warm_then_changes(b).await,
            1 => corrupt_and_foreign_caches_are_ignored(b).await,
            2 => stale_cache_is_revalidated(b).await,
            _ => concurrent_local_writers(b).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_cache_contract() {
    let Some((endpoint, bucket)) = s3_or_skip() else {
        return;
    };
    warm_then_changes(s3(&endpoint, &bucket, "warm")).await;
    corrupt_and_foreign_caches_are_ignored(s3(&endpoint, &bucket, "corrupt")).await;
    stale_cache_is_revalidated(s3(&endpoint, &bucket, "stale")).await;
    concurrent_local_writers(s3(&endpoint, &bucket, "race")).await;
}

/// The index object in the bucket: seeds a worker with no local cache, is create-only or
/// version-checked (a racing publisher loses with a conflict, nothing torn), and a corrupt index
/// is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_bucket_index_is_shared_and_version_checked() {
    let Some((endpoint, bucket)) = s3_or_skip() else {
        return;
    };
    let b = s3(&endpoint, &bucket, "index");
    library(&b, 5).await;
    let lib = VirtualPath::parse(LIB).unwrap();
    let publisher: Arc<dyn CatalogStore> = Arc::new(BucketIndex::new(b.clone(), &lib).unwrap());
    let (read, _, report) = load(&b, &persisted("s3://x/lib", &publisher)).await;
    assert_eq!((read, report.saved), (6, 1), "published");

    // A worker with an empty local cache is seeded from the index, and fills its local cache.
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn CatalogStore> = Arc::new(LocalCatalogDir::new(dir.path()));
    let worker = vec![Some(
        Persisted::new("s3://x/lib", local.clone())
            .also(Arc::new(BucketIndex::new(b.clone(), &lib).unwrap()), false),
    )];
    let (read, _, report) = load(&b, &worker).await;
    assert_eq!(
        (read, report.seeded_from, report.saved),
        (0, Some(1), 1),
        "{report:?}"
    );
    let (read, _, report) = load(&b, &worker).await;
    assert_eq!(
        (read, report.seeded_from),
        (0, Some(0)),
        "then from the local cache"
    );

    // The index is listed in the source but is never a skill.
    let found = discover(&sources(&b), &DiscoveryOptions::default()).await;
    assert_eq!(found.catalog.len(), 5);
    assert!(b.stat(&lib.join(INDEX_FILE).unwrap()).await.is_ok());

    // Two publishers: both read the same index, the first save wins, the second conflicts.
    let first = BucketIndex::new(b.clone(), &lib).unwrap();
    let second = BucketIndex::new(b.clone(), &lib).unwrap();
    first.load("k").await.unwrap().unwrap();
    second.load("k").await.unwrap();
    // (Different bytes: an S3 ETag is the content's digest, so a rewrite of the same bytes keeps it.)
    first.save("k", Bytes::from_static(b"the winner")).await.unwrap();
    let lost = second.save("k", Bytes::from_static(b"the loser")).await;
    assert!(matches!(lost, Err(CacheError::Conflict { .. })), "{lost:?}");
    assert_eq!(
        first.load("k").await.unwrap().unwrap(),
        Bytes::from_static(b"the winner"),
        "the winner's bytes are whole"
    );
    // Create-only when none was read: a publisher that saw no index cannot overwrite one.
    let fresh_dir = VirtualPath::parse("/elsewhere").unwrap();
    let a = BucketIndex::new(b.clone(), &fresh_dir).unwrap();
    let c = BucketIndex::new(b.clone(), &fresh_dir).unwrap();
    assert!(a.load("k").await.unwrap().is_none() && c.load("k").await.unwrap().is_none());
    a.save("k", Bytes::from_static(b"one")).await.unwrap();
    assert!(matches!(
        c.save("k", Bytes::from_static(b"two")).await,
        Err(CacheError::Conflict { .. })
    ));

    // A corrupt index is ignored with a warning, never trusted.
    b.write(
        &lib.join(INDEX_FILE).unwrap(),
        Bytes::from_static(b"{}\n"),
        WriteMode::Overwrite,
    )
    .await
    .unwrap();
    let only_index: Arc<dyn CatalogStore> = Arc::new(BucketIndex::new(b.clone(), &lib).unwrap());
    let mut p = Persisted::new("s3://x/lib", only_index);
    p.stores[0].1 = false;
    let (read, _, report) = load(&b, &[Some(p)]).await;
    assert_eq!((read, report.seeded_from), (6, None));
    assert!(
        report.warnings.iter().any(|w| w.contains("corrupt")),
        "{:?}",
        report.warnings
    );
}
