//! A skills catalog that outlives the process: a persisted catalog per source, validated against
//! the source's listing on every load so only new or changed `SKILL.md` files are read.
//!
//! * **What is stored.** For each source with an *origin* (a string naming where the source really
//!   is: an object-store URL, an absolute directory), the part of the catalog that source produced
//!   — loaded and shadowed skills, skipped files, their issues, each with the version tag it was
//!   read at — in the [`format`] (versioned, content-addressed, paths relative to the source).
//! * **Where.** A [`CatalogStore`]: by default a [`LocalCatalogDir`] (see [`default_cache_dir`]),
//!   one file per origin named by [`cache_key`]; optionally a [`BucketIndex`], an object that
//!   `trellis skills index URL` publishes into the source itself so every worker shares it.
//! * **Never trusted over the source.** [`discover_persisted`] always lists every source (one paged
//!   listing on an object store, `ls` plus `stat`s elsewhere) and hands the persisted entries to
//!   [`rescan`](crate::skills::discovery::rescan): a file is reused only when its path is listed now *and*
//!   its version tag (ETag, generation, mtime+size) equals the stored one; everything else is read.
//!   A deleted file is not listed, so it is gone; an added one has no entry, so it is read. A
//!   change is therefore seen on the very next load (staleness zero), as far as the store's
//!   version tags change with the content: always for S3/GCS/Azure ETags; on local disk the tag is
//!   mtime and size, so a rewrite of the same size within one tick of the file system's clock (1 ns
//!   on ext4/xfs/btrfs, 2 s on FAT) could go unseen until the next change.
//! * **Corrupt or foreign caches are ignored.** A file that fails to decode (bad header, unknown
//!   format version, digest mismatch, another origin's file) is ignored with a warning and the
//!   source is scanned from scratch, then the cache is rewritten.
//! * **Scope.** A persisted catalog belongs to the agent's *source*, not to a thread or a user:
//!   every thread and user of an agent reads the same organisation library, so they share it.
//!   Personal skills ([`PersonalSkills`](crate::skills::catalog::personal::PersonalSkills)) are never persisted
//!   here: their sources carry no origin, and each user's catalog stays in that user's bounded
//!   in-memory cache. Keys are digests of the origin, so two sources never share a file unless
//!   they name the same place.
//! * **Writers.** Saves happen only when the encoded catalog changed (same bytes, same digest) and
//!   never for a source that could not be listed (its old catalog is kept). Local saves go through
//!   a temporary file and a rename; bucket saves are create-only or version-checked. Two writers
//!   racing both write whole, valid files; the last rename wins, and either file is correct for
//!   the listing it was made from (and is re-validated on load anyway).

mod format;
mod store;

use std::sync::Arc;

use bytes::Bytes;

pub use format::{FORMAT, FORMAT_VERSION, MAX_CATALOG_BYTES, cache_key, decode, encode};
pub use store::{BucketIndex, CatalogStore, INDEX_FILE, LocalCatalogDir, default_cache_dir};

use crate::backend::BackendError;
use crate::skills::catalog::SkillCatalog;
use crate::skills::discovery::source::SkillSource;
use crate::skills::discovery::{Discovery, DiscoveryOptions, rescan_owned};

/// Why a persisted catalog could not be loaded or saved. None of these fails discovery: the
/// source is scanned instead and the problem is reported.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Local file I/O failed.
    #[error("cache I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The store's backend failed.
    #[error("cache store: {0}")]
    Backend(#[from] BackendError),
    /// The bytes are not a persisted catalog this build reads.
    #[error("corrupt catalog cache: {reason}")]
    Corrupt {
        /// What is wrong.
        reason: String,
    },
    /// Another writer saved first (a version-checked or create-only write lost).
    #[error("another writer updated {path} first")]
    Conflict {
        /// The object.
        path: String,
    },
}

/// How one source is persisted: its origin and the stores to try, in order. The first store that
/// holds a valid catalog seeds the scan; every store marked `write_back` is updated after it.
#[derive(Debug, Clone)]
pub struct Persisted {
    /// Where the source really is (`s3://bucket/org/skills`, `/abs/dir`); the cache key.
    pub origin: String,
    /// (store, write back after a scan).
    pub stores: Vec<(Arc<dyn CatalogStore>, bool)>,
}

impl Persisted {
    /// A source persisted in `store`, written back.
    pub fn new(origin: impl Into<String>, store: Arc<dyn CatalogStore>) -> Self {
        Self {
            origin: origin.into(),
            stores: vec![(store, true)],
        }
    }

    /// Also try `store` (after the earlier ones); `write_back` says whether scans update it.
    pub fn also(mut self, store: Arc<dyn CatalogStore>, write_back: bool) -> Self {
        self.stores.push((store, write_back));
        self
    }
}

/// What happened to one source's persisted catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheReport {
    /// Index of the store the scan was seeded from, if any held a valid catalog.
    pub seeded_from: Option<usize>,
    /// Skills and skipped files the seed held.
    pub seeded_entries: usize,
    /// Problems met (corrupt files, failed saves), one sentence each.
    pub warnings: Vec<String>,
    /// Stores written after the scan.
    pub saved: usize,
}

/// A discovery and what happened to each source's persisted catalog.
#[derive(Debug, Clone)]
pub struct PersistedDiscovery {
    /// The catalog, equal to what [`discover`](crate::skills::discovery::discover) returns now.
    pub discovery: Discovery,
    /// One per source (default for a source without persistence).
    pub reports: Vec<CacheReport>,
}

/// Discover `sources`, seeding the scan with each source's persisted catalog (`persisted[i]`
/// for `sources[i]`; `None` or a missing entry means not persisted), then save what changed. See
/// the module docs for the contract; the result is what a scan from scratch would give.
pub async fn discover_persisted(
    sources: &[SkillSource],
    persisted: &[Option<Persisted>],
    options: &DiscoveryOptions,
) -> PersistedDiscovery {
    let mut reports = vec![CacheReport::default(); sources.len()];
    let loads = futures::future::join_all(sources.iter().enumerate().map(|(i, source)| {
        let spec = persisted.get(i).and_then(Option::as_ref);
        async move { load_seed(source, spec).await }
    }))
    .await;
    let mut seeds = Vec::new();
    for (i, (seed, report)) in loads.into_iter().enumerate() {
        if let (Some((catalog, digest)), Some(from)) = (seed, report.seeded_from) {
            seeds.push((i, catalog, (digest, from)));
        }
        if let Some(slot) = reports.get_mut(i) {
            *slot = report;
        }
    }
    // The seeds move into one previous catalog and from there into the new one: an entry still
    // valid is moved, never copied (at 61,000 skills each copy held at once was tens of MB of
    // peak memory); only the seeds' digests stay.
    let (previous, olds) = combine(sources, seeds);
    let discovery = rescan_owned(sources, previous, options).await;
    let unchanged = reused_whole(&discovery, &reports);
    let saves = futures::future::join_all(sources.iter().enumerate().map(|(i, _)| {
        let spec = persisted.get(i).and_then(Option::as_ref);
        let unlisted = discovery.stats.unlisted.contains(&i);
        let old = olds
            .iter()
            .find(|(s, ..)| *s == i)
            .map(|(_, digest, from)| (digest.as_str(), *from));
        let catalog = &discovery.catalog;
        async move {
            match spec {
                Some(spec) if unchanged && only_seed_store(spec, old) => (0, Vec::new()),
                Some(spec) if !unlisted => save(catalog, sources, i, spec, old).await,
                _ => (0, Vec::new()),
            }
        }
    }))
    .await;
    for (report, (saved, warnings)) in reports.iter_mut().zip(saves) {
        report.saved = saved;
        report.warnings.extend(warnings);
    }
    for (source, report) in sources.iter().zip(&reports) {
        for warning in &report.warnings {
            tracing::warn!(source = %source.path(), "skills catalog cache: {warning}");
        }
    }
    PersistedDiscovery { discovery, reports }
}

/// Whether `discovery` is exactly its seeds: no file was read, every source was listed, and each
/// source holds as many entries (skills, shadowed skills, skipped files) as its seed did (none
/// for an unseeded source). Entries come only from reads or from reusing a seed entry at the same
/// path and version, so equal counts without reads mean the same entries, the same issues and
/// the same shadowing: each source's encoding equals its seed's. Knowing that saves encoding and
/// hashing the whole catalog to find it out (5% of a 5,000-skill `trellis run` start).
fn reused_whole(discovery: &Discovery, reports: &[CacheReport]) -> bool {
    let stats = &discovery.stats;
    if stats.read + stats.read_on > 0 || stats.unlisted_sources > 0 {
        return false;
    }
    let catalog = &discovery.catalog;
    let mut entries = vec![0usize; reports.len()];
    let sources = catalog
        .skills()
        .iter()
        .chain(catalog.shadowed())
        .map(|s| s.source);
    for source in sources.chain(catalog.skipped().iter().map(|s| s.source)) {
        match entries.get_mut(source) {
            Some(n) => *n += 1,
            None => return false,
        }
    }
    entries
        .iter()
        .zip(reports)
        .all(|(&n, report)| n == report.seeded_entries)
}

/// Whether the only store `spec` writes back to is the one the seed came from (`old`), which
/// holds the seed's bytes already.
fn only_seed_store(spec: &Persisted, old: Option<(&str, usize)>) -> bool {
    old.is_some_and(|(_, from)| {
        spec.stores
            .iter()
            .enumerate()
            .all(|(n, (_, write_back))| !write_back || n == from)
    })
}

/// The first valid persisted catalog of `source`, with its digest, and the report so far.
async fn load_seed(
    source: &SkillSource,
    spec: Option<&Persisted>,
) -> (Option<(SkillCatalog, String)>, CacheReport) {
    let mut report = CacheReport::default();
    let Some(spec) = spec else {
        return (None, report);
    };
    let key = cache_key(&spec.origin);
    for (n, (store, _)) in spec.stores.iter().enumerate() {
        let bytes = match store.load(&key).await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => continue,
            Err(e) => {
                report
                    .warnings
                    .push(format!("cannot load {store:?}: {e}; scanning the source"));
                continue;
            }
        };
        let origin = store.checks_origin().then(|| spec.origin.clone());
        let decoded = tokio::task::spawn_blocking({
            let source = source.clone();
            move || decode(&bytes, &source, origin.as_deref())
        })
        .await
        .map_err(|e| CacheError::Corrupt {
            reason: e.to_string(),
        })
        .and_then(|r| r);
        match decoded {
            Ok(decoded) => {
                report.seeded_from = Some(n);
                report.seeded_entries = decoded.catalog.len()
                    + decoded.catalog.shadowed().len()
                    + decoded.catalog.skipped().len();
                return (Some((decoded.catalog, decoded.digest)), report);
            }
            Err(e) => report
                .warnings
                .push(format!("ignoring {store:?}: {e}; scanning the source")),
        }
    }
    (None, report)
}

/// One previous catalog made of every seed (paths do not overlap: each is below its source),
/// and each seed's (source index, digest, store it came from).
fn combine(
    sources: &[SkillSource],
    seeds: Vec<(usize, SkillCatalog, (String, usize))>,
) -> (SkillCatalog, Vec<(usize, String, usize)>) {
    let mut skills = Vec::new();
    let mut shadowed = Vec::new();
    let mut skipped = Vec::new();
    let mut issues = Vec::new();
    let mut olds = Vec::new();
    for (index, seed, (digest, from)) in seeds {
        let with_source = |mut s: crate::skills::parse::skill::SkillMetadata| {
            s.source = index;
            s
        };
        let (seed_skills, seed_issues, seed_shadowed, seed_skipped) = seed.into_parts();
        skills.extend(seed_skills.into_iter().map(with_source));
        shadowed.extend(seed_shadowed.into_iter().map(with_source));
        skipped.extend(seed_skipped.into_iter().map(|mut s| {
            s.source = index;
            s
        }));
        issues.extend(seed_issues);
        olds.push((index, digest, from));
    }
    let previous = SkillCatalog::from_parts(
        sources.iter().map(|s| s.info().clone()).collect(),
        skills,
        Vec::new(),
        issues,
        shadowed,
        skipped,
    );
    (previous, olds)
}

/// Save source `index`'s part of `catalog` to every write-back store, except the store it was
/// seeded from (`old`: digest, store) when nothing changed.
async fn save(
    catalog: &SkillCatalog,
    sources: &[SkillSource],
    index: usize,
    spec: &Persisted,
    old: Option<(&str, usize)>,
) -> (usize, Vec<String>) {
    let Some((bytes, digest)) = encode(catalog, sources, index, &spec.origin) else {
        return (0, Vec::new());
    };
    let bytes = Bytes::from(bytes);
    let key = cache_key(&spec.origin);
    let mut saved = 0;
    let mut warnings = Vec::new();
    for (n, (store, write_back)) in spec.stores.iter().enumerate() {
        // The seed's store already holds these bytes; other stores may not.
        if !write_back || old == Some((digest.as_str(), n)) {
            continue;
        }
        match store.save(&key, bytes.clone()).await {
            Ok(()) => saved += 1,
            Err(e) => warnings.push(format!("cannot save {store:?}: {e}")),
        }
    }
    (saved, warnings)
}
