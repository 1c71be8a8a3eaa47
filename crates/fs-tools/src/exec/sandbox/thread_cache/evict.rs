//! Removing keys' directories from a [`ThreadCache`](super::ThreadCache): those unused for a week,
//! and, while all bases together hold more than the cache's byte bound, the least recently used.
//!
//! **What is counted.** A base's size is the byte count its manifest's first line records (the sum
//! of its files' sizes, checked against the entries when the manifest is read for a refresh). A
//! pass reads that line (at most [`HEADER_MAX`] bytes) and the `lock` file's modification time (set
//! by every refresh: the key's last use) of each key: one `open`, one short `read` and one `stat`
//! per key, never a walk of a base. The count is of file contents: directories, inodes and the
//! filesystem's rounding up to blocks are not counted, so the disk used can exceed the bound by
//! about one block per file.
//!
//! **What is never evicted.** A key whose lock a running command holds (refresh to the end of its
//! write-back; the lock is tried, never waited for) and the key the current command is about to use
//! (its lock is held by that refresh, and it is also skipped by name). A busy key's base is still
//! counted, so a pass may end above the bound; the next pass evicts it once it is free.
//!
//! **Crash safety.** A key is evicted by taking its lock, renaming its directory to an
//! `evicted-…` name in the same parent, then removing that. A `kill -9` before the rename leaves
//! the key whole (its lock dies with the process); after it, a partly removed `evicted-…`
//! directory that no refresh ever looks at and that the next pass removes. A key's directory left
//! without a readable manifest (a crash mid-refresh) and not locked holds nothing a refresh would
//! reuse, so a pass removes it whatever the bound. A refresh that finds its key evicted between
//! opening the lock and taking it (the lock it holds is no longer the key's) makes the key anew.

use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::MAGIC;

/// Directories of evicted keys start with this (keys are 64 hex digits).
const EVICTED: &str = "evicted-";

/// The longest first line a manifest has: the magic, 64 hex digits, a space and a `u64`.
pub(super) const HEADER_MAX: u64 = 128;

/// One key as a pass sees it.
struct Key {
    path: std::path::PathBuf,
    /// The lock's modification time: when a refresh last used it.
    last_use: Option<SystemTime>,
    /// What its manifest's first line says its base holds, when it can be read.
    bytes: Option<u64>,
}

/// Remove from the cache at `root`, skipping the key named `keep` and any a command holds:
/// leftovers of interrupted evictions, keys unused for `max_idle`, keys without a readable
/// manifest, then the least recently used keys until all bases together hold at most `max_bytes`.
/// Errors are not reported: a key that cannot be removed now is tried again by the next pass.
pub(super) fn evict(root: &Path, max_idle: Duration, max_bytes: u64, keep: Option<&str>) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    let now = SystemTime::now();
    let mut keys = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if name.starts_with(EVICTED) {
            // An eviction interrupted mid-removal, or running now (removing twice is harmless).
            let _ = super::remove_all(&path);
            continue;
        }
        if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let last_use = fs::metadata(path.join("lock")).and_then(|m| m.modified()).ok();
        let idle = last_use
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|d| d > max_idle);
        let key = Key {
            last_use,
            bytes: manifest_bytes(&path.join("manifest")),
            path,
        };
        if keep == Some(name) {
            keys.push(key);
        } else if idle || key.bytes.is_none() {
            // Unused for too long, or nothing reusable in it: removed whatever the bound.
            if !try_evict(&key.path) {
                keys.push(key);
            }
        } else {
            keys.push(key);
        }
    }
    let mut total: u64 = keys.iter().filter_map(|k| k.bytes).fold(0, u64::saturating_add);
    if total <= max_bytes {
        return;
    }
    // Least recently used first; a key with no lock file has never been used by a whole refresh.
    keys.sort_by_key(|k| k.last_use);
    for key in keys {
        if total <= max_bytes {
            break;
        }
        let name = key.path.file_name().and_then(|n| n.to_str());
        if name.is_some_and(|n| keep == Some(n)) {
            continue;
        }
        if try_evict(&key.path) {
            total = total.saturating_sub(key.bytes.unwrap_or(0));
        }
    }
    if total > max_bytes {
        tracing::debug!(
            total,
            max_bytes,
            "thread cache over its bound: the rest is in use"
        );
    }
}

/// The byte count on the first line of the manifest at `path`, if it has one.
fn manifest_bytes(path: &Path) -> Option<u64> {
    let mut head = Vec::new();
    fs::File::open(path)
        .ok()?
        .take(HEADER_MAX)
        .read_to_end(&mut head)
        .ok()?;
    let line = head.split(|b| *b == b'\n').next()?;
    let rest = std::str::from_utf8(line).ok()?.strip_prefix(MAGIC)?;
    let (_sum, bytes) = rest.split_once(' ')?;
    bytes.parse().ok()
}

/// Evict the key at `dir` unless a command holds it: lock, rename away, remove.
fn try_evict(dir: &Path) -> bool {
    let lock_path = dir.join("lock");
    let Ok(lock) = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
    else {
        return false;
    };
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return false;
    }
    // Another pass may have evicted it, and a refresh made it anew, since it was listed.
    if !holds(&lock, &lock_path) {
        return false;
    }
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let away = dir.with_file_name(format!("{EVICTED}{name}-{}-{nanos}", std::process::id()));
    if fs::rename(dir, &away).is_err() {
        return false;
    }
    if let Err(e) = super::remove_all(&away) {
        tracing::debug!(dir = %away.display(), error = %e, "left for the next pass");
    }
    true
}

/// Whether the open `lock` is still the file at `path` (not one renamed away since it was opened).
pub(super) fn holds(lock: &fs::File, path: &Path) -> bool {
    match (lock.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}
