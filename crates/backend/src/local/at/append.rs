//! Appends in place beneath the root ([`append`]): a file changed where it is, under a lock on
//! the file, with no file created or freed and no directory changed.

use std::fs::File;
use std::time::Duration;

use rustix::fs::{FileType, OFlags, Stat};
use rustix::io::Errno;

use super::{Stop, finish, io, kind, modified, relative, stop, version, write};
use crate::backend::{AppendMode, Version, WriteMode};
use crate::error::{BackendError, ConflictKind, Result};
use crate::local::beneath::{AtError, Beneath, is};
use crate::path::VirtualPath;

/// Add `data` at the end of `path` under `mode`; the caller holds the per-path lock.
///
/// `CreateNew` is a create-only write (atomic: a temporary file linked into place). `IfVersion`
/// opens the file beneath the root, takes an exclusive advisory lock on it (`flock`: it
/// serializes appends between processes, as the directory lock does writes), checks its version,
/// cuts it to `keep` bytes when it is longer, and writes `data` there. When the file ends with
/// the same size and modification time as before (the same clock tick after a cut), its time is
/// moved a microsecond past the old one, so the version always changes. No file is created or
/// freed, and no directory changes.
pub(in crate::local) fn append(
    beneath: &Beneath,
    path: &VirtualPath,
    data: &[u8],
    mode: &AppendMode,
) -> Option<Result<Version>> {
    match mode {
        AppendMode::CreateNew => write(beneath, path, data, &WriteMode::CreateNew),
        AppendMode::IfVersion { version: want, keep } => {
            finish(append_inner(beneath, path, data, want, *keep))
        }
    }
}

fn append_inner(
    beneath: &Beneath,
    path: &VirtualPath,
    data: &[u8],
    want: &Version,
    keep: u64,
) -> std::result::Result<Version, Stop> {
    let mismatch = || {
        Stop::Failed(BackendError::Conflict {
            path: path.to_string(),
            kind: ConflictKind::VersionMismatch,
        })
    };
    let fd = match beneath.open_at(relative(path), OFlags::WRONLY | OFlags::CLOEXEC) {
        Ok(fd) => fd,
        Err(AtError::Io(e)) if is(&e, Errno::NOENT) => return Err(mismatch()),
        Err(AtError::Io(e)) if is(&e, Errno::ISDIR) => {
            return Err(Stop::Failed(BackendError::IsADirectory {
                path: path.to_string(),
            }));
        }
        Err(e) => return Err(stop(path, e)),
    };
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive).map_err(|e| io(path, e))?;
    let before = rustix::fs::fstat(&fd).map_err(|e| io(path, e))?;
    if kind(&before) != FileType::RegularFile {
        return Err(Stop::Failed(BackendError::IsADirectory {
            path: path.to_string(),
        }));
    }
    if version(&before) != *want || keep > before.st_size as u64 {
        return Err(mismatch());
    }
    let file = File::from(fd);
    let written = (|| -> std::io::Result<Stat> {
        if keep < before.st_size as u64 {
            file.set_len(keep)?;
        }
        std::os::unix::fs::FileExt::write_all_at(&file, data, keep)?;
        let mut after = rustix::fs::fstat(&file)?;
        if version(&after) == version(&before)
            && let Some(previous) = modified(&before)
        {
            file.set_modified(previous + Duration::from_micros(1))?;
            after = rustix::fs::fstat(&file)?;
        }
        Ok(after)
    })()
    .map_err(|e| io(path, e))?;
    // Closing the file releases the lock.
    Ok(version(&written))
}
