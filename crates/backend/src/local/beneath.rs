//! Blocking reads and listings for [`FilesystemBackend`](super::FilesystemBackend), batched onto the
//! blocking pool, with containment enforced by the kernel where it can be.
//!
//! On Linux 5.6+ files are opened with `openat2(root, path, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`:
//! the kernel resolves the path (symlinks included) and refuses anything that would leave the root,
//! atomically, so there is no window between a check and the open. Whatever the kernel will not
//! decide on its own — an absolute symlink, a kernel without `openat2` — falls back to the
//! canonicalize-and-check path, which allows exactly what the rest of the backend allows.

use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::backend::ByteRange;

/// A handle on the root directory for `openat2` lookups.
#[derive(Debug)]
pub(super) struct Beneath {
    root: OwnedFd,
    supported: AtomicBool,
}

/// What a fast-path open decided.
pub(super) enum Opened {
    /// The file, opened inside the root.
    File(File),
    /// Not decided here: use the slow path.
    Undecided,
}

impl Beneath {
    /// Open the root for lookups; `None` when that fails (the slow path then serves everything).
    pub(super) fn new(root: &Path) -> Option<Self> {
        let fd = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        Some(Self {
            root: fd,
            supported: AtomicBool::new(true),
        })
    }

    /// Open `relative` (no leading `/`) for reading.
    pub(super) fn open(&self, relative: &str) -> std::io::Result<Opened> {
        if relative.is_empty() || !self.supported.load(Ordering::Relaxed) {
            return Ok(Opened::Undecided);
        }
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(
            &self.root,
            relative,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
            how,
        ) {
            Ok(fd) => Ok(Opened::File(File::from(fd))),
            Err(e) if e == Errno::NOSYS || e == Errno::PERM => {
                // No openat2 here (old kernel, or a seccomp filter): stop trying.
                self.supported.store(false, Ordering::Relaxed);
                Ok(Opened::Undecided)
            }
            // An escape, an absolute symlink, a loop or a transient refusal: let the slow path judge.
            Err(e) if e == Errno::XDEV || e == Errno::LOOP || e == Errno::AGAIN => Ok(Opened::Undecided),
            Err(e) => Err(e.into()),
        }
    }
}

/// Read `range` of an open file; `Err(IsADirectory)` for a directory.
pub(super) fn read_range(mut file: File, range: Option<ByteRange>) -> std::io::Result<(Vec<u8>, Metadata)> {
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(std::io::Error::from(std::io::ErrorKind::IsADirectory));
    }
    let size = meta.len();
    let span = range.map(|r| r.clamp(size)).unwrap_or(0..size);
    if span.start > 0 {
        file.seek(SeekFrom::Start(span.start))?;
    }
    let mut buf = Vec::with_capacity((span.end - span.start) as usize);
    file.take(span.end - span.start).read_to_end(&mut buf)?;
    Ok((buf, meta))
}
