//! Exposing directories on local disk through overlays (see `docs/sandbox.md`, "Local
//! directories: overlays"): which ones, how they are mounted, and whether this host can.
//!
//! bubblewrap 0.8 has no `--overlay`, so the overlays are mounted by a wrapper around it: `unshare`
//! makes a user namespace (this process's user as its root) and a mount namespace, a shell
//! ([`MOUNT_OVERLAYS`]) bind-mounts each real directory on an empty one and mounts the overlay on
//! it, then `exec`s the rest of the launch unchanged (the seccomp shell, then `bwrap`, which binds
//! each overlay at its path). Paths reach the shell as arguments, never as part of its script. The
//! wrapper runs as the command's user, inside its control group and under its `prlimit`; it
//! `exec`s, so the process Trellis waits for and kills is still the one that becomes `bwrap`, and
//! the mounts vanish with the namespace when the command's last process is gone.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use trellis_backend::sandbox::{ExecFiles, MountAccess};
use trellis_backend::{LocalDir, VirtualPath};

use super::super::process::find_program;
use super::super::seccomp::Launch;
use super::super::workdir::{Overlay, RESERVED, owned_by, read_only_in_mounts};
use super::BubblewrapSandbox;
use trellis_backend::sandbox::Network;

/// The wrapper's script: `$1` is `mount`, `$2` a token naming this call, `$3` the number of
/// overlays, then five paths for each (the real directory, the empty directory it is bound on,
/// upper, work, where the overlay goes), then the program to become and its arguments. When a
/// mount fails it says so on a line starting with the token and exits 125 before running
/// anything (see [`mount_failed`]).
const MOUNT_OVERLAYS: &str = r#"mount=$1; token=$2; n=$3; shift 3
while [ "$n" -gt 0 ]; do
  { "$mount" --bind "$1" "$2" &&
    "$mount" -t overlay overlay -o "lowerdir=$2,upperdir=$3,workdir=$4,userxattr" "$5"; } ||
    { echo "$token: cannot mount an overlay of $1" >&2; exit 125; }
  shift 5; n=$((n - 1))
done
exec "$@""#;

/// Whether a command wrapped with `token` never ran because an overlay could not be mounted: it
/// exited 125 and its output holds the wrapper's line. The token is random for each call and never
/// reaches the command, so the command cannot fake the line.
pub(super) fn mount_failed(token: &str, exit_code: Option<i32>, output: &str) -> bool {
    exit_code == Some(125) && output.lines().any(|l| l.starts_with(token))
}

/// The programs the wrapper needs.
#[derive(Debug, Clone)]
pub(super) struct OverlayTools {
    unshare: PathBuf,
    mount: PathBuf,
}

impl OverlayTools {
    /// Find `unshare` and `mount`, and check that `work_root` can be spelled in an overlay's
    /// options (the layers live below it).
    pub(super) fn find(work_root: &Path) -> Result<Self, String> {
        let unshare = find_program("unshare").ok_or("unshare(1) not found (install util-linux)")?;
        let mount = find_program("mount").ok_or("mount(8) not found (install util-linux)")?;
        let root = work_root.to_string_lossy();
        if root.contains([',', ':', '\\', '\n']) || root != work_root.as_os_str().to_string_lossy() {
            return Err(format!(
                "the work directory {} holds a character an overlay's options cannot spell",
                work_root.display()
            ));
        }
        Ok(Self { unshare, mount })
    }

    /// `launch`, started behind the wrapper that mounts `overlays` first; `token` marks its
    /// report of a failed mount.
    pub(super) fn wrap(&self, launch: Launch, overlays: &[&Overlay], token: &str) -> Launch {
        let mut args: Vec<OsString> = vec![
            "--user".into(),
            "--map-root-user".into(),
            "--mount".into(),
            "--".into(),
            "/bin/sh".into(),
            "-c".into(),
            MOUNT_OVERLAYS.into(),
            "sh".into(),
            self.mount.clone().into(),
            token.into(),
            overlays.len().to_string().into(),
        ];
        for o in overlays {
            args.extend([
                o.lower.clone().into(),
                o.lower_mount().into(),
                o.upper().into(),
                o.work().into(),
                o.merged().into(),
            ]);
        }
        args.push(launch.program.into());
        args.extend(launch.args);
        Launch {
            program: self.unshare.clone(),
            args,
            stdin: launch.stdin,
            options: launch.options,
        }
    }
}

/// The local directories of `files` a command running as `uid` gets through overlays: those the
/// backend reports ([`Backend::local_dirs`](trellis_backend::Backend::local_dirs)) that are not the
/// root nor a system directory's place, are read-write with no other mount of the view at or
/// below them, are owned by `uid` (through an overlay the command could not change another's
/// files: it would not be their owner, as it is of its copy), and only when no rule limits what
/// the agent may read (a mount cannot leave single files out). The rest of the view is copied.
pub(super) fn chosen(files: &ExecFiles, uid: u32) -> Vec<LocalDir> {
    if files.readable.is_some() {
        return Vec::new();
    }
    let mut dirs: Vec<LocalDir> = files
        .backend
        .local_dirs()
        .into_iter()
        .filter(|d| {
            let top = d.at.segments().next().unwrap_or("");
            !d.at.is_root()
                && !RESERVED.contains(&top)
                && files
                    .mount_of(&d.at)
                    .is_none_or(|m| m.access == MountAccess::ReadWrite && !m.on_reach)
                && !files
                    .mounts
                    .iter()
                    .any(|m| m.at != d.at && m.at.starts_with(&d.at))
                && owned_by(&d.host, uid)
        })
        .collect();
    let all: Vec<VirtualPath> = dirs.iter().map(|d| d.at.clone()).collect();
    dirs.retain(|d| !all.iter().any(|a| *a != d.at && d.at.starts_with(a)));
    dirs
}

/// `bwrap` arguments that bind each overlay at its path, then, read-only over themselves, the
/// files and folders of [`read_only_in_mounts`] that exist in its real directory as what they
/// seem (no symbolic link on the way: a bind would follow it).
pub(super) fn binds(overlays: &[Overlay]) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    for o in overlays {
        a.extend(["--bind".into(), o.merged().into(), o.at.as_str().into()]);
        for rel in read_only_in_mounts() {
            if plain(&o.lower, &rel) {
                let inside = format!("{}/{rel}", o.at.as_str().trim_end_matches('/'));
                a.extend(["--ro-bind".into(), o.merged().join(&rel).into(), inside.into()]);
            }
        }
    }
    a
}

/// True when `rel` exists below `dir` and neither it nor a directory on the way is a symbolic
/// link.
fn plain(dir: &Path, rel: &str) -> bool {
    let mut path = dir.to_path_buf();
    for segment in rel.split('/') {
        path.push(segment);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => return false,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    true
}

impl BubblewrapSandbox {
    /// Whether local directories can be mounted through overlays here: a command in a sandbox
    /// with an overlay over a directory of the commands' user reads a file of it and writes one,
    /// which must land in the upper layer only.
    pub(super) fn probe_overlays(&self) -> Result<OverlayTools, String> {
        if self.runs_as().uid == 0 {
            return Err("commands run as root, whose files an overlay mounted in a user namespace would not let them change".into());
        }
        let tools = OverlayTools::find(&self.work_root)?;
        let made = |what: &str| {
            let dir = tempfile::Builder::new()
                .prefix(&format!("trellis-overlay-probe-{what}-"))
                .tempdir_in(&self.work_root)
                .map_err(|e| format!("cannot create a directory in {}: {e}", self.work_root.display()))?;
            if let Some(owner) = self.run_as {
                std::os::unix::fs::chown(dir.path(), Some(owner.uid), Some(owner.gid))
                    .map_err(|e| format!("cannot hand {} to uid {}: {e}", dir.path().display(), owner.uid))?;
            }
            Ok::<_, String>(dir)
        };
        let (lower, root, state) = (made("lower")?, made("root")?, made("state")?);
        let io = |e: std::io::Error| format!("cannot prepare the probe: {e}");
        std::fs::write(lower.path().join("seen"), b"seen\n").map_err(io)?;
        std::fs::create_dir(root.path().join("probe")).map_err(io)?;
        if let Some(owner) = self.run_as {
            for p in [lower.path().join("seen"), root.path().join("probe")] {
                std::os::unix::fs::chown(&p, Some(owner.uid), Some(owner.gid)).map_err(io)?;
            }
        }
        let dir = LocalDir {
            at: trellis_backend::VirtualPath::parse("/probe").map_err(|e| e.to_string())?,
            host: lower.path().to_path_buf(),
        };
        let overlay = Overlay::prepare(state.path().join("0"), &dir, self.run_as).map_err(io)?;
        let overlays = [overlay];
        let args = self.args(root.path(), &[], "/", &Network::None, &overlays, true);
        let command = vec![
            "/bin/sh".into(),
            "-c".into(),
            "read -r line < /probe/seen && echo made > /probe/made".into(),
        ];
        let launch = self
            .launch(args, command, &Network::None)
            .map_err(|e| format!("cannot write the seccomp program: {e}"))?;
        let launch = tools.wrap(launch, &[&overlays[0]], "trellis-overlay-probe");
        let out = self.run_probe(launch)?;
        let upper = std::fs::read(overlays[0].upper().join("made")).unwrap_or_default();
        if !out.status.success() || upper != b"made\n" || lower.path().join("made").exists() {
            return Err(format!(
                "an overlay (`unshare --user --map-root-user --mount`, `mount -t overlay … userxattr`) does not work here ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(tools)
    }
}
