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
