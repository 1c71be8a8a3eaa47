//! The command's private copy of the view: materializing it on local disk, and writing what the
//! command changed back through the backend.
//!
//! [`Workdir::materialize`] copies into a fresh private directory every file the command can reach:
//! all of the view outside the on-reach mounts, and the reached folders of those (see
//! `reach.rs`). It records, for each file outside read-only mounts, the backend version it copied
//! and the local size, and sets the copy's modification time to a fixed instant in the past, so that
//! any write by the command — even one of the same size within the same clock tick — shows.
//!
//! [`Workdir::write_back`] runs after every process of the command is gone. It walks and reads the
//! copy by directory descriptors, never following a link (`nofollow.rs`), and, for every file that
//! is new, changed or gone:
//!
//! * refuses what the view does not let the agent write ([`NotWrittenReason::Denied`](trellis_backend::sandbox::NotWrittenReason::Denied));
//! * refuses anything that is not a regular file: a planted symbolic link is never followed, never
//!   read and never written back ([`NotWrittenReason::NotARegularFile`](trellis_backend::sandbox::NotWrittenReason::NotARegularFile));
//! * writes a new file create-only, a changed one only if the backend still holds the version that
//!   was copied, and deletes a removed one only if it is unchanged; when someone else changed the
//!   file meanwhile, the write is a [`NotWrittenReason::Conflict`](trellis_backend::sandbox::NotWrittenReason::Conflict) and the command's version is
//!   kept beside it at `<path>.conflict-<id>` — nothing is overwritten and nothing is lost;
//! * stays within the view's [`WriteBackLimits`](trellis_backend::sandbox::WriteBackLimits) on
//!   entries, bytes and time (`walk.rs`): what is over one is named as
//!   [`NotWrittenReason::TooLarge`](trellis_backend::sandbox::NotWrittenReason::TooLarge), and once
//!   the walk stopped short, or could not read part of the copy, nothing is deleted.
//!
//! Directories the caller chose to mount through overlays (`local` in [`Workdir::materialize`])
//! are not copied: each gets an [`Overlay`], its mount point in the copy, and its own write-back
//! from the overlay's upper layer (`overlay.rs`), after the copy's.
//!
//! Directories at the top of the copy that the sandbox mounts its system over (`/usr`, `/etc`,
//! `/proc`, …, see [`RESERVED`]) are neither materialized nor written back; the view's files there
//! are listed in [`Workdir::shadowed`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use trellis_backend::sandbox::{ExecFiles, ExecRequest, MountAccess, SandboxError};
use trellis_backend::{Backend, BackendError, Entry, LocalDir, Version, VirtualPath};

use super::folder_cache::FolderCache;
use super::reach::{Reached, reached};
use super::thread_cache::{Base, ThreadCache, Wanted};

mod nofollow;
mod overlay;
mod protected;
mod walk;
mod write_back;

/// Top-level names the sandbox mounts its own system directories at.
pub const RESERVED: &[&str] = &[
    "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "proc", "dev", "sys", "tmp", "run",
];

/// The mode of a command's copy and of the skill folder cache: its user's alone. The files and
/// directories below keep ordinary modes (0644/0755): no other user can reach them through it.
pub(crate) const PRIVATE_DIR: u32 = 0o700;

/// How many files are read from the backend at once while materializing.
const READ_BATCH: usize = 256;

/// The modification time every materialized file gets, in seconds since the epoch (2001-09-09),
/// so any write shows.
const MATERIALIZED_AT: i64 = 1_000_000_000;

/// [`MATERIALIZED_AT`] as a time.
pub(crate) fn materialized_mtime() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(MATERIALIZED_AT.unsigned_abs())
}

/// What was copied for one file (outside read-only mounts, which are never walked back).
#[derive(Debug, Clone)]
struct Copied {
    version: Option<Version>,
    size: u64,
    /// Whether the rules let the command's changes to it be written back.
    writable: bool,
}

/// Who should own the copy (the sandbox may run the command as another user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

pub use overlay::{Overlay, owned_by};
pub(crate) use protected::read_only_in_mounts;

/// A command's private copy of the view, and the overlays of its local directories.
#[derive(Debug)]
pub struct Workdir {
    dir: tempfile::TempDir,
    /// The thread's cached base under the copy, when the view's read-write files come from a
    /// [`ThreadCache`]: the copy is then this overlay's upper layer (dropped before
    /// `overlay_state`).
    root_overlay: Option<Overlay>,
    /// Local directories mounted through overlays instead of copied (dropped before
    /// `overlay_state`).
    overlays: Vec<Overlay>,
    /// Holds the overlays' layers and mount points, outside the copy (the command must not
    /// reach them).
    overlay_state: Option<tempfile::TempDir>,
    copied: BTreeMap<VirtualPath, Copied>,
    read_only: Vec<VirtualPath>,
    shadowed: Vec<VirtualPath>,
    bound: Vec<(PathBuf, VirtualPath)>,
    /// Files and bytes the view held for this command, as the materialization counted them
    /// against [`ExecFiles::max_files`] and [`ExecFiles::max_bytes`].
    counted: (usize, u64),
    /// The thread's base, locked until the write-back is done (dropped last).
    base: Option<Base>,
}

impl Workdir {
    /// Copy what `request` can reach of `files` into a new private directory under `parent`,
    /// owned by `owner` when given. Reached folders of on-reach mounts come from `cache` when one is
    /// given and the folder can be cached (see [`Workdir::bound`]); otherwise they are copied too.
    /// The directories of `local` are not copied: each gets an [`Overlay`] (see
    /// [`Workdir::overlays`]), which the sandbox must mount at its path; the caller chose them
    /// (read-write, not the root, nothing else of the view below them).
    ///
    /// With a `thread` cache and a [`ExecFiles::cache_key`], the read-write files the copy would
    /// hold come from the key's base instead, refreshed to this call's listing (only what changed
    /// is fetched): the copy is then the upper layer of [`Workdir::root_overlay`], whose lower
    /// layer is the base, and the sandbox must mount that overlay as the root instead of the copy.
    /// When the base is busy (another command of the thread runs) the files are copied.
    pub async fn materialize(
        files: &ExecFiles,
        request: &ExecRequest,
        parent: &Path,
        owner: Option<Owner>,
        cache: Option<&FolderCache>,
        thread: Option<&ThreadCache>,
        local: &[LocalDir],
    ) -> Result<Self, SandboxError> {
        // 0700 from the start: nobody else may list or enter it, even while it is filled.
        let dir = tempfile::Builder::new()
            .prefix("trellis-exec-")
            .permissions(fs::Permissions::from_mode(PRIVATE_DIR))
            .tempdir_in(parent)
            .map_err(SandboxError::io(format!(
                "creating a work directory in {}",
                parent.display()
            )))?;
        let mut me = Self {
            dir,
            root_overlay: None,
            overlays: Vec::new(),
            overlay_state: None,
            copied: BTreeMap::new(),
            read_only: Vec::new(),
            shadowed: Vec::new(),
            bound: Vec::new(),
            counted: (0, 0),
            base: None,
        };
        let local_at: Vec<&VirtualPath> = local.iter().map(|d| &d.at).collect();
        let (mut entries, folders) = me.listing(files, request, &local_at).await?;
        for (folder, listed) in folders {
            match cache {
                Some(cache) => match cache.folder(files.backend.as_ref(), &folder, &listed).await {
                    Some(host) => me.bound.push((host, folder)),
                    None => entries.extend(listed),
                },
                None => entries.extend(listed),
            }
        }
        if let (Some(thread), Some(key)) = (thread, &files.cache_key) {
            entries = me.take_from_base(thread, key, files, entries).await?;
        }
        me.copy(files, entries).await?;
        let cwd = me.host_path(&request.cwd);
        fs::create_dir_all(&cwd).map_err(SandboxError::io(format!(
            "creating the working directory {}",
            request.cwd
        )))?;
        for m in &files.mounts {
            if m.access == MountAccess::ReadOnly {
                let at = me.host_path(&m.at);
                fs::create_dir_all(&at).map_err(SandboxError::io(format!("creating {}", m.at)))?;
                me.read_only.push(m.at.clone());
            }
        }
        for (_, folder) in &me.bound {
            let at = me.host_path(folder);
            fs::create_dir_all(&at).map_err(SandboxError::io(format!("creating {folder}")))?;
        }
        if !local.is_empty() || me.base.is_some() {
            me.prepare_overlays(parent, owner, local, &request.cwd)?;
        }
        if let Some(owner) = owner {
            chown_tree(me.dir.path(), owner)?;
        }
        Ok(me)
    }

    /// The copy's root on local disk.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Where `path` is in the copy.
    pub fn host_path(&self, path: &VirtualPath) -> PathBuf {
        let rel = path.as_str().trim_start_matches('/');
        if rel.is_empty() {
            self.dir.path().to_path_buf()
        } else {
            self.dir.path().join(rel)
        }
    }

    /// Read-only parts of the view, to be mounted read-only.
    pub fn read_only(&self) -> &[VirtualPath] {
        &self.read_only
    }

    /// Reached folders served from the [`FolderCache`]: (the cached copy, where it goes). A sandbox
    /// mounts each read-only at its path (an empty directory in the copy marks the spot); one that
    /// cannot mount must not use a cache.
    pub fn bound(&self) -> &[(PathBuf, VirtualPath)] {
        &self.bound
    }

    /// Local directories to mount through overlays, outermost first: each one's
    /// [`Overlay::merged`] at its [`Overlay::at`], after the copy's root.
    pub fn overlays(&self) -> &[Overlay] {
        &self.overlays
    }

    /// Make an overlay's directories for each of `local`, and its mount point in the copy.
    fn prepare_overlays(
        &mut self,
        parent: &Path,
        owner: Option<Owner>,
        local: &[LocalDir],
        cwd: &VirtualPath,
    ) -> Result<(), SandboxError> {
        let state = tempfile::Builder::new()
            .prefix("trellis-overlay-")
            .permissions(fs::Permissions::from_mode(PRIVATE_DIR))
            .tempdir_in(parent)
            .map_err(SandboxError::io(format!(
                "creating an overlay directory in {}",
                parent.display()
            )))?;
        if let Some(owner) = owner {
            std::os::unix::fs::chown(state.path(), Some(owner.uid), Some(owner.gid)).map_err(
                SandboxError::io("handing the overlay directory to the sandbox user"),
            )?;
        }
        let mut local: Vec<&LocalDir> = local.iter().collect();
        local.sort_by_key(|d| d.at.depth());
        if let Some(base) = &self.base {
            let overlay =
                Overlay::prepare_root(state.path().join("root"), base.dir(), self.dir.path(), owner)
                    .map_err(SandboxError::io("preparing the overlay of the thread's base"))?;
            self.root_overlay = Some(overlay);
        }
        for (i, dir) in local.into_iter().enumerate() {
            let overlay = Overlay::prepare(state.path().join(i.to_string()), dir, owner)
                .map_err(SandboxError::io(format!("preparing the overlay of {}", dir.at)))?;
            if cwd.starts_with(&dir.at) {
                overlay
                    .make_dir(cwd, owner)
                    .map_err(SandboxError::io(format!("creating the working directory {cwd}")))?;
            }
            let at = self.host_path(&dir.at);
            fs::create_dir_all(&at).map_err(SandboxError::io(format!("creating {}", dir.at)))?;
            self.overlays.push(overlay);
        }
        self.overlay_state = Some(state);
        Ok(())
    }

    /// The overlay to mount as the root instead of [`Workdir::root`], when the view's files come
    /// from the thread's cached base: its lower layer is the base, its upper layer the copy.
    pub fn root_overlay(&self) -> Option<&Overlay> {
        self.root_overlay.as_ref()
    }

    /// How many files the thread's base fetched for this command (`None`: no base was used).
    pub fn fetched(&self) -> Option<usize> {
        self.base.as_ref().map(|b| b.fetched)
    }

    /// Take the read-write files of `entries` from `thread`'s base of `key`, refreshed to them;
    /// the rest (read-only mounts' files, or all when the base is busy) is returned to be copied.
    async fn take_from_base(
        &mut self,
        thread: &ThreadCache,
        key: &str,
        files: &ExecFiles,
        entries: Vec<Entry>,
    ) -> Result<Vec<Entry>, SandboxError> {
        let (cached, rest): (Vec<Entry>, Vec<Entry>) = entries.into_iter().partition(|e| {
            files
                .mount_of(&e.path)
                .is_none_or(|m| m.access == MountAccess::ReadWrite)
        });
        if cached.len() < thread.min_files() {
            return Ok(cached.into_iter().chain(rest).collect());
        }
        let wanted: Vec<Wanted<'_>> = cached
            .iter()
            .map(|entry| Wanted {
                entry,
                executable: !files.may_write(&entry.path) && entry.path.segments().any(|s| s == "scripts"),
            })
            .collect();
        let Some(base) = thread.refresh(key, files.backend.as_ref(), &wanted).await? else {
            return Ok(cached.into_iter().chain(rest).collect());
        };
        for (path, (version, size)) in base.held() {
            self.copied.insert(
                path.clone(),
                Copied {
                    version: version.clone(),
                    size: *size,
                    writable: files.may_write(path),
                },
            );
        }
        self.base = Some(base);
        Ok(rest)
    }

    /// Files of the view the sandbox's system directories hide.
    pub fn shadowed(&self) -> &[VirtualPath] {
        &self.shadowed
    }

    /// Number of writable files copied in.
    pub fn writable_files(&self) -> usize {
        self.copied.values().filter(|c| c.writable).count()
    }

    /// The files to copy: the view outside on-reach mounts; and, apart, each reached folder's.
    async fn listing(
        &mut self,
        files: &ExecFiles,
        request: &ExecRequest,
        local: &[&VirtualPath],
    ) -> Result<(Vec<Entry>, Vec<(VirtualPath, Vec<Entry>)>), SandboxError> {
        let limit = files.max_files.saturating_add(1);
        let excluded: Vec<&VirtualPath> = files
            .mounts
            .iter()
            .filter(|m| m.on_reach)
            .map(|m| &m.at)
            .chain(local.iter().copied())
            .collect();
        let mut entries = Vec::new();
        list_excluding(
            files.backend.as_ref(),
            &VirtualPath::root(),
            &excluded,
            limit,
            &mut entries,
        )
        .await?;
        let mut folders: BTreeMap<VirtualPath, Vec<Entry>> = BTreeMap::new();
        for mount in files.mounts.iter().filter(|m| m.on_reach) {
            let names = match reached(&mount.at, &request.command, &request.cwd) {
                Reached::All => None,
                Reached::Folders(names) => Some(names),
            };
            let listed = match &names {
                None => files.backend.list_files(&mount.at, limit).await?.files,
                Some(names) => {
                    let mut listed = Vec::new();
                    for name in names {
                        let Ok(folder) = mount.at.join(name) else { continue };
                        listed.extend(files.backend.list_files(&folder, limit).await?.files);
                    }
                    listed
                }
            };
            for e in listed {
                let Some(first) = e.path.relative_to(&mount.at).and_then(|r| r.split('/').next()) else {
                    continue;
                };
                // A file directly in the mount belongs to no folder: copy it like any other.
                if first.is_empty() || e.path.depth() == mount.at.depth() + 1 {
                    entries.push(e);
                    continue;
                }
                let Ok(folder) = mount.at.join(first) else {
                    continue;
                };
                folders.entry(folder).or_default().push(e);
            }
        }
        let mut seen = BTreeSet::new();
        let mut keep = |e: &Entry, shadowed: &mut Vec<VirtualPath>| {
            if e.is_dir() || !seen.insert(e.path.clone()) {
                return false;
            }
            let top = e.path.segments().next().unwrap_or("");
            if RESERVED.contains(&top) {
                shadowed.push(e.path.clone());
                return false;
            }
            files.may_read(&e.path)
        };
        entries.retain(|e| keep(e, &mut self.shadowed));
        let mut folders: Vec<(VirtualPath, Vec<Entry>)> = folders.into_iter().collect();
        for (_, listed) in &mut folders {
            listed.retain(|e| keep(e, &mut self.shadowed));
        }
        folders.retain(|(_, listed)| !listed.is_empty());
        let count = entries.len() + folders.iter().map(|(_, l)| l.len()).sum::<usize>();
        if count > files.max_files {
            return Err(SandboxError::TooLarge(format!(
                "the command can reach more than {} files; name the folders it needs",
                files.max_files
            )));
        }
        let bytes: u64 = entries
            .iter()
            .chain(folders.iter().flat_map(|(_, l)| l))
            .map(|e| e.size)
            .sum();
        if bytes > files.max_bytes {
            return Err(SandboxError::TooLarge(format!(
                "the command can reach {bytes} bytes of files, more than the limit of {}",
                files.max_bytes
            )));
        }
        self.counted = (count, bytes);
        Ok((entries, folders))
    }

    async fn copy(&mut self, files: &ExecFiles, entries: Vec<Entry>) -> Result<(), SandboxError> {
        let stale = materialized_mtime();
        for batch in entries.chunks(READ_BATCH) {
            let paths: Vec<VirtualPath> = batch.iter().map(|e| e.path.clone()).collect();
            let reads = files.backend.read_many(&paths, None).await;
            for (path, read) in paths.into_iter().zip(reads) {
                let read = match read {
                    Ok(read) => read,
                    // Deleted between the listing and the read: nothing to copy.
                    Err(BackendError::NotFound { .. }) => continue,
                    Err(e) => return Err(e.into()),
                };
                let host = self.host_path(&path);
                let writable = files.may_write(&path);
                let executable = !writable && path.segments().any(|s| s == "scripts");
                if let Err(e) = write_copy(&host, &read.bytes, executable, stale) {
                    // A file where the view also has a directory (object stores allow both).
                    tracing::debug!(%path, error = %e, "not materialized");
                    continue;
                }
                // Read-only mounts are never walked back; every other file is recorded, so that one
                // left as it was is known unchanged (and one the rules do not let the command
                // write is refused only when it did change).
                if files
                    .mount_of(&path)
                    .is_none_or(|m| m.access == MountAccess::ReadWrite)
                {
                    self.copied.insert(
                        path,
                        Copied {
                            version: read.version,
                            size: read.bytes.len() as u64,
                            writable,
                        },
                    );
                }
            }
        }
        Ok(())
    }
}

/// Every file below `dir`, leaving out what is at or below `excluded`: whole listings where nothing
/// is excluded below, `ls` level by level where something is.
async fn list_excluding(
    backend: &dyn Backend,
    dir: &VirtualPath,
    excluded: &[&VirtualPath],
    limit: usize,
    out: &mut Vec<Entry>,
) -> Result<(), SandboxError> {
    if !excluded.iter().any(|x| x.starts_with(dir)) {
        out.extend(backend.list_files(dir, limit).await?.files);
        return Ok(());
    }
    let children = match backend.ls(dir).await {
        Ok(children) => children,
        Err(BackendError::NotFound { .. }) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for child in children {
        if excluded.iter().any(|x| child.path.starts_with(x)) {
            continue;
        }
        if child.is_dir() {
            Box::pin(list_excluding(backend, &child.path, excluded, limit, out)).await?;
        } else {
            out.push(child);
        }
        if out.len() >= limit {
            break;
        }
    }
    Ok(())
}

pub(crate) fn write_copy(
    host: &Path,
    data: &[u8],
    executable: bool,
    mtime: SystemTime,
) -> std::io::Result<()> {
    if let Some(parent) = host.parent() {
        fs::create_dir_all(parent)?;
    }
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if executable { 0o755 } else { 0o644 })
        .open(host)?;
    std::io::Write::write_all(&mut &file, data)?;
    file.set_modified(mtime)
}

fn chown_tree(root: &Path, owner: Owner) -> Result<(), SandboxError> {
    let chown = |p: &Path| {
        std::os::unix::fs::lchown(p, Some(owner.uid), Some(owner.gid)).map_err(SandboxError::io(format!(
            "handing {} to the sandbox user",
            p.display()
        )))
    };
    chown(root)?;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir).map_err(SandboxError::io(format!("reading {}", dir.display())))?;
        for entry in entries.flatten() {
            let path = entry.path();
            chown(&path)?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    let _ = fs::set_permissions(root, fs::Permissions::from_mode(PRIVATE_DIR));
    Ok(())
}
