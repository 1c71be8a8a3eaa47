//! The conformance suite, run against every backend: in-thread state, local disk, object_store's
//! `memory://` and `file://`, S3 (moto), GCS (fake-gcs-server) and Azure (azurite), and a composite.
//!
//! The three cloud targets need the emulators that `cargo xtask test` starts. Without them (plain
//! `cargo test`) those tests print that they were skipped; with `TRELLIS_EMULATORS=required` (set by
//! `cargo xtask test`) a missing emulator fails the test instead.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::conformance::{self, Target};
use trellis_backend::testing::{bucket, emulator, s3_backend};
use trellis_backend::{
    Backend, CompositeBackend, FilesystemBackend, ObjectStoreBackend, StateBackend, StoreOptions, VirtualPath,
};

fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "conformance-{tag}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_state() {
    conformance::run("state", || async { Target::whole(Arc::new(StateBackend::new())) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_local_disk() {
    let dirs = std::sync::Mutex::new(Vec::new());
    conformance::run("local-disk", || {
        let dir = tempfile::tempdir().unwrap();
        let backend = FilesystemBackend::new(dir.path()).unwrap();
        dirs.lock().unwrap().push(dir);
        async move { Target::whole(Arc::new(backend)) }
    })
    .await;
}

/// The same contract with every operation on the blocking pool, as for a root on a network file
/// system (by default small ones run on the calling task: `local/offload.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_local_disk_all_offloaded() {
    let dirs = std::sync::Mutex::new(Vec::new());
    conformance::run("local-disk (all offloaded)", || {
        let dir = tempfile::tempdir().unwrap();
        let backend = FilesystemBackend::new(dir.path()).unwrap().offload_all();
        dirs.lock().unwrap().push(dir);
        async move { Target::whole(Arc::new(backend)) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_object_store_memory() {
    conformance::run("memory://", || async {
        Target::whole(Arc::new(
            ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap(),
        ))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_object_store_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    conformance::run("file://", || {
        let url = format!("file://{}/{}", root.display(), unique("file"));
        async move {
            Target::whole(Arc::new(
                ObjectStoreBackend::from_url(&url, &StoreOptions::default()).unwrap(),
            ))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_s3() {
    let Some(endpoint) = emulator("TRELLIS_S3_ENDPOINT", "S3 conformance (moto)") else {
        return;
    };
    conformance::run("s3", || {
        let backend = s3_backend(&endpoint, &unique("s3"));
        async move { Target::whole(Arc::new(backend)) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_gcs() {
    let Some(endpoint) = emulator("TRELLIS_GCS_ENDPOINT", "GCS conformance (fake-gcs-server)") else {
        return;
    };
    let Some(account) = emulator("TRELLIS_GCS_SERVICE_ACCOUNT", "GCS conformance (fake-gcs-server)") else {
        return;
    };
    conformance::run("gcs", || {
        let options = StoreOptions::default()
            .with("google_service_account", account.clone())
            .with("google_base_url", endpoint.clone());
        let backend =
            ObjectStoreBackend::from_url(&format!("gs://{}/{}", bucket(), unique("gcs")), &options).unwrap();
        async move { Target::whole(Arc::new(backend)) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_azure() {
    let Some(endpoint) = emulator("TRELLIS_AZURE_ENDPOINT", "Azure conformance (azurite)") else {
        return;
    };
    conformance::run("azure", || {
        let options = StoreOptions::default().with("azure_storage_use_emulator", "true");
        // object_store reads the emulator's address from this variable in emulator mode.
        assert_eq!(
            std::env::var("AZURITE_BLOB_STORAGE_URL").ok().as_deref(),
            Some(endpoint.as_str())
        );
        let backend =
            ObjectStoreBackend::from_url(&format!("az://{}/{}", bucket(), unique("az")), &options).unwrap();
        async move { Target::whole(Arc::new(backend)) }
    })
    .await;
}

#[test]
fn unknown_store_options_are_refused() {
    let err = ObjectStoreBackend::from_url(
        "s3://bucket/p",
        &StoreOptions::default().with("aws_endpiont", "x"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("unknown option `aws_endpiont`"), "{err}");
    let err = ObjectStoreBackend::from_url("memory://", &StoreOptions::default().with("timeout", "1s"))
        .unwrap_err();
    assert!(
        matches!(err, trellis_backend::BackendError::InvalidPath { .. }),
        "{err}"
    );
    let err = ObjectStoreBackend::from_url("ftp://host/x", &StoreOptions::default()).unwrap_err();
    assert!(err.to_string().contains("ftp://host/x"), "{err}");
    assert!(
        ObjectStoreBackend::from_url(
            "s3://bucket/p",
            &StoreOptions::default().with("AWS_REGION", "eu-west-1")
        )
        .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_composite_mount() {
    conformance::run("composite", || async {
        let mounted: Arc<dyn Backend> =
            Arc::new(ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap());
        let composite = CompositeBackend::new(Arc::new(StateBackend::new()))
            .mount("/mnt/data/", mounted)
            .unwrap();
        Target {
            backend: Arc::new(composite),
            base: VirtualPath::parse("/mnt/data").unwrap(),
        }
    })
    .await;
}

/// The same through a directory on local disk mounted in a composite, so its `local_dirs` (moved
/// below the mount point) are checked against the files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_composite_local_mount() {
    let dirs = std::sync::Mutex::new(Vec::new());
    conformance::run("composite/local-disk", || {
        let dir = tempfile::tempdir().unwrap();
        let mounted: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
        dirs.lock().unwrap().push(dir);
        let composite = CompositeBackend::new(Arc::new(StateBackend::new()))
            .mount("/workspace", mounted)
            .unwrap();
        async move {
            Target {
                backend: Arc::new(composite),
                base: VirtualPath::parse("/workspace").unwrap(),
            }
        }
    })
    .await;
}

/// Create-only and version-checked writes tag the object (`trelliswrite` metadata) so that a write
/// whose reply was lost can be recognised; the tag must survive the round trip on every store
/// (the fault tests in `tests/tests/integration/object_store_faults/` exercise the recovery on all three).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_carry_a_readable_write_tag() {
    use object_store::{Attribute, GetOptions, path::Path};
    use trellis_backend::WriteMode;

    let mut stores = vec![("memory://".to_owned(), StoreOptions::default(), String::new())];
    if let Some(endpoint) = emulator("TRELLIS_S3_ENDPOINT", "write tag (moto)") {
        let prefix = unique("tag-s3");
        stores.push((
            format!("s3://{}/{prefix}", bucket()),
            StoreOptions::s3_compatible(endpoint, "test", "test"),
            prefix,
        ));
    }
    if let (Some(endpoint), Some(account)) = (
        emulator("TRELLIS_GCS_ENDPOINT", "write tag (fake-gcs-server)"),
        emulator("TRELLIS_GCS_SERVICE_ACCOUNT", "write tag (fake-gcs-server)"),
    ) {
        let prefix = unique("tag-gcs");
        stores.push((
            format!("gs://{}/{prefix}", bucket()),
            StoreOptions::default()
                .with("google_service_account", account)
                .with("google_base_url", endpoint),
            prefix,
        ));
    }
    if emulator("TRELLIS_AZURE_ENDPOINT", "write tag (azurite)").is_some() {
        let prefix = unique("tag-az");
        stores.push((
            format!("az://{}/{prefix}", bucket()),
            StoreOptions::default().with("azure_storage_use_emulator", "true"),
            prefix,
        ));
    }
    for (url, options, prefix) in stores {
        let backend = ObjectStoreBackend::from_url(&url, &options).unwrap();
        let path = VirtualPath::parse("/tagged.txt").unwrap();
        let key = Path::from(if prefix.is_empty() {
            "tagged.txt".to_owned()
        } else {
            format!("{prefix}/tagged.txt")
        });
        let tag = |backend: &ObjectStoreBackend| {
            let (store, key) = (backend.store().clone(), key.clone());
            async move {
                let head = GetOptions {
                    head: true,
                    ..GetOptions::default()
                };
                let found = store.get_opts(&key, head).await.unwrap();
                found
                    .attributes
                    .get(&Attribute::Metadata("trelliswrite".into()))
                    .map(|v| v.to_string())
            }
        };
        let first = backend
            .write(&path, "a".into(), WriteMode::CreateNew)
            .await
            .unwrap();
        let created = tag(&backend).await;
        assert!(
            created.as_ref().is_some_and(|t| t.len() == 32),
            "{url}: {created:?}"
        );
        backend
            .write(&path, "b".into(), WriteMode::IfVersion(first.version.unwrap()))
            .await
            .unwrap();
        let updated = tag(&backend).await;
        assert!(
            updated.is_some() && updated != created,
            "{url}: {created:?} then {updated:?}"
        );
        backend
            .write(&path, "c".into(), WriteMode::Overwrite)
            .await
            .unwrap();
        assert_eq!(tag(&backend).await, None, "{url}: an overwrite carries no tag");
    }
}

/// Which stores list a key range natively (`Backend::list_files_between` answers), through the
/// wrappers a skills source goes through: S3, GCS and the in-memory store do, also scoped and
/// mounted; state, local disk and Azure (whose emulator ignores `startFrom`) do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_ranges_are_native_where_the_store_lists_from_a_key() {
    async fn native(backend: Arc<dyn Backend>) -> bool {
        let base = VirtualPath::parse("/lib").unwrap();
        let after = VirtualPath::parse("/lib/a").unwrap();
        match backend.list_files_between(&base, Some(&after), None, 10).await {
            Some(listing) => {
                listing.unwrap();
                true
            }
            None => false,
        }
    }
    let memory = || -> Arc<dyn Backend> {
        Arc::new(ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap())
    };
    assert!(native(memory()).await);
    let scoped = trellis_backend::ScopedBackend::new(memory(), VirtualPath::parse("/users/u1").unwrap());
    assert!(native(Arc::new(scoped)).await);
    let mounted = CompositeBackend::new(Arc::new(StateBackend::new()))
        .mount("/lib", memory())
        .unwrap();
    assert!(native(Arc::new(mounted)).await);
    assert!(!native(Arc::new(StateBackend::new())).await);
    let dir = tempfile::tempdir().unwrap();
    assert!(!native(Arc::new(FilesystemBackend::new(dir.path()).unwrap())).await);

    if let Some(endpoint) = emulator("TRELLIS_S3_ENDPOINT", "S3 key ranges (moto)") {
        assert!(
            native(Arc::new(s3_backend(&endpoint, &unique("ranges")))).await,
            "S3 lists from start-after"
        );
    }
    if let (Some(endpoint), Some(account)) = (
        emulator("TRELLIS_GCS_ENDPOINT", "GCS key ranges (fake-gcs-server)"),
        emulator("TRELLIS_GCS_SERVICE_ACCOUNT", "GCS key ranges (fake-gcs-server)"),
    ) {
        let options = StoreOptions::default()
            .with("google_service_account", account)
            .with("google_base_url", endpoint);
        let gcs = ObjectStoreBackend::from_url(&format!("gs://{}/{}", bucket(), unique("ranges")), &options)
            .unwrap();
        assert!(native(Arc::new(gcs)).await, "GCS lists from startOffset");
    }
}
