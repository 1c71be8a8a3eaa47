//! A bubblewrap command's network beyond "none": the host's (`--share-net`), or allowed domains
//! through a proxy (`proxy`) that runs in Trellis, reached from the sandbox's own
//! network namespace through the bridge program bound into it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use trellis_backend::sandbox::{Network, SandboxError};

use super::super::proxy::{BRIDGE_INSIDE, PORT, Proxy, ProxyLimits, SOCKET_INSIDE, bridge::BRIDGE_ARG};
use super::BubblewrapSandbox;

/// The name of the bridge program looked for beside the running executable.
const BRIDGE_PROGRAM: &str = "trellis-sandbox-bridge";

/// The bridge program: `configured` when given (it must exist), else `trellis-sandbox-bridge`
/// beside the running executable or one directory up (where cargo puts a package's programs for
/// its tests), else why there is none.
pub(super) fn find_bridge(configured: Option<&Path>) -> Result<PathBuf, String> {
    reachable(locate_bridge(configured)?)
}

fn locate_bridge(configured: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = configured {
        return std::fs::canonicalize(path)
            .map_err(|e| format!("the bridge program {}: {e}", path.display()));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the running executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    [dir.join(BRIDGE_PROGRAM), dir.join("..").join(BRIDGE_PROGRAM)]
        .into_iter()
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
        .ok_or_else(|| {
            format!(
                "no {BRIDGE_PROGRAM} program beside {} (BubblewrapConfig::network_bridge names one)",
                exe.display()
            )
        })
}

/// `program` where bwrap can bind it from. bwrap sets up its mounts inside a user namespace that
/// maps none of the host's users but the command's, so a source under a directory others cannot
/// enter (a checkout under `/root`, mode 0700) is "Permission denied" even to root. Such a program
/// is copied once into `TMPDIR/trellis-sandbox-bridge-<uid>/` (a directory of this user's, mode
/// 0755, checked to be owned by it and writable by no one else), named by the original's device,
/// inode, size and modification time, so processes share the copy and a rebuilt program gets a new
/// one.
fn reachable(program: PathBuf) -> Result<PathBuf, String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let others_enter = |dir: &Path| std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0);
    let meta =
        std::fs::metadata(&program).map_err(|e| format!("the bridge program {}: {e}", program.display()))?;
    if meta.permissions().mode() & 0o005 == 0o005 && program.ancestors().skip(1).all(others_enter) {
        return Ok(program);
    }
    let fail = |what: &str, e: std::io::Error| {
        format!("cannot stage the bridge program for the sandbox ({what}): {e}")
    };
    let uid = rustix::process::geteuid().as_raw();
    let dir = std::env::temp_dir().join(format!("{BRIDGE_PROGRAM}-{uid}"));
    match std::fs::create_dir(&dir) {
        Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| fail("mode of its directory", e))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail("its directory", e)),
    }
    let dir_meta = std::fs::symlink_metadata(&dir).map_err(|e| fail("its directory", e))?;
    if !dir_meta.is_dir() || dir_meta.uid() != uid || dir_meta.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "cannot stage the bridge program for the sandbox: {} is not a directory of this user's that only it can write",
            dir.display()
        ));
    }
    let staged = dir.join(format!(
        "{}-{}-{}-{}",
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000
    ));
    if std::fs::metadata(&staged).is_ok_and(|m| m.len() == meta.len()) {
        return Ok(staged);
    }
    let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(|e| fail("a temporary file", e))?;
    std::io::copy(
        &mut std::fs::File::open(&program).map_err(|e| fail("reading it", e))?,
        tmp.as_file_mut(),
    )
    .map_err(|e| fail("copying it", e))?;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| fail("its mode", e))?;
    tmp.persist(&staged)
        .map_err(|e| fail("naming the copy", e.error))?;
    Ok(staged)
}

/// What a command with allowed domains gets besides the usual sandbox: the proxy, alive for the
/// call, and what to add to bwrap's arguments.
pub(super) struct Proxied {
    pub proxy: Proxy,
    bridge: PathBuf,
}

impl Proxied {
    /// `bwrap` arguments binding the proxy's socket and the bridge program into the sandbox
    /// (read-only; both under `/run`, which is never the view's) and announcing the proxy.
    pub(super) fn args(&self) -> Vec<OsString> {
        let proxy_url = format!("http://127.0.0.1:{PORT}");
        let mut a: Vec<OsString> = vec![
            "--ro-bind".into(),
            self.proxy.socket().into(),
            SOCKET_INSIDE.into(),
            "--ro-bind".into(),
            self.bridge.clone().into(),
            BRIDGE_INSIDE.into(),
        ];
        // curl reads only the lowercase `http_proxy`; most others read either.
        for name in [
            "http_proxy",
            "https_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "all_proxy",
        ] {
            a.extend(["--setenv".into(), name.into(), proxy_url.clone().into()]);
        }
        for name in ["no_proxy", "NO_PROXY"] {
            a.extend(["--unsetenv".into(), name.into()]);
        }
        a
    }

    /// What runs first inside the sandbox, before the command's own program and arguments.
    pub(super) fn prefix() -> Vec<OsString> {
        vec![
            BRIDGE_INSIDE.into(),
            BRIDGE_ARG.into(),
            PORT.to_string().into(),
            SOCKET_INSIDE.into(),
            "--".into(),
        ]
    }
}

impl BubblewrapSandbox {
    /// For a request with allowed domains, its proxy (started) and bridge; for the others, nothing.
    /// A request for domains where there is no bridge is an error, never more or less network.
    pub(super) fn proxied(&self, network: &Network) -> Result<Option<Proxied>, SandboxError> {
        let Network::Domains(allowed) = network else {
            return Ok(None);
        };
        let bridge = self.bridge.as_ref().map_err(|why| SandboxError::Io {
            context: "allowing domains".into(),
            source: std::io::Error::other(why.clone()),
        })?;
        let proxy = Proxy::start(
            &self.work_root,
            self.run_as,
            allowed.clone(),
            ProxyLimits::default(),
        )
        .map_err(SandboxError::io("starting the sandbox's network proxy"))?;
        Ok(Some(Proxied {
            proxy,
            bridge: bridge.clone(),
        }))
    }
}

/// The report's line for the network.
pub(super) fn report_detail(bridge: &Result<PathBuf, String>) -> String {
    let base = "network namespace with only its own loopback";
    match bridge {
        Ok(_) => format!(
            "{base}; a request for allowed domains gets HTTP(S) through Trellis's proxy (CONNECT and plain HTTP at 127.0.0.1:{PORT} inside, {} connections at most, IP addresses and loopback, private and link-local destinations refused unless listed); a request for `host` shares the host's",
            ProxyLimits::default().max_connections
        ),
        Err(why) => {
            format!("{base}; allowed domains are unavailable ({why}); a request for `host` shares the host's")
        }
    }
}
