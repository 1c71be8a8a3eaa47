//! The way out of a sandbox whose request allows some domains ([`Network::Domains`]): an HTTP
//! proxy Trellis runs outside the sandbox, one per command, listening on a Unix socket that is
//! bound into the sandbox, and the bridge ([`bridge`]) that makes it reachable at
//! `127.0.0.1:3128` inside the sandbox's own network namespace (which has nothing else).
//!
//! ```text
//! command ──TCP 127.0.0.1:3128──▶ bridge (inside) ──Unix socket──▶ Proxy (Trellis, outside) ──▶ allowed host
//! ```
//!
//! The command's network namespace has only its loopback, so a program that ignores
//! `http_proxy`/`https_proxy` has no network at all; a command that connects to the Unix socket
//! itself meets the same proxy. The proxy serves HTTP/1 `CONNECT` (any protocol in a tunnel,
//! usually TLS) and plain `http://` requests in absolute form, and checks each with
//! [`policy`]: the host must be an allowed domain or a listed address, names are resolved by the
//! proxy and only their public (or listed) addresses are connected to. Everything is bounded:
//! [`ProxyLimits::max_connections`] connections and tunnels at once, request and response heads
//! of at most [`MAX_HEADER_BYTES`], a time to read a request head, to resolve and to connect; and
//! every connection ends when the command's call does (dropping the [`Proxy`]).
//!
//! [`Network::Domains`]: trellis_backend::sandbox::Network::Domains

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::UnixListener;
use tokio::sync::{Semaphore, watch};
use trellis_backend::sandbox::AllowedDomains;

use super::workdir::{Owner, PRIVATE_DIR};

pub mod bridge;
mod http;
pub(crate) mod policy;

/// The port the bridge listens on inside the sandbox (on its own loopback).
pub(crate) const PORT: u16 = 3128;

/// Where the bridge program is bound inside the sandbox.
pub(crate) const BRIDGE_INSIDE: &str = "/run/trellis/bridge";

/// Where the proxy's socket is bound inside the sandbox.
pub(crate) const SOCKET_INSIDE: &str = "/run/trellis/proxy.sock";

/// The largest request or response head the proxy reads (hyper's minimum is 8 KiB).
pub(crate) const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Bounds of one command's proxy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProxyLimits {
    /// Connections to the proxy plus open tunnels, at once.
    pub max_connections: usize,
    /// To read a request head.
    pub header_timeout: Duration,
    /// To resolve a name.
    pub resolve_timeout: Duration,
    /// To connect to one address.
    pub connect_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            header_timeout: Duration::from_secs(30),
            resolve_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// One connection's place among [`ProxyLimits::max_connections`].
pub(super) type Slot = Arc<std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>;

/// What every request of one proxy is checked and bounded by.
pub(super) struct Context {
    allowed: AllowedDomains,
    limits: ProxyLimits,
    slots: Arc<Semaphore>,
    /// Changes when the proxy is dropped: every connection and tunnel ends.
    closed: watch::Receiver<()>,
}

/// One command's proxy: listening while it lives, every connection closed when dropped.
#[derive(Debug)]
pub(crate) struct Proxy {
    dir: tempfile::TempDir,
    _close: watch::Sender<()>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listen on a Unix socket in a new private directory under `work_root` (handed to `run_as`,
    /// the commands' user, when set), admitting `allowed`.
    pub(crate) fn start(
        work_root: &Path,
        run_as: Option<Owner>,
        allowed: AllowedDomains,
        limits: ProxyLimits,
    ) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("trellis-proxy-")
            .permissions(std::fs::Permissions::from_mode(PRIVATE_DIR))
            .tempdir_in(work_root)?;
        let socket = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&socket)?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
        if let Some(owner) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(owner.uid), Some(owner.gid))?;
            std::os::unix::fs::chown(&socket, Some(owner.uid), Some(owner.gid))?;
        }
        let (close, closed) = watch::channel(());
        let ctx = Arc::new(Context {
            allowed,
            limits,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            closed,
        });
        let accept = tokio::spawn(accept_loop(listener, ctx));
        Ok(Self {
            dir,
            _close: close,
            accept,
        })
    }

    /// The socket on the host.
    pub(crate) fn socket(&self) -> PathBuf {
        self.dir.path().join("proxy.sock")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Dropping `_close` ends every connection and tunnel; this ends the accepting.
        self.accept.abort();
    }
}

async fn accept_loop(listener: UnixListener, ctx: Arc<Context>) {
    loop {
        let Ok(permit) = ctx.slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, say: wait rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ctx = ctx.clone();
        let mut closed = ctx.closed.clone();
        tokio::spawn(async move {
            // The connection's slot; a tunnel takes it over, so it stays taken while the tunnel is
            // open, after the connection itself has ended.
            let slot: Slot = Arc::new(std::sync::Mutex::new(Some(permit)));
            let service_ctx = ctx.clone();
            let service =
                hyper::service::service_fn(move |req| http::handle(req, service_ctx.clone(), slot.clone()));
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(ctx.limits.header_timeout)
                .max_buf_size(MAX_HEADER_BYTES)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                _ = connection => {}
                _ = closed.changed() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests;
