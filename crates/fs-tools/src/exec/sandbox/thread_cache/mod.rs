//! [`ThreadCache`]: a thread's files from an object store kept on local disk between its commands,
//! so that a command after the first fetches only what changed (see `docs/sandbox.md`, "Object-store
//! spaces: the thread's cached base").
//!
//! **Layout.** `<work root>/trellis-thread-cache-<uid>-<commands' uid>/` (Trellis's own, 0700, or
//! 0711 when commands run as another user, who may pass through but not list; refused when it is a
//! link, another's, or writable by others) holds one directory per cache key (a SHA-256 of
//! [`ExecFiles::cache_key`](trellis_backend::sandbox::ExecFiles::cache_key), a thread's id): its
//! `lock`, its `manifest` and its `base/`, the files. Only a command whose call gives the same key
//! is ever shown a base; and before every command the base is made to hold exactly that call's
//! listing (what it may read, with the versions the store gives now), so even a key shared by
//! mistake never shows a file the call could not read.
//!
//! **Refresh.** [`ThreadCache::refresh`] takes the key's lock (`flock`, released by the kernel
//! however the process ends; a key already in use by a running command is not waited for: that
//! command copies as before), reads the manifest (path → version, size, modification time, mode),
//! removes the manifest, deletes what the listing no longer has or has with another version,
//! fetches what is new or changed, and writes a new manifest (to a temporary name, then renamed).
//! Every file is written with the copy's fixed modification time, so the write-back tells a file
//! the command changed from one it only looked at, as with a copy.
//!
//! **A crash mid-refresh** (`kill -9`, power aside) leaves a base without a manifest: the next
//! refresh cannot know which files are whole, so it removes the base and fetches everything. A
//! manifest that is not exactly what was written (its first line holds a SHA-256 of the rest) is
//! treated the same way.
//!
//! **Bounds.** Each base holds at most what one command may be given (its listing is counted
//! against the call's limits). All bases of one cache together are bounded by
//! the `max_bytes` it was opened with: when a sandbox opens the cache, and after each refresh that fetched
//! something (only a fetch makes a base grow), a pass removes the keys unused for [`MAX_IDLE`] and
//! then the least recently used ones until the manifests' byte counts sum to at most the bound,
//! never a key a command holds (see [`evict`] for the cost, and what a crash mid-eviction leaves).
//! An evicted thread's next command finds no base and fetches everything, as its first did.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use trellis_backend::sandbox::SandboxError;
use trellis_backend::{Backend, BackendError, Entry, Version, VirtualPath};

use super::workdir::{Owner, PRIVATE_DIR, materialized_mtime, write_copy};

mod evict;

/// How many files are fetched at once.
const FETCH_BATCH: usize = 256;

/// The manifest's first line starts with this, then the SHA-256 of the rest, a space and the sum
/// of the files' sizes (what an eviction pass counts without reading the rest).
const MAGIC: &str = "trellis-thread-cache 2 ";

/// A key's directory unused this long is removed by the next eviction pass, whatever the bound.
const MAX_IDLE: Duration = Duration::from_secs(7 * 86_400);

/// What the base holds for one file: it is the store's file when all of these match the listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Held {
    version: String,
    size: u64,
    /// RFC 3339, when the store gives one (versions are unique per store, not across stores).
    modified: Option<String>,
    executable: bool,
}

/// A file of the listing, as the base must hold it.
pub(crate) struct Wanted<'a> {
    pub entry: &'a Entry,
    pub executable: bool,
}

/// The per-thread caches of one sandbox (see the module).
#[derive(Debug)]
pub struct ThreadCache {
    root: PathBuf,
    /// Who the base's files must belong to (the commands' user), when not Trellis.
    owner: Option<Owner>,
    /// Views with fewer read-write files are copied instead.
    min_files: usize,
    /// What all bases together may hold, in bytes of file contents.
    max_bytes: u64,
}

/// One key's base, refreshed and locked for one command: dropping it releases the lock.
#[derive(Debug)]
pub struct Base {
    _lock: fs::File,
    dir: PathBuf,
    /// Path → (version, size) of every file the base holds.
    held: BTreeMap<VirtualPath, (Option<Version>, u64)>,
    /// Files fetched by the refresh that made it.
    pub fetched: usize,
}

impl Base {
    /// The files' directory: the view's root.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every file it holds, with the version and size it has.
    pub fn held(&self) -> &BTreeMap<VirtualPath, (Option<Version>, u64)> {
        &self.held
    }
}

impl ThreadCache {
    /// The caches under `parent` for commands run by `owner` (when not Trellis's own user), used
    /// for views of at least `min_files` files, all bases together holding at most `max_bytes`
    /// bytes of files that no running command holds (0: every base is evicted by the first pass
    /// after its command ends; `u64::MAX`: no bound but the idle time).
    pub fn open(
        parent: &Path,
        owner: Option<Owner>,
        min_files: usize,
        max_bytes: u64,
    ) -> std::io::Result<Self> {
        let uid = rustix::process::getuid().as_raw();
        // One directory per pair of users: a base belongs to the user whose commands mount it.
        let runs_as = owner.map_or(uid, |o| o.uid);
        let root = parent.join(format!("trellis-thread-cache-{uid}-{runs_as}"));
        let mode = if owner.is_some() { 0o711 } else { PRIVATE_DIR };
        match fs::create_dir(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let meta = fs::symlink_metadata(&root)?;
        if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
            return Err(std::io::Error::other(format!(
                "{} is not a directory of uid {uid} that only it can write",
                root.display()
            )));
        }
        fs::set_permissions(&root, fs::Permissions::from_mode(mode))?;
        let me = Self {
            root,
            owner,
            min_files,
            max_bytes,
        };
        evict::evict(&me.root, MAX_IDLE, me.max_bytes, None);
        Ok(me)
    }

    /// The fewest files a view must have to be served from a base.
    pub fn min_files(&self) -> usize {
        self.min_files
    }

    /// Where the caches are.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The base of `key`, made to hold exactly `wanted` (fetched from `backend`), locked for one
    /// command. `Ok(None)`: another command of the key holds it now, or a file has no version
    /// (nothing to tell a stale copy by); the caller copies instead.
    pub(crate) async fn refresh(
        &self,
        key: &str,
        backend: &dyn Backend,
        wanted: &[Wanted<'_>],
    ) -> Result<Option<Base>, SandboxError> {
        let io = |what: &str| SandboxError::io(format!("{what} in the thread cache"));
        if wanted.iter().any(|w| w.entry.version.is_none()) {
            return Ok(None);
        }
        let name = sha256_hex(key.as_bytes());
        let dir = self.root.join(&name);
        let Some(lock) = lock_key(&dir).map_err(io("locking a base"))? else {
            return Ok(None);
        };
        let _ = lock.set_modified(SystemTime::now());
        let base = dir.join("base");
        let manifest = dir.join("manifest");
        let mut held = match fs::read(&manifest).ok().and_then(|m| parse(&m)) {
            Some(held) => held,
            None => {
                // No manifest, or not the one written: which files are whole is unknown.
                remove_all(&base).map_err(io("removing a stale base"))?;
                BTreeMap::new()
            }
        };
        if !base.is_dir() {
            held.clear();
            // The commands' user's alone: the key's directory lets others pass through, and a
            // thread id may be guessed.
            fs::create_dir(&base).map_err(io("creating the base"))?;
            self.hand_over(&base);
        }
        fs::set_permissions(&base, fs::Permissions::from_mode(PRIVATE_DIR)).map_err(io("setting a mode"))?;
        // From here until the new manifest is in place, a crash leaves no manifest.
        match fs::remove_file(&manifest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("removing the manifest")(e)),
        }
        let want: BTreeMap<String, Held> = wanted
            .iter()
            .map(|w| (w.entry.path.as_str().to_owned(), held_of(w)))
            .collect();
        let stale: Vec<String> = held
            .iter()
            .filter(|(path, h)| want.get(*path) != Some(h))
            .map(|(path, _)| path.clone())
            .collect();
        for path in stale {
            held.remove(&path);
            remove_file(&base, &path).map_err(io("removing a stale file"))?;
        }
        let fetch: Vec<&Wanted<'_>> = wanted
            .iter()
            .filter(|w| !held.contains_key(w.entry.path.as_str()))
            .collect();
        let mut fetched = 0;
        let stamp = materialized_mtime();
        let mut made_dirs = BTreeSet::new();
        for batch in fetch.chunks(FETCH_BATCH) {
            let paths: Vec<VirtualPath> = batch.iter().map(|w| w.entry.path.clone()).collect();
            let reads = backend.read_many(&paths, None).await;
            for (w, read) in batch.iter().zip(reads) {
                let read = match read {
                    Ok(read) => read,
                    // Deleted since the listing: not in the view.
                    Err(BackendError::NotFound { .. }) => continue,
                    Err(e) => {
                        // What is held so far is whole: keep it for the next refresh.
                        let _ = write_manifest(&dir, &held);
                        return Err(e.into());
                    }
                };
                let host = host_path(&base, w.entry.path.as_str());
                // Whatever a crash left there is not the file.
                let _ = fs::remove_file(&host);
                if let Err(e) = write_copy(&host, &read.bytes, w.executable, stamp) {
                    // A file where the view also has a directory (object stores allow both).
                    tracing::debug!(path = %w.entry.path, error = %e, "not cached");
                    continue;
                }
                fetched += 1;
                self.hand_over_file(&base, &host, &mut made_dirs);
                // Changed since the listing: the base holds what was read, under its version.
                let mut h = held_of(w);
                h.size = read.bytes.len() as u64;
                match read.version {
                    Some(v) if v.as_str() != h.version => {
                        h.version = v.as_str().to_owned();
                        h.modified = None;
                    }
                    Some(_) => {}
                    None => {
                        remove_file(&base, w.entry.path.as_str()).map_err(io("removing a file"))?;
                        continue;
                    }
                }
                held.insert(w.entry.path.as_str().to_owned(), h);
            }
        }
        write_manifest(&dir, &held).map_err(io("writing the manifest"))?;
        if fetched > 0 {
            // This key is locked (and named): never evicted by its own refresh.
            evict::evict(&self.root, MAX_IDLE, self.max_bytes, Some(&name));
        }
        let held = held
            .into_iter()
            .filter_map(|(path, h)| {
                Some((
                    VirtualPath::parse(&path).ok()?,
                    (Some(Version::new(h.version)), h.size),
                ))
            })
            .collect();
        Ok(Some(Base {
            _lock: lock,
            dir: base,
            held,
            fetched,
        }))
    }

    /// Give `path` to the commands' user, when that is not Trellis.
    fn hand_over(&self, path: &Path) {
        if let Some(owner) = self.owner {
            let _ = std::os::unix::fs::lchown(path, Some(owner.uid), Some(owner.gid));
        }
    }

    /// Give a fetched file and the directories made for it to the commands' user (an overlay in
    /// its user namespace copies up only what it owns).
    fn hand_over_file(&self, base: &Path, file: &Path, made: &mut BTreeSet<PathBuf>) {
        if self.owner.is_none() {
            return;
        }
        self.hand_over(file);
        for dir in file.ancestors().skip(1).take_while(|d| *d != base) {
            if made.insert(dir.to_path_buf()) {
                self.hand_over(dir);
            }
        }
    }
}

/// Lock the key at `dir`, making it when missing. `Ok(None)`: a command holds it. A key evicted
/// between opening its lock and taking it is made anew.
fn lock_key(dir: &Path) -> std::io::Result<Option<fs::File>> {
    for _ in 0..3 {
        match fs::create_dir(dir) {
            Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(0o711))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let lock_path = dir.join("lock");
        let lock = match fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
        {
            Ok(lock) => lock,
            // Evicted since it was made or found.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        if evict::holds(&lock, &lock_path) {
            return Ok(Some(lock));
        }
    }
    // Evicted again and again: copy this time.
    Ok(None)
}

fn held_of(w: &Wanted<'_>) -> Held {
    Held {
        version: w
            .entry
            .version
            .as_ref()
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default(),
        size: w.entry.size,
        modified: w
            .entry
            .modified
            .map(|m| m.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)),
        executable: w.executable,
    }
}

/// The manifest's entries, or `None` when it is not exactly what [`write_manifest`] wrote.
fn parse(bytes: &[u8]) -> Option<BTreeMap<String, Held>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (first, body) = text.split_once('\n')?;
    let (sum, bytes) = first.strip_prefix(MAGIC)?.split_once(' ')?;
    if sum != sha256_hex(body.as_bytes()) {
        return None;
    }
    let held: BTreeMap<String, Held> = serde_json::from_str(body).ok()?;
    (bytes.parse::<u64>().ok()? == total(&held)).then_some(held)
}

/// The bytes of files `held` lists.
fn total(held: &BTreeMap<String, Held>) -> u64 {
    held.values().map(|h| h.size).fold(0, u64::saturating_add)
}

fn write_manifest(dir: &Path, held: &BTreeMap<String, Held>) -> std::io::Result<()> {
    let body = serde_json::to_string(held).map_err(std::io::Error::other)?;
    let text = format!("{MAGIC}{} {}\n{body}", sha256_hex(body.as_bytes()), total(held));
    let temp = dir.join("manifest.new");
    fs::write(&temp, text)?;
    fs::rename(&temp, dir.join("manifest"))
}

/// The SHA-256 of `bytes`, in hex.
fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn host_path(base: &Path, path: &str) -> PathBuf {
    path.split('/')
        .filter(|s| !s.is_empty())
        .fold(base.to_path_buf(), |p, s| p.join(s))
}

/// Remove the file at `path` in `base` and the directories it leaves empty.
fn remove_file(base: &Path, path: &str) -> std::io::Result<()> {
    let host = host_path(base, path);
    match fs::remove_file(&host) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    for dir in host.ancestors().skip(1).take_while(|d| *d != base) {
        if fs::remove_dir(dir).is_err() {
            break;
        }
    }
    Ok(())
}

fn remove_all(dir: &Path) -> std::io::Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
