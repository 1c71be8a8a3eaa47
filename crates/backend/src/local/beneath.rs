//! Blocking reads for [`FilesystemBackend`](super::FilesystemBackend), batched onto the blocking
//! pool, and the beneath-the-root open ([`Beneath::open_at`]) that listings, writes and deletes
//! build on, with containment enforced by the kernel where it can be.
//!
//! On Linux 5.6+ files are opened with `openat2(root, path, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`:
//! the kernel resolves the path (symlinks included) and refuses anything that would leave the root,
//! atomically, so there is no window between a check and the open. Whatever the kernel will not
//! decide on its own — an absolute symlink, a kernel without `openat2` — falls back to the
//! canonicalize-and-check path, which allows exactly what the rest of the backend allows.

use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::backend::ByteRange;

/// A handle on the root directory for `openat2` lookups.
#[derive(Debug)]
pub(super) struct Beneath {
    root: OwnedFd,
    root_path: PathBuf,
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
            root_path: root.to_path_buf(),
            supported: AtomicBool::new(true),
        })
    }

    /// Open `relative` (no leading `/`) for reading. Non-blocking, so that opening a FIFO returns
    /// at once instead of waiting for a writer; [`read_range`] then refuses anything that is not
    /// a regular file. (Reads of regular files ignore the flag.)
    pub(super) fn open(&self, relative: &str) -> std::io::Result<Opened> {
        self.open_with(relative, OFlags::RDONLY | OFlags::NONBLOCK)
    }

    /// Open `relative` (no leading `/`) as a path only (`O_PATH`), for its metadata.
    ///
    /// Cheaper than [`open`](Self::open) (the kernel checks no read permission and runs no
    /// file-system open; at 5,000 `stat`s per skills rescan this is most of the rescan's system
    /// time), and right for a `stat`: a file the process may not read still has metadata, and a
    /// FIFO is not opened (an `O_RDONLY` open of one blocks until a writer comes).
    pub(super) fn open_path(&self, relative: &str) -> std::io::Result<Opened> {
        self.open_with(relative, OFlags::PATH)
    }

    fn open_with(&self, relative: &str, flags: OFlags) -> std::io::Result<Opened> {
        if relative.is_empty() || !self.supported.load(Ordering::Relaxed) {
            return Ok(Opened::Undecided);
        }
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(&self.root, relative, flags | OFlags::CLOEXEC, Mode::empty(), how) {
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

/// Why [`Beneath::open_at`] gave no descriptor.
#[derive(Debug)]
pub(super) enum AtError {
    /// The path resolves outside the root.
    Escape,
    /// This kernel has no `openat2`: the caller must use its check-then-use path.
    Unsupported,
    /// Any other failure, as the kernel reported it.
    Io(std::io::Error),
}

impl From<Errno> for AtError {
    fn from(e: Errno) -> Self {
        Self::Io(e.into())
    }
}

impl Beneath {
    /// Whether `openat2` is still believed to work here.
    pub(super) fn supported(&self) -> bool {
        self.supported.load(Ordering::Relaxed)
    }

    /// Open `relative` (no leading `/`; empty means the root itself) with `flags`, resolved by the
    /// kernel beneath the root: every component, symlinks included, stays inside it.
    ///
    /// When the kernel refuses a path only because a symlink is absolute (or loops), the path is
    /// canonicalized once, checked against the root, and opened again beneath the root; the
    /// canonical form names no symlink, and if one was swapped in meanwhile the kernel still refuses
    /// to leave the root. So an absolute link that points inside the root keeps working, and no
    /// open ever resolves outside it.
    pub(super) fn open_at(&self, relative: &str, flags: OFlags) -> Result<OwnedFd, AtError> {
        if !self.supported() {
            return Err(AtError::Unsupported);
        }
        let target = if relative.is_empty() { "." } else { relative };
        match self.openat2(target, flags) {
            Err(AtError::Io(e))
                if [Errno::XDEV, Errno::LOOP, Errno::AGAIN]
                    .iter()
                    .any(|n| is(&e, *n)) => {}
            other => return other,
        }
        let real = std::fs::canonicalize(self.root_path.join(relative)).map_err(AtError::Io)?;
        let Ok(inside) = real.strip_prefix(&self.root_path) else {
            return Err(AtError::Escape);
        };
        let inside = if inside.as_os_str().is_empty() {
            Path::new(".")
        } else {
            inside
        };
        match self.openat2(inside, flags) {
            Err(AtError::Io(e)) if is(&e, Errno::XDEV) => Err(AtError::Escape),
            other => other,
        }
    }

    fn openat2(&self, path: impl rustix::path::Arg, flags: OFlags) -> Result<OwnedFd, AtError> {
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(&self.root, path, flags | OFlags::CLOEXEC, Mode::empty(), how) {
            Ok(fd) => Ok(fd),
            Err(e) if e == Errno::NOSYS || e == Errno::PERM => {
                self.supported.store(false, Ordering::Relaxed);
                Err(AtError::Unsupported)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether `e` carries the kernel error `errno`.
pub(super) fn is(e: &std::io::Error, errno: Errno) -> bool {
    e.raw_os_error() == Some(errno.raw_os_error())
}

/// Read `range` of an open file; `Err(IsADirectory)` for a directory.
pub(super) fn read_range(file: File, range: Option<ByteRange>) -> std::io::Result<(Vec<u8>, Metadata)> {
    let meta = file.metadata()?;
    read_range_of(file, meta, range)
}

/// [`read_range`] of a file whose metadata `meta` was just read.
pub(super) fn read_range_of(
    mut file: File,
    meta: Metadata,
    range: Option<ByteRange>,
) -> std::io::Result<(Vec<u8>, Metadata)> {
    if meta.is_dir() {
        return Err(std::io::Error::from(std::io::ErrorKind::IsADirectory));
    }
    if !meta.is_file() {
        // A FIFO, socket or device: its "content" is not a file's, and reading could block.
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a pipe, socket or device)",
        ));
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
