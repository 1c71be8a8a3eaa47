//! The sandbox: one conformance suite every [`Sandbox`] passes (`conformance`), run on bubblewrap
//! over in-process state, local disk and S3 (moto) and on the unsandboxed shell (`suites`); the
//! escape suite (`escapes`), the resource limits (`limits`) and the system calls its seccomp filter
//! refuses (`side_doors`) of bubblewrap.
//!
//! Bubblewrap tests need `bwrap` and user namespaces. Without them (plain `cargo test` on a host
//! without bubblewrap) they print that they were skipped; with `TRELLIS_SANDBOX=required` (set by
//! `cargo xtask test`, which installs bubblewrap) a missing sandbox fails them instead.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod anchors;
mod background;
mod cache;
mod cgroups;
mod conformance;
mod escapes;
mod host_hooks;
mod limits;
mod network;
mod overlay;
mod private;
mod root;
mod side_doors;
mod suites;
mod thread_cache;
mod write_back_caps;

use std::sync::{Arc, OnceLock};

use trellis_backend::{Backend, BackendExt, StateBackend, VirtualPath, WriteMode};
use trellis_fs_tools::sandbox::{BubblewrapConfig, BubblewrapSandbox};

/// The shared bubblewrap sandbox, or `None` (after saying so) when it is not required.
pub fn bwrap(test: &str) -> Option<Arc<BubblewrapSandbox>> {
    static SANDBOX: OnceLock<Result<Arc<BubblewrapSandbox>, String>> = OnceLock::new();
    let made = SANDBOX.get_or_init(|| {
        BubblewrapSandbox::new(BubblewrapConfig::default())
            .map(Arc::new)
            .map_err(|e| e.to_string())
    });
    match made {
        Ok(s) => Some(Arc::clone(s)),
        Err(e) if std::env::var("TRELLIS_SANDBOX").as_deref() == Ok("required") => {
            panic!("{test}: bubblewrap is unavailable but TRELLIS_SANDBOX=required: {e}")
        }
        Err(e) => {
            eprintln!("skipped: {test} (bubblewrap unavailable: {e})");
            None
        }
    }
}

pub fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

/// Write `files` (path, content) into `backend`.
pub async fn seed(backend: &dyn Backend, files: &[(&str, &str)]) {
    for (path, content) in files {
        backend
            .write(&p(path), content.as_bytes().to_vec().into(), WriteMode::Overwrite)
            .await
            .unwrap();
    }
}

pub async fn text(backend: &dyn Backend, path: &str) -> Option<String> {
    backend.read_to_string(&p(path)).await.ok()
}

pub fn state() -> Arc<dyn Backend> {
    Arc::new(StateBackend::new())
}
