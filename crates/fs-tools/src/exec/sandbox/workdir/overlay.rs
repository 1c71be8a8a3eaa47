//! A directory on local disk exposed to a command through an overlay instead of a copy: the real
//! directory is the lower layer (never written), a fresh private directory the upper layer, and
//! what the command changed is exactly what the upper layer holds afterwards (see
//! `docs/sandbox.md`, "Local directories: overlays").
//!
//! [`Overlay::write_back`] walks only the upper layer, with the copy's rules (`walk.rs`,
//! `nofollow.rs`, `protected.rs`): new and changed regular files are written through the backend,
//! whiteouts (character devices `0:0`) and opaque directories (`user.overlay.opaque`) are
//! deletions of the lower files they hide.
//!
//! **Base versions.** Nothing was read from the backend before the command, so the version a
//! changed file is checked against is the one the store holds when it is written back. What makes
//! that safe is the start mark: [`Overlay::prepare`] creates a file next to the upper layer just
//! before the command starts and keeps its status-change time (`ctime`), taken from the kernel's
//! clock. A lower file whose `ctime` is not older than the mark was changed (written, replaced,
//! renamed, chmod-ed) while the command ran, by someone else — the command cannot write the lower
//! layer — and writing the command's version or deleting it is a conflict: the store's file is
//! kept and the command's version goes beside it, as with a copy. Before the command starts,
//! [`Overlay::wait_past_start`] waits for the clock to pass the mark, so a change stamped with the
//! mark's own time happened before the command could read the file (the command saw it). Limits:
//! a file system that keeps coarser times than the kernel's clock (FAT's 2 s, some network file
//! systems), one whose `ctime` is set by another machine's clock (a network file system's
//! server), or a system clock set backwards during the command can hide a change; the backend's
//! version check still catches any change that lands after the write-back's `stat`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use trellis_backend::sandbox::{ExecFiles, FileChange, FileChangeKind, NotWritten, NotWrittenReason};
use trellis_backend::{BackendError, LocalDir, VirtualPath};

use super::protected::protected;
use super::walk::{Plan, Walked, walk};
use super::write_back::{Basis, Writer, delete_if_unchanged, denied, failed, late};
use super::{Owner, nofollow};

/// One directory of the view mounted through an overlay for one command.
#[derive(Debug)]
pub struct Overlay {
    /// Where it is in the view.
    pub at: VirtualPath,
    /// The real directory: the lower layer.
    pub lower: PathBuf,
    /// The private directory holding this overlay's layers and mount points.
    state: PathBuf,
    /// The upper layer: `state/upper`, or the copy for the root overlay of a thread's base.
    upper: PathBuf,
    /// The start mark's status-change time (seconds, nanoseconds).
    started: (i64, i64),
    /// The commands' user when it is not Trellis's (Trellis runs as root): what the write-back
    /// creates in the real directory is handed to it, as the copy was.
    owner: Option<Owner>,
}

impl Overlay {
    /// Make the private directories for `dir` in `state` (which must exist, private to Trellis
    /// and the command's user), owned by `owner` when given, and set the start mark.
    pub(crate) fn prepare(state: PathBuf, dir: &LocalDir, owner: Option<Owner>) -> std::io::Result<Self> {
        std::fs::create_dir(&state)?;
        for name in ["lower", "upper", "work", "merged"] {
            std::fs::create_dir(state.join(name))?;
        }
        let mark = state.join("started");
        std::fs::write(&mark, b"")?;
        if let Some(owner) = owner {
            for name in ["", "lower", "upper", "work", "merged", "started"] {
                std::os::unix::fs::chown(state.join(name), Some(owner.uid), Some(owner.gid))?;
            }
        }
        let meta = std::fs::symlink_metadata(&mark)?;
        Ok(Self {
            at: dir.at.clone(),
            lower: dir.host.clone(),
            upper: state.join("upper"),
            state,
            started: (meta.ctime(), meta.ctime_nsec()),
            owner,
        })
    }

    /// The overlay of the view's root for a command whose files come from a thread's cached base:
    /// `base` is the lower layer, `upper` (the command's copy, which holds the rest of the view
    /// and the mount points) the upper one. Its write-back is the copy's
    /// ([`Workdir::write_back`](super::Workdir::write_back)), checked against the versions the
    /// base holds; the base does not change while the command runs (the command holds its lock).
    pub(crate) fn prepare_root(
        state: PathBuf,
        base: &Path,
        upper: &Path,
        owner: Option<Owner>,
    ) -> std::io::Result<Self> {
        let dir = LocalDir {
            at: VirtualPath::root(),
            host: base.to_path_buf(),
        };
        let mut me = Self::prepare(state, &dir, owner)?;
        me.upper = upper.to_path_buf();
        Ok(me)
    }

    /// The empty directory the lower layer is bind-mounted on first (its own name may hold what
    /// an overlay's options cannot spell, like `,` or `:`).
    pub fn lower_mount(&self) -> PathBuf {
        self.state.join("lower")
    }

    /// The upper layer: what the command changed.
    pub fn upper(&self) -> PathBuf {
        self.upper.clone()
    }

    /// The overlay's work directory.
    pub fn work(&self) -> PathBuf {
        self.state.join("work")
    }

    /// Where the overlay is mounted, to be bound at [`Overlay::at`] inside the sandbox.
    pub fn merged(&self) -> PathBuf {
        self.state.join("merged")
    }

    /// Make `path` (below [`Overlay::at`]) a directory in the upper layer, for a working directory
    /// the lower layer does not have.
    pub(super) fn make_dir(&self, path: &VirtualPath, owner: Option<Owner>) -> std::io::Result<()> {
        let Some(rel) = path.relative_to(&self.at).filter(|r| !r.is_empty()) else {
            return Ok(());
        };
        let mut dir = self.upper();
        for segment in rel.split('/') {
            dir.push(segment);
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    if let Some(owner) = owner {
                        std::os::unix::fs::chown(&dir, Some(owner.uid), Some(owner.gid))?;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Wait until a file changed from now on gets a status-change time later than the start
    /// mark's (at most one tick of the kernel's coarse clock, usually over by the time the command
    /// is launched; never more than 50 ms). Call right before the command starts: a change stamped
    /// with the mark's own time then happened before the command could read the file, so the
    /// command saw it, and only a later time means a change underneath.
    pub fn wait_past_start(&self) {
        let tick = self.state.join("tick");
        let deadline = Instant::now() + std::time::Duration::from_millis(50);
        loop {
            let _ = std::fs::remove_file(&tick);
            let stamped = std::fs::File::create_new(&tick)
                .and_then(|f| f.metadata())
                .map(|m| (m.ctime(), m.ctime_nsec()));
            match stamped {
                Ok(now) if now > self.started => return,
                Ok(_) if Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                _ => return,
            }
        }
    }

    /// Where `path` (below [`Overlay::at`]) is in the real directory.
    fn host(&self, path: &VirtualPath) -> Option<PathBuf> {
        let rel = path.relative_to(&self.at)?;
        Some(
            rel.split('/')
                .filter(|s| !s.is_empty())
                .fold(self.lower.clone(), |p, s| p.join(s)),
        )
    }

    /// The directories on the way to `path` in the real directory that do not exist yet (the
    /// backend's write will make them), outermost first.
    pub(super) fn missing_dirs(&self, path: &VirtualPath) -> Vec<PathBuf> {
        if self.owner.is_none() {
            return Vec::new();
        }
        let Some(host) = self.host(path) else {
            return Vec::new();
        };
        let mut missing: Vec<PathBuf> = host
            .ancestors()
            .skip(1)
            .take_while(|d| {
                d.starts_with(&self.lower) && *d != self.lower && std::fs::symlink_metadata(d).is_err()
            })
            .map(Path::to_path_buf)
            .collect();
        missing.reverse();
        missing
    }

    /// After the backend wrote `path`: hand it, and the directories `made` for it, to the
    /// commands' user when that is not Trellis's own (see [`Overlay::owner`]), so the next command
    /// can change them in place as it could its copy. Never follows a link.
    pub(super) fn hand_over(&self, path: &VirtualPath, made: &[PathBuf]) {
        let (Some(owner), Some(host)) = (self.owner, self.host(path)) else {
            return;
        };
        for p in made.iter().chain([&host]) {
            let _ = std::os::unix::fs::lchown(p, Some(owner.uid), Some(owner.gid));
        }
    }

    /// Whether the lower file at `path` changed since the command started: its status-change
    /// time is later than the start mark's (see the module and [`Overlay::wait_past_start`]). A
    /// file that is not there is not changed.
    pub(super) fn changed_underneath(&self, path: &VirtualPath) -> bool {
        let Some(host) = self.host(path) else {
            return true;
        };
        match std::fs::symlink_metadata(&host) {
            Ok(meta) => (meta.ctime(), meta.ctime_nsec()) > self.started,
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        }
    }

    /// Write back what the command changed in this overlay (see the module): call only once
    /// every process of the command is gone.
    pub(super) async fn write_back(
        self,
        files: &ExecFiles,
        tag: &str,
        deadline: Instant,
        changes: &mut Vec<FileChange>,
        not_written: &mut Vec<NotWritten>,
    ) {
        let root = match nofollow::open_root(&self.upper()) {
            Ok(root) => Arc::new(root),
            Err(e) => {
                not_written.push(failed(
                    &self.at,
                    format!("the overlay's upper layer could not be opened: {e}"),
                ));
                return;
            }
        };
        let plan = Plan {
            root: Arc::clone(&root),
            at: self.at.clone(),
            overlay: true,
            skip: Vec::new(),
            files: files.clone(),
            copied: Default::default(),
            counted: (0, 0),
            deadline,
        };
        let walked = match tokio::task::spawn_blocking(move || walk(plan)).await {
            Ok(walked) => walked,
            Err(e) => {
                not_written.push(failed(
                    &self.at,
                    format!("the walk of the upper layer failed: {e}"),
                ));
                return;
            }
        };
        let Walked {
            changed,
            not_written: refused,
            stopped,
            mut files_left,
            whiteouts,
            opaque,
            upper,
            ..
        } = walked;
        not_written.extend(refused);
        // Deletions: each whiteout's lower file (or every file of its lower directory), and the
        // lower files an opaque directory hides without replacing them; listed before anything is
        // written, so what the write-back itself adds (a conflict copy) is not among them.
        let mut hidden: Vec<(VirtualPath, bool)> = whiteouts
            .into_iter()
            .map(|p| (p, false))
            .chain(opaque.into_iter().map(|p| (p, true)))
            .collect();
        // One below another is covered by it.
        let bases: Vec<VirtualPath> = hidden.iter().map(|(p, _)| p.clone()).collect();
        hidden.retain(|(p, _)| !bases.iter().any(|b| b != p && p.starts_with(b)));
        let mut doomed = Vec::new();
        for (base, opaque) in hidden {
            if let Some(stopped) = &stopped {
                not_written.push(NotWritten {
                    path: base.to_string(),
                    reason: stopped.not_deleted("the upper layer"),
                });
                continue;
            }
            let listing = match files.backend.list_files(&base, files.write_back.max_files).await {
                Ok(listing) => listing,
                Err(e) => {
                    not_written.push(failed(&base, e.to_string()));
                    continue;
                }
            };
            if listing.truncated {
                not_written.push(NotWritten {
                    path: base.to_string(),
                    reason: NotWrittenReason::TooLarge(format!(
                        "not deleted: it holds more than {} files, the write-back limit",
                        files.write_back.max_files
                    )),
                });
                continue;
            }
            // Below an opaque directory, a file the upper layer holds is written, not deleted.
            doomed.extend(
                listing
                    .files
                    .into_iter()
                    .filter(|e| !(opaque && upper.contains(&e.path))),
            );
        }
        let mut writer = Writer {
            files,
            root: &root,
            tag,
            deadline,
            files_left: &mut files_left,
            changes,
            not_written,
        };
        writer.write_all(changed, &Basis::Overlay(&self)).await;
        for entry in doomed {
            let path = entry.path;
            if !files.may_write(&path) {
                not_written.push(denied(&path));
                continue;
            }
            if let Some(what) = protected(&path) {
                not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: NotWrittenReason::Protected(what.into()),
                });
                continue;
            }
            if Instant::now() >= deadline {
                not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: late(files.write_back.max_time),
                });
                continue;
            }
            if self.changed_underneath(&path) {
                not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: NotWrittenReason::Conflict { kept_at: None },
                });
                continue;
            }
            match delete_if_unchanged(files.backend.as_ref(), &path, entry.version.as_ref()).await {
                Ok(true) => changes.push(FileChange {
                    path,
                    kind: FileChangeKind::Deleted,
                }),
                Ok(false) => not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: NotWrittenReason::Conflict { kept_at: None },
                }),
                Err(BackendError::NotFound { .. }) => {}
                Err(e) => not_written.push(failed(&path, e.to_string())),
            }
        }
    }
}

impl Drop for Overlay {
    /// overlayfs leaves `work/work` with mode 000, which its owner could not list to remove it.
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(self.work().join("work"), std::fs::Permissions::from_mode(0o700));
    }
}

/// True when `path` is a directory owned by `uid`, the test for exposing it through an overlay to
/// commands running as `uid` (see `docs/sandbox.md`).
pub fn owned_by(path: &Path, uid: u32) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == uid)
}
