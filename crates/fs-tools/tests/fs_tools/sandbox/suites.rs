//! The conformance suite on each sandbox and backend, and the capability plumbing of
//! [`Backend::sandbox`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use trellis_backend::sandbox::SandboxedBackend;
use trellis_backend::testing::{emulator, s3_backend};
use trellis_backend::{Backend, CompositeBackend, FilesystemBackend, Sandbox};
use trellis_fs_tools::sandbox::UnsandboxedShell;

use super::{bwrap, conformance, p, state};

fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "sandbox-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bubblewrap_over_state() {
    let Some(sandbox) = bwrap("bubblewrap conformance over state") else {
        return;
    };
    conformance::run("bubblewrap/state", sandbox, || async { state() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bubblewrap_over_local_disk() {
    let Some(sandbox) = bwrap("bubblewrap conformance over local disk") else {
        return;
    };
    let dirs = std::sync::Mutex::new(Vec::new());
    conformance::run("bubblewrap/local-disk", sandbox, || {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
        dirs.lock().unwrap().push(dir);
        async move { backend }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bubblewrap_over_s3() {
    let Some(sandbox) = bwrap("bubblewrap conformance over S3") else {
        return;
    };
    let Some(endpoint) = emulator("TRELLIS_S3_ENDPOINT", "sandbox over S3 (moto)") else {
        return;
    };
    conformance::run("bubblewrap/s3", sandbox, || {
        let backend: Arc<dyn Backend> = Arc::new(s3_backend(&endpoint, &unique("s3")));
        async move { backend }
    })
    .await;
}

/// The whole suite again with every call keyed to one thread, so each case's fresh store is
/// served from a base last refreshed for another case's store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bubblewrap_over_s3_with_a_thread_cache() {
    let Some(sandbox) =
        super::thread_cache::cached_bwrap("bubblewrap conformance over S3 with a thread cache")
    else {
        return;
    };
    let Some(endpoint) = emulator("TRELLIS_S3_ENDPOINT", "sandbox over S3 (moto), thread cache") else {
        return;
    };
    let keyed = Arc::new(super::thread_cache::Keyed(sandbox, unique("keyed")));
    conformance::run("bubblewrap/s3/thread-cache", keyed, || {
        let backend: Arc<dyn Backend> = Arc::new(s3_backend(&endpoint, &unique("s3-keyed")));
        async move { backend }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsandboxed_shell_over_state() {
    conformance::run(
        "unsandboxed/state",
        Arc::new(UnsandboxedShell::default()),
        || async { state() },
    )
    .await;
}

#[tokio::test]
async fn a_composite_asks_the_backend_that_owns_the_working_directory() {
    let shell: Arc<dyn Sandbox> = Arc::new(UnsandboxedShell::default());
    let plain = CompositeBackend::new(state());
    assert!(plain.sandbox(&p("/")).is_none());
    let mixed = CompositeBackend::new(state())
        .mount("/work", Arc::new(SandboxedBackend::new(state(), shell.clone())))
        .unwrap();
    assert_eq!(
        mixed
            .sandbox(&p("/work/x"))
            .map(|s| s.name().to_owned())
            .as_deref(),
        Some("unsandboxed")
    );
    assert!(mixed.sandbox(&p("/elsewhere")).is_none());
    let by_default = CompositeBackend::new(Arc::new(SandboxedBackend::new(state(), shell)))
        .mount("/skills", state())
        .unwrap();
    assert!(by_default.sandbox(&p("/")).is_some());
    assert!(by_default.sandbox(&p("/skills/a")).is_none());
}
