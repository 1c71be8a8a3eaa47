//! Default implementations of the recursive operations (`list_files`, `glob`, `grep`) on top of the
//! core ones, shared by every backend that does not override them.

use futures::StreamExt;
use memchr::memmem;

use crate::backend::{Backend, Entry, FileListing, GlobOutput, GrepMatch, GrepOutput, GrepQuery};
use crate::error::{BackendError, Result};
use crate::glob::GlobPattern;
use crate::path::VirtualPath;

/// How many directories a walk lists at once.
const WALK_CONCURRENCY: usize = 16;
/// How many files grep reads per batch (bounds memory).
const GREP_BATCH: usize = 64;

/// Walk `base` with `ls`, one level at a time, listing each level's directories concurrently.
pub(crate) async fn walk_with_ls<B: Backend + ?Sized>(
    backend: &B,
    base: &VirtualPath,
    limit: usize,
) -> Result<FileListing> {
    let top = match backend.ls(base).await {
        Ok(entries) => entries,
        Err(BackendError::NotFound { .. }) => return Ok(FileListing::default()),
        Err(BackendError::NotADirectory { .. }) => {
            let entry = backend.stat(base).await?;
            return Ok(FileListing {
                files: vec![entry],
                truncated: false,
            });
        }
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    let mut level = top;
    loop {
        let mut dirs = Vec::new();
        for entry in level {
            if entry.is_dir() {
                dirs.push(entry.path);
            } else {
                files.push(entry);
            }
        }
        if files.len() >= limit {
            files.sort_by(|a, b| a.path.cmp(&b.path));
            files.truncate(limit);
            return Ok(FileListing {
                files,
                truncated: true,
            });
        }
        if dirs.is_empty() {
            break;
        }
        let listed: Vec<Result<Vec<Entry>>> = futures::stream::iter(dirs)
            .map(|d| async move { backend.ls(&d).await })
            .buffer_unordered(WALK_CONCURRENCY)
            .collect()
            .await;
        level = Vec::new();
        for result in listed {
            match result {
                Ok(entries) => level.extend(entries),
                // A directory removed while we walk is simply gone.
                Err(BackendError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(FileListing {
        files,
        truncated: false,
    })
}

/// The path of `file` relative to `base` for glob matching; a file `base` is matched by its name.
pub(crate) fn relative_for_match<'a>(file: &'a VirtualPath, base: &'a VirtualPath) -> &'a str {
    match file.relative_to(base) {
        Some("") | None => file.file_name().unwrap_or(""),
        Some(rel) => rel,
    }
}

pub(crate) fn compile_glob(pattern: &str) -> Result<GlobPattern> {
    GlobPattern::new(pattern).map_err(|e| BackendError::InvalidPath {
        path: pattern.to_owned(),
        reason: format!("invalid glob pattern: {e}"),
    })
}

/// Glob by filtering [`Backend::list_files`].
pub(crate) async fn glob_via_listing<B: Backend + ?Sized>(
    backend: &B,
    pattern: &str,
    base: &VirtualPath,
    limit: usize,
) -> Result<GlobOutput> {
    let glob = compile_glob(pattern)?;
    let listing = backend
        .list_files(base, crate::backend::DEFAULT_LIST_LIMIT)
        .await?;
    let mut matches: Vec<Entry> = listing
        .files
        .into_iter()
        .filter(|f| glob.matches(relative_for_match(&f.path, base)))
        .collect();
    let truncated = listing.truncated || matches.len() > limit;
    matches.truncate(limit);
    Ok(GlobOutput { matches, truncated })
}

/// Grep by listing, filtering and reading files in batches with [`Backend::read_many`]. Files the
/// query's path filter does not allow are dropped from the listing, before anything is read.
pub(crate) async fn grep_via_reads<B: Backend + ?Sized>(
    backend: &B,
    query: &GrepQuery,
) -> Result<GrepOutput> {
    if query.literal.is_empty() {
        return Err(BackendError::InvalidPath {
            path: query.base.to_string(),
            reason: "grep needs a non-empty search string".to_owned(),
        });
    }
    let file_glob = query.file_glob.as_deref().map(compile_glob).transpose()?;
    let listing = backend
        .list_files(&query.base, crate::backend::DEFAULT_LIST_LIMIT)
        .await?;
    let mut out = GrepOutput {
        truncated: listing.truncated,
        ..GrepOutput::default()
    };
    let mut candidates = Vec::new();
    for file in listing.files {
        if query.path_filter.as_ref().is_some_and(|f| !f.allows(&file.path)) {
            continue;
        }
        if file_glob
            .as_ref()
            .is_some_and(|g| !g.matches(relative_for_match(&file.path, &query.base)))
        {
            continue;
        }
        if file.size > query.max_file_bytes {
            out.skipped.push(file.path);
            continue;
        }
        candidates.push(file.path);
    }
    let finder = memmem::Finder::new(query.literal.as_bytes());
    for batch in candidates.chunks(GREP_BATCH) {
        let reads = backend.read_many(batch, None).await;
        for (path, read) in batch.iter().zip(reads) {
            let bytes = match read {
                Ok(r) => r.bytes,
                Err(BackendError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            // Not text: not UTF-8, or holding a NUL byte (as `read_file` and ripgrep judge it).
            let Ok(text) = std::str::from_utf8(&bytes) else {
                out.skipped.push(path.clone());
                continue;
            };
            if memchr::memchr(0, text.as_bytes()).is_some() {
                out.skipped.push(path.clone());
                continue;
            }
            if finder.find(text.as_bytes()).is_none() {
                continue;
            }
            for (index, line) in text.split('\n').enumerate() {
                if finder.find(line.as_bytes()).is_none() {
                    continue;
                }
                if out.matches.len() >= query.max_matches {
                    out.truncated = true;
                    return Ok(out);
                }
                out.matches.push(GrepMatch {
                    path: path.clone(),
                    line: index as u64 + 1,
                    text: line.strip_suffix('\r').unwrap_or(line).to_owned(),
                });
            }
        }
    }
    Ok(out)
}
