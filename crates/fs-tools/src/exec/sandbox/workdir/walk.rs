//! The walk of the copy after the command: what it left, sorted into what to write back and what
//! not, under the write-back's bounds ([`WriteBackLimits`]). Blocking: it runs on the blocking
//! pool, never on an async worker.
//!
//! Sizes come from `lstat` before anything is read, so a file over a bound is never read at all
//! (a sparse file counts its apparent size, what a read would return). Files the command left as
//! they were materialized count toward no bound, and neither do the directories that hold them; a
//! view larger than a bound still works. Every other entry counts one toward
//! [`WriteBackLimits::max_files`], and the walk stops at the first over it. A regular file that
//! does not fit [`WriteBackLimits::max_bytes`], or would grow the view past what the next command
//! may be given ([`ExecFiles::max_files`], [`ExecFiles::max_bytes`]), is named and skipped, and the
//! walk goes on. [`WriteBackLimits::max_time`] stops the walk too.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use rustix::fs::FileType;
use trellis_backend::VirtualPath;
use trellis_backend::path::MAX_PATH_BYTES;
use trellis_backend::sandbox::{ExecFiles, NotWritten, NotWrittenReason, WriteBackLimits};

use super::{Copied, RESERVED, nofollow};

/// What the walk is given.
#[derive(Debug)]
pub(super) struct Plan {
    /// The copy's root (or an overlay's upper layer), opened by [`nofollow::open_root`].
    pub root: Arc<OwnedFd>,
    /// Where the root is in the view: `/` for the copy, the mount point for an overlay's upper
    /// layer.
    pub at: VirtualPath,
    /// The root is an overlay's upper layer: whiteouts are deletions and opaque directories are
    /// noted, instead of refused and walked as any other.
    pub overlay: bool,
    /// Paths not to walk, relative to the root (read-only mounts).
    pub skip: Vec<PathBuf>,
    /// The view, for its rules and bounds.
    pub files: ExecFiles,
    /// What was materialized, by path.
    pub copied: BTreeMap<VirtualPath, Copied>,
    /// Files and bytes the view held, as the materialization counted them.
    pub counted: (usize, u64),
    /// When the write-back must be done.
    pub deadline: Instant,
}

/// Why part of the copy was not walked: while any part is unread nothing may be deleted, since a
/// file the walk did not see may be there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stopped {
    /// A directory or entry could not be read.
    Unreadable,
    /// A bound stopped the walk; the message names it.
    Bound(String),
}

impl Stopped {
    /// Why a file removed from the walked tree (`what`: "the copy", "the upper layer") is not
    /// deleted.
    pub(super) fn not_deleted(&self, what: &str) -> NotWrittenReason {
        match self {
            Stopped::Unreadable => NotWrittenReason::Failed(format!(
                "not deleted: part of {what} could not be read back, so a removed file cannot be told from a moved one"
            )),
            Stopped::Bound(bound) => NotWrittenReason::TooLarge(format!(
                "not deleted: {bound}, so the walk did not reach all of {what}, and a removed file cannot be told from one it did not reach"
            )),
        }
    }
}

/// A new or changed regular file to write back, within every bound.
#[derive(Debug)]
pub(super) struct Changed {
    pub path: VirtualPath,
    /// Its size when the walk saw it: exactly this much is read, or nothing.
    pub size: u64,
}

/// What the walk found.
#[derive(Debug)]
pub(super) struct Walked {
    /// What was materialized (handed back).
    pub copied: BTreeMap<VirtualPath, Copied>,
    /// Files to write back, in the order found.
    pub changed: Vec<Changed>,
    /// What will not be written back, and why.
    pub not_written: Vec<NotWritten>,
    /// Materialized files still there (in some form): not to delete.
    pub present: BTreeSet<VirtualPath>,
    /// Set when part of the copy was not walked.
    pub stopped: Option<Stopped>,
    /// New files the view can still take (for conflict copies).
    pub files_left: usize,
    /// Overlay only: paths the command deleted (whiteouts), each a file or a whole directory of
    /// the lower layer.
    pub whiteouts: Vec<VirtualPath>,
    /// Overlay only: opaque directories, which hide every lower file below them that the upper
    /// layer does not hold.
    pub opaque: Vec<VirtualPath>,
    /// Overlay only: every path of the upper layer that is not a directory or a whiteout (a lower
    /// file there is replaced, not deleted).
    pub upper: BTreeSet<VirtualPath>,
}

/// Running totals against the bounds.
struct Tally {
    limits: WriteBackLimits,
    max_files: usize,
    max_bytes: u64,
    entries: usize,
    bytes: u64,
    view_files: usize,
    view_bytes: u64,
}

impl Tally {
    /// Account for a regular file of `size` bytes that had `old` bytes when materialized (`None`:
    /// new), or say which bound it is over.
    fn take(&mut self, path: &VirtualPath, size: u64, old: Option<u64>) -> Result<(), String> {
        let bytes = self.bytes.saturating_add(size);
        if bytes > self.limits.max_bytes {
            return Err(format!(
                "{path} has {size} bytes; with the files written back before it, that is more than the write-back limit of {} bytes, so it was not read",
                self.limits.max_bytes
            ));
        }
        let view_files = self.view_files + usize::from(old.is_none());
        if view_files > self.max_files {
            return Err(format!(
                "a new file would make the view hold more than {} files, the most a command may be given",
                self.max_files
            ));
        }
        let view_bytes = self
            .view_bytes
            .saturating_add(size.saturating_sub(old.unwrap_or(0)));
        if view_bytes > self.max_bytes {
            return Err(format!(
                "{path} has {size} bytes, which would make the view hold more than {} bytes, the most a command may be given",
                self.max_bytes
            ));
        }
        self.bytes = bytes;
        self.view_files = view_files;
        self.view_bytes = view_bytes;
        Ok(())
    }
}

/// A directory still to walk: the root, or `name` in an open directory.
struct Pending {
    parent: Option<(Arc<OwnedFd>, OsString)>,
    /// Relative to the root.
    relative: PathBuf,
}

/// Walk the copy by directory descriptors without following links, leaving out reserved
/// top-level names and `plan.skip`.
pub(super) fn walk(plan: Plan) -> Walked {
    let Plan {
        root,
        at,
        overlay,
        skip,
        files,
        copied,
        counted,
        deadline,
    } = plan;
    let mut tally = Tally {
        limits: files.write_back,
        max_files: files.max_files,
        max_bytes: files.max_bytes,
        entries: 0,
        bytes: 0,
        view_files: counted.0,
        view_bytes: counted.1,
    };
    let mut out = Walked {
        copied: BTreeMap::new(),
        changed: Vec::new(),
        not_written: Vec::new(),
        present: BTreeSet::new(),
        stopped: None,
        files_left: 0,
        whiteouts: Vec::new(),
        opaque: Vec::new(),
        upper: BTreeSet::new(),
    };
    let base = at.as_str().trim_end_matches('/').to_owned();
    let mut stack = vec![Pending {
        parent: None,
        relative: PathBuf::new(),
    }];
    'walk: while let Some(Pending { parent, relative }) = stack.pop() {
        let dir_name = format!("{base}/{}", relative.to_string_lossy());
        let opened = match &parent {
            None => Ok(Arc::clone(&root)),
            Some((fd, name)) => nofollow::open_dir(fd, name).map(Arc::new),
        };
        let dir = match opened {
            Ok(dir) => dir,
            Err(e) => {
                out.unreadable(dir_name, e.to_string());
                continue;
            }
        };
        if overlay
            && !relative.as_os_str().is_empty()
            && nofollow::is_opaque(&dir)
            && let Ok(path) = VirtualPath::parse(&dir_name)
        {
            out.opaque.push(path);
        }
        let entries = match nofollow::entries(&dir) {
            Ok(entries) => entries,
            Err(e) => {
                out.unreadable(dir_name, e.to_string());
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    out.unreadable(dir_name.clone(), e.to_string());
                    continue;
                }
            };
            let rel = relative.join(&entry.name);
            if at.is_root()
                && relative.as_os_str().is_empty()
                && entry.name.to_str().is_some_and(|n| RESERVED.contains(&n))
            {
                continue;
            }
            if skip.contains(&rel) {
                continue;
            }
            let name = format!("{base}/{}", rel.to_string_lossy());
            if Instant::now() >= deadline {
                out.stop_at(
                    name,
                    format!(
                        "the write-back took longer than its limit of {:?} while walking the copy",
                        tally.limits.max_time
                    ),
                );
                break 'walk;
            }
            let is_dir = entry.kind == FileType::Directory;
            let is_file = entry.kind == FileType::RegularFile;
            let path = rel
                .to_str()
                .and_then(|rel| VirtualPath::parse(&format!("{base}/{rel}")).ok());
            // What was materialized and is as it was counts toward nothing.
            let free = match &path {
                Some(path) if is_dir => holds_copied(&copied, path),
                Some(path) if is_file => copied
                    .get(path)
                    .is_some_and(|c| c.size == entry.size && entry.materialized),
                _ => false,
            };
            if !free {
                tally.entries += 1;
                if tally.entries > tally.limits.max_files {
                    out.stop_at(
                        name,
                        format!(
                            "the command left more than {} new or changed entries, the write-back limit",
                            tally.limits.max_files
                        ),
                    );
                    break 'walk;
                }
            }
            if is_dir {
                if name.len() > MAX_PATH_BYTES {
                    // Nothing below it could be written back: what is there is unknown.
                    out.unreadable(name, format!("the path is longer than {MAX_PATH_BYTES} bytes"));
                    continue;
                }
                stack.push(Pending {
                    parent: Some((Arc::clone(&dir), entry.name)),
                    relative: rel,
                });
                continue;
            }
            let Some(path) = path else {
                if name.len() > MAX_PATH_BYTES {
                    // Perhaps a materialized file moved out of reach: not to be taken for deleted.
                    out.unreadable(name, format!("the path is longer than {MAX_PATH_BYTES} bytes"));
                } else {
                    out.refuse(name, NotWrittenReason::InvalidName);
                }
                continue;
            };
            if copied.contains_key(&path) {
                out.present.insert(path.clone());
            }
            if overlay && entry.whiteout {
                out.whiteouts.push(path);
                continue;
            }
            if overlay {
                out.upper.insert(path.clone());
            }
            if free {
                continue;
            }
            if !is_file {
                out.refuse(path.to_string(), NotWrittenReason::NotARegularFile);
            } else if !files.may_write(&path) {
                out.refuse(path.to_string(), NotWrittenReason::Denied);
            } else {
                let old = copied.get(&path).map(|c| c.size);
                match tally.take(&path, entry.size, old) {
                    Ok(()) => out.changed.push(Changed {
                        path,
                        size: entry.size,
                    }),
                    Err(why) => out.refuse(path.to_string(), NotWrittenReason::TooLarge(why)),
                }
            }
        }
    }
    out.files_left = tally.max_files.saturating_sub(tally.view_files);
    out.copied = copied;
    out
}

impl Walked {
    fn refuse(&mut self, path: String, reason: NotWrittenReason) {
        self.not_written.push(NotWritten { path, reason });
    }

    fn unreadable(&mut self, path: String, error: String) {
        self.stopped.get_or_insert(Stopped::Unreadable);
        self.refuse(
            path,
            NotWrittenReason::Failed(format!(
                "could not be read back ({error}); nothing in it was written back, and nothing the command may have removed was deleted"
            )),
        );
    }

    fn stop_at(&mut self, path: String, bound: String) {
        self.refuse(
            path,
            NotWrittenReason::TooLarge(format!(
                "{bound}; the walk of the copy stopped here, so this and what it had not reached were not written back, and nothing was deleted"
            )),
        );
        self.stopped = Some(Stopped::Bound(bound));
    }
}

/// True when a materialized file is at or below `dir`.
fn holds_copied(copied: &BTreeMap<VirtualPath, Copied>, dir: &VirtualPath) -> bool {
    let prefix = format!("{}/", dir.as_str().trim_end_matches('/'));
    copied
        .range::<str, _>((
            std::ops::Bound::Included(prefix.as_str()),
            std::ops::Bound::Unbounded,
        ))
        .next()
        .is_some_and(|(p, _)| p.as_str().starts_with(&prefix))
}
