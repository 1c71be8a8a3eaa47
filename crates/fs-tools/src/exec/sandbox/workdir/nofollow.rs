//! Access to the command's copy by directory descriptors, never by path (review F5): every
//! component is opened with `openat(…, O_NOFOLLOW)` relative to the one before it, starting from
//! a descriptor of the copy's root, so a directory swapped for a symbolic link (to `/etc`, say)
//! is refused (`ELOOP`/`ENOTDIR`) instead of followed, whenever the swap happens, and no host
//! path limit (`PATH_MAX`) applies. Files are opened `O_NONBLOCK` too (a FIFO does not block the
//! open) and checked with `fstat` before they are read.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};

use super::MATERIALIZED_AT;

/// How every directory is opened.
const DIRECTORY: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// How a file is opened for reading.
const FILE: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC);

/// One entry of a directory, as `lstat` sees it.
#[derive(Debug)]
pub(super) struct Entry {
    pub name: OsString,
    pub kind: FileType,
    pub size: u64,
    /// Whether its modification time is still the one every materialized file gets.
    pub materialized: bool,
    /// Whether it is a character device `0:0`: what an overlay's upper layer marks a deletion
    /// with (a whiteout).
    pub whiteout: bool,
}

/// Open the copy's root (a directory Trellis made; not itself a link).
pub(super) fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(root, DIRECTORY, Mode::empty())?)
}

/// Open the directory `name` in `dir`, refusing a link.
pub(super) fn open_dir(dir: impl AsFd, name: &OsStr) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::openat(dir, name, DIRECTORY, Mode::empty())?)
}

/// The entries of `dir` (without `.` and `..`), read as they are asked for (a directory of
/// millions of entries is not listed whole before the walk's bounds apply), each examined
/// without following links; an entry that cannot be examined is an error of its own, and an
/// error reading the directory ends the listing with it.
pub(super) fn entries(dir: &OwnedFd) -> std::io::Result<Entries<'_>> {
    Ok(Entries {
        fd: dir,
        dir: Dir::read_from(dir)?,
        ended: false,
    })
}

/// See [`entries`].
pub(super) struct Entries<'a> {
    fd: &'a OwnedFd,
    dir: Dir,
    ended: bool,
}

impl Iterator for Entries<'_> {
    type Item = std::io::Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.ended {
            let entry = match self.dir.next()? {
                Ok(entry) => entry,
                Err(e) => {
                    self.ended = true;
                    return Some(Err(e.into()));
                }
            };
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name).to_os_string();
            return Some(
                rustix::fs::statat(self.fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| entry_of(name, &st))
                    .map_err(Into::into),
            );
        }
        None
    }
}

fn entry_of(name: OsString, st: &Stat) -> Entry {
    Entry {
        name,
        kind: FileType::from_raw_mode(st.st_mode),
        size: u64::try_from(st.st_size).unwrap_or(0),
        materialized: st.st_mtime == MATERIALIZED_AT && st.st_mtime_nsec == 0,
        whiteout: FileType::from_raw_mode(st.st_mode) == FileType::CharacterDevice && st.st_rdev == 0,
    }
}

/// True when `dir` is an overlay's opaque directory (`user.overlay.opaque` is `y`, as overlayfs
/// writes it with `userxattr`): it hides everything of the lower layer at its path.
pub(super) fn is_opaque(dir: &OwnedFd) -> bool {
    let mut value = [0u8; 4];
    matches!(rustix::fs::fgetxattr(dir, OPAQUE_XATTR, &mut value[..]), Ok(n) if value[..n].starts_with(b"y"))
}

/// The extended attribute overlayfs marks an opaque directory with, when mounted with `userxattr`.
pub(super) const OPAQUE_XATTR: &str = "user.overlay.opaque";

/// Open the regular file at `relative` (to the copy's root) to read its `size` bytes, or fail:
/// every component is opened without following a link, and a file that is no longer a regular
/// file of that size (by `fstat` of the open descriptor) is refused. The caller reads it to
/// exactly `size` bytes (a streamed write refuses a file that grew or shrank meanwhile).
pub(super) fn open_exactly(root: &OwnedFd, relative: &Path, size: u64) -> std::io::Result<std::fs::File> {
    let names: Vec<&OsStr> = relative
        .components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(std::io::Error::other("not a plain relative path")),
        })
        .collect::<Result<_, _>>()?;
    let Some((file_name, dirs)) = names.split_last() else {
        return Err(std::io::Error::other("no file name"));
    };
    let mut dir: Option<OwnedFd> = None;
    for name in dirs {
        let next = match &dir {
            Some(fd) => open_dir(fd, name)?,
            None => open_dir(root, name)?,
        };
        dir = Some(next);
    }
    let fd = match &dir {
        Some(fd) => rustix::fs::openat(fd, *file_name, FILE, Mode::empty())?,
        None => rustix::fs::openat(root, *file_name, FILE, Mode::empty())?,
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() != size {
        return Err(std::io::Error::other(
            "changed after the command ended (no longer a regular file of the size seen)",
        ));
    }
    Ok(file)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;

    /// The file as [`open_exactly`] opens it, read whole.
    fn read_exactly(root: &OwnedFd, relative: &Path, size: u64) -> std::io::Result<Vec<u8>> {
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut open_exactly(root, relative, size)?, &mut data)?;
        Ok(data)
    }

    /// A copy with `d/secret` in it, and a "host" directory with a file of the same size.
    fn copy_and_host() -> (tempfile::TempDir, tempfile::TempDir) {
        let copy = tempfile::tempdir().expect("tempdir");
        let host = tempfile::tempdir().expect("tempdir");
        fs::create_dir(copy.path().join("d")).expect("mkdir");
        fs::write(copy.path().join("d/secret"), "mine").expect("write");
        fs::write(host.path().join("secret"), "HOST").expect("write");
        (copy, host)
    }

    /// Review F5: the walk saw `d/secret` as a regular file of 4 bytes; then `d` became a link to a
    /// host directory holding a `secret` of the same size. The read refuses the link instead of
    /// returning the host file (a by-path open with `O_NOFOLLOW` on the last component only
    /// returned "HOST").
    #[test]
    fn a_directory_swapped_for_a_link_after_the_walk_is_not_followed() {
        let (copy, host) = copy_and_host();
        let root = open_root(copy.path()).expect("root");
        let d = open_dir(&root, OsStr::new("d")).expect("d");
        let secret = entries(&d).expect("entries").next().expect("one").expect("entry");
        assert_eq!((secret.kind, secret.size), (FileType::RegularFile, 4));
        drop(d);
        fs::rename(copy.path().join("d"), copy.path().join("d0")).expect("rename");
        symlink(host.path(), copy.path().join("d")).expect("symlink");
        let read = read_exactly(&root, Path::new("d/secret"), 4);
        assert!(read.is_err(), "read through the link: {read:?}");
        // The same file read by path, as the walk did before: the host file.
        let by_path = fs::read(copy.path().join("d/secret")).expect("by path");
        assert_eq!(by_path, b"HOST");
        // And the untouched file is read back exactly.
        assert_eq!(
            read_exactly(&root, Path::new("d0/secret"), 4).expect("d0"),
            b"mine"
        );
    }

    /// A link where a directory was is listed as a link and never opened as a directory.
    #[test]
    fn a_link_in_place_of_a_directory_is_never_entered() {
        let (copy, host) = copy_and_host();
        fs::remove_dir_all(copy.path().join("d")).expect("rm");
        symlink(host.path(), copy.path().join("d")).expect("symlink");
        let root = open_root(copy.path()).expect("root");
        let d = entries(&root)
            .expect("entries")
            .next()
            .expect("one")
            .expect("entry");
        assert_eq!(d.kind, FileType::Symlink);
        assert!(open_dir(&root, OsStr::new("d")).is_err());
        assert!(read_exactly(&root, Path::new("d/secret"), 4).is_err());
    }

    /// A file that changed size after the walk, or a FIFO in its place, is refused unread (and
    /// opening the FIFO does not block).
    #[test]
    fn a_file_that_changed_after_the_walk_is_refused() {
        let (copy, _host) = copy_and_host();
        let root = open_root(copy.path()).expect("root");
        assert!(read_exactly(&root, Path::new("d/secret"), 3).is_err());
        fs::remove_file(copy.path().join("d/secret")).expect("rm");
        rustix::fs::mknodat(&root, "d/secret", FileType::Fifo, Mode::from_raw_mode(0o600), 0)
            .expect("mkfifo");
        assert!(read_exactly(&root, Path::new("d/secret"), 0).is_err());
    }
}
