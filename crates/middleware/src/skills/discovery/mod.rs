//! Discovery: from ordered [`SkillSource`]s to a [`SkillCatalog`], reading as little as possible.
//!
//! [`discover`]:
//! 1. `ls` every source (concurrently). Each direct subdirectory is a candidate `<dir>/SKILL.md`.
//!    A source that cannot be listed becomes a source warning (shown to the model, escaped); a
//!    source that does not exist is silently empty.
//! 2. Read the candidates with `read_many`, one batched call per backend, only the first
//!    [`DiscoveryOptions::prefix_bytes`] of each file where the backend serves ranges natively. The
//!    batch is split in chunks of [`DiscoveryOptions::chunk`] paths that stream through a reader task,
//!    so memory stays bounded (20,000 × 4 KiB would otherwise be 80 MB) and parsing overlaps reading.
//! 3. Files whose frontmatter does not close within the prefix are read again, up to the
//!    frontmatter limit, in one more `read_many`. No file is ever read whole: a 10 MB `SKILL.md`
//!    costs one 4 KiB read plus its size from the same response.
//! 4. Each file is parsed and validated; per-file failures are logged and recorded as issues
//!    (tier 2), a missing `SKILL.md` is silently not a skill (tier 1).
//! 5. Sources are merged in order: a later source overrides an earlier one by name. The catalog is
//!    ordered by source, then name.
//!
//! [`rescan`] does the same against a previous catalog, but first learns every `SKILL.md`'s version
//! tag cheaply and re-reads only the files whose tag changed (or that are new, or have no tag). On
//! object stores (a flat key space) the tags come from one paged recursive listing of the source;
//! elsewhere from `ls` of the source plus one concurrent `stat` per skill directory.

pub(crate) mod issue_log;
pub mod persist;
pub(crate) mod previous;
pub(crate) mod ranged_listing;
pub(crate) mod source;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{
    Backend, BackendError, ByteRange, DEFAULT_LIST_LIMIT, ReadOutput, Version, VirtualPath,
};
use futures::StreamExt;

use crate::skills::catalog::{SkillCatalog, SkippedFile};
use crate::skills::discovery::previous::PreviousIndex;
use crate::skills::discovery::ranged_listing::{list_in_ranges, split_points};
use crate::skills::discovery::source::SkillSource;
use crate::skills::parse::frontmatter::{self, MAX_FRONTMATTER_BYTES, Split};
use crate::skills::parse::skill::{IssueCode, SkillIssue, SkillMetadata};
use crate::skills::parse::validate;
use crate::skills::{MAX_SKILL_FILE_BYTES, SKILL_FILE};

/// Bytes read from the top of each `SKILL.md` in the first pass.
pub const DEFAULT_PREFIX_BYTES: u64 = 4096;
/// Paths per `read_many` chunk.
pub const DEFAULT_READ_CHUNK: usize = 256;

/// How discovery reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryOptions {
    /// Bytes read from the top of each file in the first pass (default 4 KiB).
    pub prefix_bytes: u64,
    /// Paths per `read_many` call (default 256); two calls are in flight at once, so memory for
    /// file prefixes stays near `4 × chunk × prefix_bytes` (4 MiB by default) at any library size.
    pub chunk: usize,
}

impl Default for DiscoveryOptions {
    fn default() -> Self {
        Self {
            prefix_bytes: DEFAULT_PREFIX_BYTES,
            chunk: DEFAULT_READ_CHUNK,
        }
    }
}

/// What a scan did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveryStats {
    /// Sources scanned.
    pub sources: usize,
    /// Sources that could not be listed.
    pub unlisted_sources: usize,
    /// Their indexes, in order (a persisted catalog of such a source is kept, not replaced).
    pub unlisted: Vec<usize>,
    /// Candidate `SKILL.md` paths (subdirectories of the sources).
    pub candidates: usize,
    /// `SKILL.md` files read in this scan (first pass).
    pub read: usize,
    /// Files read a second time because their frontmatter was longer than the prefix.
    pub read_on: usize,
    /// Files not read because their version tag had not changed (rescan only).
    pub reused: usize,
    /// Skills in the catalog.
    pub loaded: usize,
    /// Files skipped (tier 2).
    pub skipped: usize,
    /// Wall time of the scan.
    pub elapsed: Duration,
}

/// A catalog and how it was made.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// The catalog.
    pub catalog: SkillCatalog,
    /// What the scan did.
    pub stats: DiscoveryStats,
}

/// Scan every source from scratch.
pub async fn discover(sources: &[SkillSource], options: &DiscoveryOptions) -> Discovery {
    scan(sources, None, options).await
}

/// Scan every source again, re-reading only the `SKILL.md` files whose version tag differs from the
/// one `previous` recorded (new files and files without tags are read too). The result equals what
/// [`discover`] would return, as long as version tags change whenever a file does.
pub async fn rescan(
    sources: &[SkillSource],
    previous: &SkillCatalog,
    options: &DiscoveryOptions,
) -> Discovery {
    scan(sources, Some(PreviousIndex::borrowed(previous)), options).await
}

/// [`rescan`], consuming `previous`: entries still valid move into the result instead of being
/// copied. For a previous catalog nothing else holds (one decoded from a persisted cache), this
/// keeps one copy of the library in memory instead of two (at 61,000 skills of the registry
/// shape, about 60 MB less at the peak) and saves a clone of every reused entry.
pub async fn rescan_owned(
    sources: &[SkillSource],
    previous: SkillCatalog,
    options: &DiscoveryOptions,
) -> Discovery {
    scan(sources, Some(PreviousIndex::owned(previous)), options).await
}

#[derive(Debug, Clone)]
pub(in crate::skills) struct Candidate {
    pub(in crate::skills) source: usize,
    pub(in crate::skills) path: VirtualPath,
    /// The version seen by a listing or stat (rescan), before reading.
    pub(in crate::skills) listed: Option<Version>,
}

#[derive(Debug)]
pub(in crate::skills) enum Outcome {
    NotASkill,
    Loaded(SkillMetadata, Vec<SkillIssue>),
    Skipped(SkippedFile, Vec<SkillIssue>),
}

async fn scan(
    sources: &[SkillSource],
    previous: Option<PreviousIndex<'_>>,
    options: &DiscoveryOptions,
) -> Discovery {
    let started = Instant::now();
    let mut stats = DiscoveryStats {
        sources: sources.len(),
        ..DiscoveryStats::default()
    };
    let with_versions = previous.is_some();
    let splits: Vec<Vec<VirtualPath>> = sources
        .iter()
        .map(|s| match &previous {
            Some(p) if !s.backend().capabilities().strict_hierarchy => split_points(p.paths_below(s.path())),
            _ => Vec::new(),
        })
        .collect();
    let listings = futures::future::join_all(sources.iter().zip(&splits).enumerate().map(
        |(i, (s, splits))| async move {
            if with_versions {
                list_with_versions(i, s, splits).await
            } else {
                list_dirs(i, s).await
            }
        },
    ))
    .await;
    let mut warnings = Vec::new();
    let mut candidates = Vec::new();
    for (index, listing) in listings.into_iter().enumerate() {
        match listing {
            Ok(found) => candidates.extend(found),
            Err(warning) => {
                stats.unlisted_sources += 1;
                stats.unlisted.push(index);
                warnings.push(warning);
            }
        }
    }
    stats.candidates = candidates.len();

    let mut outcomes: Vec<(usize, Outcome)> = Vec::with_capacity(candidates.len());
    let mut to_read = Vec::new();
    let mut reusable = previous;
    for candidate in candidates {
        match reusable.as_mut().and_then(|p| p.reuse(&candidate)) {
            Some(outcome) => {
                stats.reused += 1;
                outcomes.push((candidate.source, outcome));
            }
            None => to_read.push(candidate),
        }
    }
    stats.read = to_read.len();
    // What was not reused is gone from the sources or changed: let it go before reading.
    drop(reusable);

    let read_on = read_batch(
        sources,
        to_read,
        Pass::Prefix(options.prefix_bytes),
        options,
        &mut outcomes,
    )
    .await;
    stats.read_on = read_on.len();
    let left = read_batch(sources, read_on, Pass::Frontmatter, options, &mut outcomes).await;
    debug_assert!(left.is_empty(), "the second pass settles every file");

    let catalog = merge(sources, outcomes, warnings);
    stats.loaded = catalog.len();
    stats.skipped = catalog.skipped().len();
    stats.elapsed = started.elapsed();
    Discovery { catalog, stats }
}

fn source_warning(source: &SkillSource, err: &BackendError) -> String {
    let warning = format!(
        "cannot list skill source `{}` ({}): {err}",
        source.path(),
        source.label()
    );
    tracing::warn!(source = %source.path(), error = %err, "cannot list skill source");
    warning
}

/// Direct subdirectories of a source, as candidate `SKILL.md` paths.
async fn list_dirs(index: usize, source: &SkillSource) -> Result<Vec<Candidate>, String> {
    match source.backend().ls(source.path()).await {
        Ok(entries) => Ok(entries
            .into_iter()
            .filter(|e| e.is_dir())
            .filter_map(|e| e.path.join(SKILL_FILE).ok())
            .map(|path| Candidate {
                source: index,
                path,
                listed: None,
            })
            .collect()),
        Err(BackendError::NotFound { .. }) => {
            tracing::debug!(source = %source.path(), "skill source does not exist");
            Ok(Vec::new())
        }
        Err(err) => Err(source_warning(source, &err)),
    }
}

/// Candidates with their current version tags, as cheaply as the backend allows.
async fn list_with_versions(
    index: usize,
    source: &SkillSource,
    splits: &[VirtualPath],
) -> Result<Vec<Candidate>, String> {
    let backend = source.backend();
    // A flat key space: one recursive listing, in ranges at once where a previous catalog says
    // the source is large (see `ranged_listing`).
    let listing = if backend.capabilities().strict_hierarchy {
        None
    } else {
        let ranged = match splits {
            [] => None,
            _ => list_in_ranges(backend.as_ref(), source.path(), splits, DEFAULT_LIST_LIMIT).await,
        };
        Some(match ranged {
            Some(listing) => listing,
            None => backend.list_files(source.path(), DEFAULT_LIST_LIMIT).await,
        })
    };
    // A listing that holds the source itself means the source is a file: `ls` reports that.
    if let Some(Ok(listing)) = listing
        && !listing.truncated
        && !listing.files.iter().any(|f| &f.path == source.path())
    {
        let mut found: Vec<Candidate> = Vec::new();
        for file in listing.files {
            let Some(rel) = file.path.relative_to(source.path()) else {
                continue;
            };
            let mut parts = rel.split('/');
            let (Some(dir), Some(SKILL_FILE)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(path) = source.path().join(dir).and_then(|d| d.join(SKILL_FILE)) else {
                continue;
            };
            // `<dir>/SKILL.md/...` means SKILL.md is a "directory": read it to report that.
            let listed = if parts.next().is_none() {
                file.version
            } else {
                None
            };
            if found.last().is_some_and(|c| c.path == path) {
                continue;
            }
            found.push(Candidate {
                source: index,
                path,
                listed,
            });
        }
        return Ok(found);
    }
    let dirs = list_dirs(index, source).await?;
    let paths: Vec<VirtualPath> = dirs.iter().map(|c| c.path.clone()).collect();
    let stats = backend.stat_many(&paths).await;
    Ok(dirs
        .into_iter()
        .zip(stats)
        .filter_map(|(c, stat)| match stat {
            Ok(entry) if !entry.is_dir() => Some(Candidate {
                listed: entry.version,
                ..c
            }),
            Err(BackendError::NotFound { .. }) => None,
            // A directory or an error: read it, which reports the problem.
            _ => Some(c),
        })
        .collect())
}

#[derive(Debug, Clone, Copy)]
enum Pass {
    /// The first pass: the top `n` bytes.
    Prefix(u64),
    /// The second pass: as much as a frontmatter may take.
    Frontmatter,
}

/// Read `candidates` (grouped per backend, chunked, streamed), push every settled outcome and
/// return the candidates that need the second pass.
async fn read_batch(
    sources: &[SkillSource],
    candidates: Vec<Candidate>,
    pass: Pass,
    options: &DiscoveryOptions,
    outcomes: &mut Vec<(usize, Outcome)>,
) -> Vec<Candidate> {
    let mut groups: Vec<(Arc<dyn Backend>, Vec<Candidate>)> = Vec::new();
    for candidate in candidates {
        let Some(source) = sources.get(candidate.source) else {
            continue;
        };
        match groups.iter_mut().find(|(b, _)| Arc::ptr_eq(b, source.backend())) {
            Some((_, group)) => group.push(candidate),
            None => groups.push((source.backend().clone(), vec![candidate])),
        }
    }
    let frontmatter_span = (MAX_FRONTMATTER_BYTES + 3) as u64;
    let mut readers = Vec::new();
    for (backend, group) in groups {
        let range = match pass {
            Pass::Prefix(n) if backend.capabilities().ranged_reads => ByteRange::prefix(n.max(64)),
            // Without native ranges a read costs the whole file anyway: keep what a frontmatter
            // can use, in one pass.
            _ => ByteRange::prefix(frontmatter_span),
        };
        let last_pass = range.end == Some(frontmatter_span);
        readers.push((
            last_pass,
            spawn_reader(backend, group, range, options.chunk.max(1)),
        ));
    }
    let mut read_on = Vec::new();
    for (last_pass, mut reader) in readers {
        while let Some(chunk) = reader.next().await {
            for (candidate, result) in chunk {
                match look(&candidate, result, last_pass) {
                    Some(outcome) => outcomes.push((candidate.source, outcome)),
                    None => read_on.push(candidate),
                }
            }
        }
    }
    read_on
}

type Chunk = Vec<(Candidate, Result<ReadOutput, BackendError>)>;

/// Stream `read_many` results chunk by chunk. Inside a tokio runtime the reads run on their own task,
/// one chunk ahead of the consumer, so parsing overlaps reading.
fn spawn_reader(
    backend: Arc<dyn Backend>,
    candidates: Vec<Candidate>,
    range: ByteRange,
    chunk: usize,
) -> futures::stream::BoxStream<'static, Chunk> {
    let mut chunks: Vec<Vec<Candidate>> = Vec::with_capacity(candidates.len().div_ceil(chunk));
    let mut candidates = candidates.into_iter();
    loop {
        let next: Vec<Candidate> = candidates.by_ref().take(chunk).collect();
        if next.is_empty() {
            break;
        }
        chunks.push(next);
    }
    let read = move |group: Vec<Candidate>| {
        let backend = backend.clone();
        async move {
            let paths: Vec<VirtualPath> = group.iter().map(|c| c.path.clone()).collect();
            let results = backend.read_many(&paths, Some(range)).await;
            group.into_iter().zip(results).collect::<Chunk>()
        }
    };
    // Two chunks in flight, so a chunk's last reads never leave the pipeline idle.
    let stream = futures::stream::iter(chunks).map(read).buffered(2);
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Chunk>(1);
            handle.spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(chunk) = stream.next().await {
                    if tx.send(chunk).await.is_err() {
                        break;
                    }
                }
            });
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) }).boxed()
        }
        Err(_) => stream.boxed(),
    }
}

fn skipped(candidate: &Candidate, version: Option<Version>, code: IssueCode, message: String) -> Outcome {
    Outcome::Skipped(
        SkippedFile {
            path: candidate.path.clone(),
            source: candidate.source,
            version,
        },
        vec![SkillIssue::new(candidate.path.clone(), code, message)],
    )
}

/// Settle one read, or `None` when the frontmatter needs more bytes than were read.
fn look(candidate: &Candidate, result: Result<ReadOutput, BackendError>, last_pass: bool) -> Option<Outcome> {
    let out = match result {
        Ok(out) => out,
        Err(BackendError::NotFound { .. }) => return Some(Outcome::NotASkill),
        Err(BackendError::IsADirectory { .. }) => {
            return Some(skipped(
                candidate,
                candidate.listed.clone(),
                IssueCode::SkillMdIsDirectory,
                format!("{SKILL_FILE} is a directory"),
            ));
        }
        Err(err) => {
            return Some(skipped(
                candidate,
                candidate.listed.clone(),
                IssueCode::Unreadable,
                format!("cannot read: {err}"),
            ));
        }
    };
    let version = candidate.listed.clone().or(out.version.clone());
    if out.size > MAX_SKILL_FILE_BYTES {
        return Some(skipped(
            candidate,
            version,
            IssueCode::FileTooLarge,
            format!(
                "the file is {} bytes, over the limit of {MAX_SKILL_FILE_BYTES}",
                out.size
            ),
        ));
    }
    let complete = out.is_complete();
    let result = match frontmatter::split(&out.bytes, complete) {
        Split::Closed { yaml, .. } => {
            let yaml = out.bytes.get(yaml.0..yaml.1).unwrap_or_default();
            frontmatter::parse(yaml)
        }
        Split::Missing => Err(frontmatter::FrontmatterError::Missing),
        Split::Unclosed if complete => Err(frontmatter::FrontmatterError::Unclosed),
        Split::Unclosed if last_pass => Err(frontmatter::FrontmatterError::TooLarge),
        Split::Unclosed => return None,
    };
    let validated = match result {
        Ok(fm) => validate::validate(&fm, &candidate.path),
        Err(err) => {
            let issue = validate::frontmatter_issue(&candidate.path, &err);
            return Some(skipped(candidate, version, issue.code, issue.message));
        }
    };
    Some(match validated.skill {
        Some(skill) => Outcome::Loaded(
            SkillMetadata {
                source: candidate.source,
                version,
                ..skill
            },
            validated.issues,
        ),
        None => Outcome::Skipped(
            SkippedFile {
                path: candidate.path.clone(),
                source: candidate.source,
                version,
            },
            validated.issues,
        ),
    })
}

/// Merge per-file outcomes: later sources override earlier ones by name; within one source the
/// later path wins (with a warning).
fn merge(sources: &[SkillSource], outcomes: Vec<(usize, Outcome)>, warnings: Vec<String>) -> SkillCatalog {
    let loaded_count = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Loaded(..)))
        .count();
    let mut loaded = Vec::with_capacity(loaded_count);
    let mut skipped = Vec::new();
    let mut issues = Vec::new();
    for (_, outcome) in outcomes {
        match outcome {
            Outcome::NotASkill => {}
            Outcome::Loaded(skill, found) => {
                loaded.push(skill);
                issues.extend(found);
            }
            Outcome::Skipped(file, found) => {
                skipped.push(file);
                issues.extend(found);
            }
        }
    }
    // Same names next to each other, the winner first: the highest source, then the latest path.
    loaded.sort_unstable_by(|a, b| {
        a.name
            .cmp(&b.name)
            .then(b.source.cmp(&a.source))
            .then(b.path.cmp(&a.path))
    });
    let mut shadowed = Vec::new();
    loaded.dedup_by(|loser, winner| {
        if loser.name != winner.name {
            return false;
        }
        if loser.source == winner.source {
            issues.push(SkillIssue::new(
                loser.path.clone(),
                IssueCode::DuplicateName,
                format!(
                    "skill name {} is also used by {}, which wins",
                    validate::quote(&loser.name),
                    winner.path
                ),
            ));
        } else {
            tracing::debug!(name = %winner.name, winner = %winner.path, loser = %loser.path, "skill overridden by a later source");
        }
        shadowed.push(loser.clone());
        true
    });
    let winners = loaded;
    issues.sort_by(|a, b| a.path.cmp(&b.path));
    crate::skills::discovery::issue_log::log_issues(sources, &issues);
    SkillCatalog::from_parts(
        sources.iter().map(|s| s.info().clone()).collect(),
        winners,
        warnings,
        issues,
        shadowed,
        skipped,
    )
}
