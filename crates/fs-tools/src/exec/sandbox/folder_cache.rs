//! [`FolderCache`]: read-only skill folders kept on local disk between commands.
//!
//! A command that names a skill reaches its folder (see [`reach`](super::reach)). Without a cache
//! every such command lists the folder and reads every file of it from the store again; from a
//! bucket that is one round trip per file (about 160 ms for a 50-file skill on the S3 emulator,
//! `cargo xtask bench`). With it, a command lists the folder once and, when the listing shows the
//! same files with the same versions as a cached copy, mounts that copy read-only instead.
//!
//! A cached copy is keyed by a SHA-256 of the folder's path and, for every file of the listing the
//! call may read, its path, size and version — so two agents or users whose views of a folder
//! differ (a hidden file, another store behind the same path) never share a copy, and a changed
//! file makes a new one. A folder with a file that has no version is not cached. Copies are filled
//! in a temporary directory and renamed into place, so a copy is complete and never changes once
//! visible; concurrent commands may fill the same key, and one rename wins. Copies unused for an
//! hour are removed when another one is filled.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use trellis_backend::{Backend, Entry, VirtualPath};

use super::workdir::{Owner, PRIVATE_DIR, write_copy};

/// How long an unused copy is kept.
const MAX_IDLE: Duration = Duration::from_secs(3600);

/// Read-only folders on local disk, shared by the commands of one sandbox.
#[derive(Debug)]
pub struct FolderCache {
    dir: tempfile::TempDir,
}

impl FolderCache {
    /// A cache in a new private directory under `parent`. When commands run as another user
    /// (`owner`: Trellis runs as root, commands as `nobody`), the directory stays Trellis's, mode
    /// 0711: that user may pass through it to a copy whose path it is given (the mount), but not
    /// list, add, rename or replace anything. It is never the commands' user's own: that user id
    /// is shared (`nobody`), and any host daemon running as it could otherwise swap a cached skill
    /// for its own scripts (security review F13).
    pub fn new(parent: &Path, owner: Option<Owner>) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("trellis-skill-cache-")
            .permissions(std::fs::Permissions::from_mode(PRIVATE_DIR))
            .tempdir_in(parent)?;
        if owner.is_some() {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
        }
        Ok(Self { dir })
    }

    /// The local copy of `folder` holding exactly `entries` (its files, as the call's listing gave
    /// them), filled from `backend` when there is none yet. `None` when the folder cannot be cached
    /// (a file without a version, a file that changed while it was read, a local disk error); the
    /// caller then copies the files itself.
    pub(crate) async fn folder(
        &self,
        backend: &dyn Backend,
        folder: &VirtualPath,
        entries: &[Entry],
    ) -> Option<PathBuf> {
        let key = key(folder, entries)?;
        let target = self.dir.path().join(&key);
        if target.is_dir() {
            touch(&target);
            return Some(target);
        }
        let fill = tempfile::Builder::new()
            .prefix(".fill-")
            .tempdir_in(self.dir.path())
            .ok()?;
        let paths: Vec<VirtualPath> = entries.iter().map(|e| e.path.clone()).collect();
        let reads = backend.read_many(&paths, None).await;
        for (entry, read) in entries.iter().zip(reads) {
            let read = read.ok()?;
            if read.version != entry.version {
                return None;
            }
            let rel = entry.path.relative_to(folder)?;
            let executable = entry.path.segments().any(|s| s == "scripts");
            write_copy(&fill.path().join(rel), &read.bytes, executable, SystemTime::now()).ok()?;
        }
        let filled = fill.keep();
        make_traversable(&filled);
        if std::fs::rename(&filled, &target).is_err() {
            // Another command filled it first; theirs is as good.
            let _ = std::fs::remove_dir_all(&filled);
        }
        self.evict_idle();
        target.is_dir().then_some(target)
    }

    fn evict_idle(&self) {
        let Ok(entries) = std::fs::read_dir(self.dir.path()) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let idle = unused_for(entry.metadata(), now, MAX_IDLE);
            // Renamed away first (atomically), then removed: a command that looked the copy up a
            // moment ago then fails to mount it rather than mounting half of it.
            // (Names starting with `.` are fills and evictions a crash left behind: no command
            // mounts them.)
            if !idle {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let doomed = if name.starts_with('.') {
                entry.path()
            } else {
                let doomed = self.dir.path().join(format!(".evict-{name}"));
                if std::fs::rename(entry.path(), &doomed).is_err() {
                    continue;
                }
                doomed
            };
            let _ = std::fs::remove_dir_all(&doomed);
        }
    }
}

/// The key of a folder's listing, or `None` when a file has no version.
fn key(folder: &VirtualPath, entries: &[Entry]) -> Option<String> {
    let mut hash = Sha256::new();
    hash.update(folder.as_str().as_bytes());
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    for e in sorted {
        let version = e.version.as_ref()?;
        hash.update(b"\0");
        hash.update(e.path.as_str().as_bytes());
        hash.update(b"\0");
        hash.update(e.size.to_le_bytes());
        hash.update(version.as_str().as_bytes());
        // Versions are unique per store, not across stores (in-process state counts revisions
        // from 1); the modification time tells two stores' files apart.
        if let Some(modified) = e.modified {
            hash.update(b"\0");
            hash.update(
                modified
                    .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
                    .as_bytes(),
            );
        }
    }
    Some(hash.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether what `meta` describes was last modified more than `max` before `now` (`false` when
/// that cannot be told).
pub(super) fn unused_for(meta: std::io::Result<std::fs::Metadata>, now: SystemTime, max: Duration) -> bool {
    meta.and_then(|m| m.modified())
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .is_some_and(|d| d > max)
}

/// Mark a copy used now.
fn touch(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Directories of a filled copy readable and traversable (files are written 0644 or 0755).
fn make_traversable(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
}
