//! How bwrap is started: its options for one sandbox, and the file they are passed in.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use trellis_backend::sandbox::Network;

use super::super::seccomp::{BWRAP_ARGS, Launch};
use super::super::workdir::{Overlay, Owner};
use super::{BubblewrapSandbox, overlay};

impl BubblewrapSandbox {
    /// How to start bwrap with the options `args` and then `command` (its program and
    /// arguments): with the seccomp program for `network` when there is one, and then the
    /// options in a file bwrap reads (`--args`), so that the sandbox's init, a copy of bwrap that
    /// every command can see as its process 1, does not show them, with the host paths they name,
    /// in `/proc/1/cmdline` (security review F17).
    pub(super) fn launch(
        &self,
        args: Vec<OsString>,
        command: Vec<OsString>,
        network: &Network,
    ) -> std::io::Result<Launch> {
        match &self.syscalls {
            Ok(filter) => {
                let options = options_file(&self.work_root, self.run_as, &args)?;
                filter.launch(&self.bwrap, options, command, network)
            }
            Err(_) => {
                let mut argv = args;
                argv.push("--".into());
                argv.extend(command);
                Ok(Launch::direct(&self.bwrap, argv))
            }
        }
    }

    /// `bwrap` arguments for a sandbox rooted at `root`, with `overlays` bound over it, up to (not
    /// including) `--`. `wrapped`: bwrap starts behind the overlay wrapper (as its namespace's
    /// root), which mounted `overlays` and, when it is one, `root`.
    pub(super) fn args(
        &self,
        root: &Path,
        read_only: &[(PathBuf, String)],
        cwd: &str,
        network: &Network,
        overlays: &[Overlay],
        wrapped: bool,
    ) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::with_capacity(64);
        let mut push = |items: &[&std::ffi::OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
        push(&[
            "--unshare-all".as_ref(),
            "--die-with-parent".as_ref(),
            "--new-session".as_ref(),
        ]);
        if *network == Network::Host {
            push(&["--share-net".as_ref()]);
        }
        if self.no_nested_userns.is_ok() {
            push(&["--unshare-user".as_ref(), "--disable-userns".as_ref()]);
        } else if wrapped {
            push(&["--unshare-user".as_ref()]);
        }
        if wrapped {
            // bwrap starts as the overlay wrapper's namespace root: the command gets its own ids.
            let Owner { uid, gid } = self.runs_as();
            let (uid, gid) = (uid.to_string(), gid.to_string());
            push(&["--uid".as_ref(), uid.as_ref(), "--gid".as_ref(), gid.as_ref()]);
        }
        if self.runs_as().uid == 0 {
            push(&["--cap-drop".as_ref(), "ALL".as_ref()]);
        }
        push(&["--hostname".as_ref(), "sandbox".as_ref()]);
        push(&["--bind".as_ref(), root.as_os_str(), "/".as_ref()]);
        a.extend(self.system_mounts.iter().cloned());
        a.extend(overlay::binds(overlays));
        let mut push = |items: &[&std::ffi::OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
        for (host, inside) in read_only {
            push(&["--ro-bind".as_ref(), host.as_os_str(), inside.as_ref()]);
        }
        push(&["--chdir".as_ref(), cwd.as_ref()]);
        if self.syscalls.is_ok() {
            a.extend(BWRAP_ARGS.iter().map(OsString::from));
        }
        a
    }
}

/// A file holding bwrap's options `args`, NUL-separated as `bwrap --args` reads them: private to
/// the commands' user (`run_as`, when Trellis is root), removed when dropped.
fn options_file(
    work_root: &Path,
    run_as: Option<Owner>,
    args: &[OsString],
) -> std::io::Result<tempfile::NamedTempFile> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let mut file = tempfile::Builder::new()
        .prefix("trellis-bwrap-args-")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(work_root)?;
    if let Some(owner) = run_as {
        std::os::unix::fs::chown(file.path(), Some(owner.uid), Some(owner.gid))?;
    }
    for arg in args {
        file.write_all(arg.as_bytes())?;
        file.write_all(b"\0")?;
    }
    file.flush()?;
    Ok(file)
}
